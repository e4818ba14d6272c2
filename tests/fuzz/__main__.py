"""Differential fuzzing campaigns from the command line.

    python -m tests.fuzz --device cpu --n 2000 [--seed S] [--jobs J] [--batch B]
    python -m tests.fuzz --device numpy --replay 1234      # one seed, printed in full
    python -m tests.fuzz --generator models --device vulkan --n 200   # model-shaped programs (models.py)

Prints each failure (seed, device, worst error, minimised program) and the
counts per outcome; exits non-zero when anything was wrong, crashed or errored.
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
import time

from .runner import FAILURES, GENERATORS, campaign, minimize, report_failure, run_batch


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="numpy",
                    help="numpy, cpu, vulkan or cuda (comma-separated for several); vulkan+gpu-form runs "
                         "lavapipe with a hardware GPU's kernels (workgroup reductions, recomputed transcendentals); "
                         "vulkan+tensor-form with CUDA's tensor-core products too (unrounded: tests.fuzz.check), "
                         "vulkan+coop-form+f16 with Vulkan's cooperative-matrix ones (stand-in); "
                         "a +recompute suffix (cpu+recompute) recomputes every value it can where it is read "
                         "(lowering.rematerialise)")
    ap.add_argument("--generator", default="ops", choices=sorted(GENERATORS),
                    help="ops: random op trees (gen.py); models: model-shaped blocks composed (models.py)")
    ap.add_argument("--n", type=int, default=100, help="programs per device")
    ap.add_argument("--seed", type=int, default=0, help="first seed (seeds are consecutive)")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes at once")
    ap.add_argument("--batch", type=int, default=8, help="programs per worker process")
    ap.add_argument("--nice", type=int, default=10, help="niceness of the workers")
    ap.add_argument("--replay", type=int, default=None, help="run one seed and print its program")
    ap.add_argument("--no-minimize", action="store_true", help="report failures without minimising them")
    ap.add_argument("--minimize-budget", type=float, default=240, help="seconds per failure")
    ap.add_argument("--json", default=None, help="write every result to this file")
    args = ap.parse_args(argv)

    devices = args.device.split(",")
    generate = GENERATORS[args.generator]
    if args.replay is not None:
        prog = generate(args.replay)
        bad = 0
        for device in devices:
            r = run_batch([(0, prog, device)])[0]
            print(report_failure(prog, device, r))
            print(json.dumps(r, indent=1))
            bad += r["outcome"] in FAILURES
        return 1 if bad else 0

    seeds = list(range(args.seed, args.seed + args.n))
    summary, everything = {}, []
    for device in devices:
        start = time.time()
        results = campaign(device, seeds, jobs=args.jobs, batch=args.batch, nice=args.nice,
                           generator=args.generator)
        summary[device] = (collections.Counter(r["outcome"] for r in results.values()), time.time() - start)
        everything += list(results.values())
        for seed, r in sorted(results.items()):
            if r["outcome"] in FAILURES:
                prog = generate(seed)
                small = None if args.no_minimize else minimize(prog, device, r, args.minimize_budget)
                print(report_failure(prog, device, r, small), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(everything, f)
    print("\n=== summary")
    bad = 0
    for device, (counts, secs) in summary.items():
        print(f"{device}: {dict(sorted(counts.items()))} in {secs:.0f} s")
        for outcome in ("refused", "invalid") + FAILURES:
            seeds_of = sorted(r["seed"] for r in everything if r["device"] == device and r["outcome"] == outcome)
            if seeds_of:
                print(f"  {outcome}: {seeds_of}")
        bad += sum(counts[o] for o in FAILURES)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
