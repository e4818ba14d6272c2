"""Where one symdiff value_and_grad call spends its time: ``python -m bench.profile WORKLOAD``.

The bench says how fast; this says why.  cProfile cannot see inside slangpy's
(nanobind) calls, so the split is measured directly on the compiled
executable: each kernel alone (its own command buffer, submit and wait), the
buffer fills, an empty submit (the fixed cost of one submission), the
products the host's BLAS computes apart from the Slang launches, and the
rest of a steady call, which is host-side work: Python in symdiff and
lowering, recording the dispatches, allocating result buffers, uploading the
seed and reading the scalar back.  The compile of the first call is split
into trace, differentiate and plan + generate + Slang compile.  It uses the executable's internals and is
a diagnostic, not part of the bench's numbers.
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from typing import Callable

import symdiff as sd
from symdiff.lowering import backends, DeviceArray

from . import symdiff_runner
from .timing import measure, timed
from .workloads import WORKLOADS


def best_of(fn: Callable[[], object], repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def device_split(exe, args: dict[str, DeviceArray]) -> dict[str, float]:
    """Seconds per kernel, for the fills and for an empty submit, of the latest call of ``exe``.

    Each measurement records through the executable's own ``_record`` with its
    launch list cut down, so dispatch details stay the lowering's (the fills
    of versions sharing a buffer run before the launch position they were
    planned for, so a cut list may run some of them elsewhere or not at all)."""
    inst, dev = exe._last, backends.of(exe.device).device()
    bindings = dict(inst.buffers) | {f"{n}#0": a.buffer for n, a in args.items()}
    all_launches = list(inst.launches)

    def submit(launches: list) -> float:
        def once() -> None:
            inst.launches = launches
            try:
                _, enc = exe._record(dev.create_command_encoder(), inst, bindings)  # a host product starts a new one
                dev.submit_command_buffer(enc.finish())
                dev.wait()
            finally:
                inst.launches = all_launches
        return best_of(once)

    split = {"empty submit + wait": best_of(lambda: (dev.submit_command_buffer(dev.create_command_encoder().finish()),
                                                     dev.wait())),
             "fills only": submit([]), "all fills + kernels": submit(all_launches)}
    on_host = [run for run in all_launches if run[0].host]
    if on_host:  # products the host's BLAS computes between the launches (lowering.host_products)
        split[f"fills + {len(on_host)} host products only"] = submit(on_host)
        split[f"fills + {len(all_launches) - len(on_host)} Slang launches only"] = \
            submit([run for run in all_launches if not run[0].host])
    for entry in inst.module.kernels:
        if entry.threads:
            split[f"kernel {entry.name} ({entry.threads} threads, + fills)"] = submit([[entry]])
    return split


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__.splitlines()[0])
    p.add_argument("workload", choices=[w.name for w in WORKLOADS])
    p.add_argument("--size", choices=["small", "large"], default="large")
    p.add_argument("--device", default="cpu", choices=["cpu", "vulkan", "cuda"])
    p.add_argument("--python", action="store_true", help="also print cProfile's view of a steady call")
    args = p.parse_args(argv)
    workload = next(w for w in WORKLOADS if w.name == args.workload)
    size = workload.size(args.size)
    inputs = workload.inputs(size)
    program = sd.differentiable_program(symdiff_runner.program_function(workload, size), **workload.options)
    wrt = list(workload.wrt)
    print(f"{workload.name} {size.label} on {args.device}")
    for stage, build in [("trace", lambda: program.graph), ("differentiate", lambda: program.backward_graph(wrt)),
                         ("plan + generate + Slang compile",
                          lambda: program.slang_source(wrt=wrt, device=args.device))]:
        print(f"  first {stage:52s} {timed(build)[0] * 1e3:9.1f} ms")
    run = symdiff_runner.runner(workload, program, inputs, args.device)
    timing, _ = measure(run.value_and_grad, budget=2.0, k_max=10, limit=600.0)
    print(f"  first call (compiled above) {timing.first:.3f} s, steady value_and_grad min {timing.min * 1e3:.2f} ms (median {timing.median * 1e3:.2f} ms, k={timing.k})")
    exe = next(e for e in program._executables.values() if e.graph.meta.get("gradients"))
    print(f"  stats: {exe.stats()}")
    device_args = {n: sd.asarray(v, device=args.device) for n, v in inputs.items()}
    split = device_split(exe, device_args)
    for what, seconds in split.items():
        print(f"  {what:60s} {seconds * 1e3:9.3f} ms")
    print(f"  {'host side (rest of the steady call)':60s} {(timing.min - split['all fills + kernels']) * 1e3:9.3f} ms")
    if args.python:
        profiler = cProfile.Profile()
        profiler.runcall(run.value_and_grad)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main(sys.argv[1:])
