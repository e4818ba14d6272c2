"""``python -m bench``: every workload on symdiff's devices and on the peers, in one process.

Per workload and size: the peers first (their gradients are the reference),
then symdiff on each device; a configuration whose answer disagrees with the
reference is reported as WRONG, never with a speed.  See docs/benchmarks.md
for how to read the output.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from symdiff import lowering
import symdiff as sd

from . import report, symdiff_runner
from .peers import PEERS, Grads, Peer, Runner
from .timing import describe, measure, time_limit
from .workloads import WORKLOADS, Workload

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Settings:
    budget: float        # seconds of timed calls per measurement after the warm-up
    k_max: int           # most timed calls per measurement
    limit: float         # seconds a first call may take before the configuration is a timeout
    cold: bool           # measure cold compiles (a child process per device and size: slow with g++)


QUICK = Settings(budget=0.3, k_max=10, limit=30.0, cold=False)
FULL = Settings(budget=2.0, k_max=20, limit=60.0, cold=True)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def relative_error(result: Grads, reference: Grads) -> float:
    """Max relative L2 error of the value and each gradient; NaN if any is NaN."""
    value, grads = result
    ref_value, ref_grads = reference
    errors = [abs(value - ref_value) / max(abs(ref_value), 1e-30)]
    for name, ref in ref_grads.items():
        ref = np.asarray(ref, np.float64)
        g = np.asarray(grads[name], np.float64).reshape(ref.shape)
        errors.append(float(np.linalg.norm(g - ref) / max(np.linalg.norm(ref), 1e-30)))
    return float(np.max(errors))  # NaN propagates (Python's max drops a NaN after the first element)


def measure_runner(run: Runner, settings: Settings) -> tuple[dict[str, Any], Any]:
    """Forward and (where the runner has one) value_and_grad timings, and the
    last value_and_grad result."""
    entry: dict[str, Any] = {}
    out = None
    if run.value_and_grad is not None:
        t, out = measure(run.value_and_grad, budget=settings.budget, k_max=settings.k_max, limit=settings.limit)
        entry["value_and_grad"] = t.as_dict()
    t, _ = measure(run.forward, budget=settings.budget, k_max=settings.k_max, limit=settings.limit)
    entry["forward"] = t.as_dict()
    return entry, out


def run_peer(peer: Peer, workload: Workload, inputs: dict[str, np.ndarray], settings: Settings,
             reference: Grads | None) -> tuple[dict[str, Any], Grads | None]:
    """One peer's timings; its gradients, which become the reference if there is none yet."""
    try:
        run = peer.runner(workload, inputs)
        entry, out = measure_runner(run, settings)
    except Exception as exc:  # a peer failing is reported, not fatal
        return {"status": describe(exc)}, None
    entry["status"] = "ok"
    grads = run.to_numpy(out) if out is not None else None
    if grads is not None and reference is not None:
        entry["grad_error"] = relative_error(grads, reference)
    return entry, grads


def run_symdiff(workload: Workload, size_name: str, inputs: dict[str, np.ndarray], device: str,
                settings: Settings, reference: Grads | None) -> dict[str, Any]:
    size = workload.size(size_name)
    entry: dict[str, Any] = {}
    try:
        fn = symdiff_runner.program_function(workload, size)
        program = sd.differentiable_program(fn, **workload.options)
        run = symdiff_runner.runner(workload, program, inputs, device)
        t, out = measure(run.value_and_grad, budget=settings.budget, k_max=settings.k_max, limit=settings.limit,
                         settle=lambda: symdiff_runner.settle(run.value_and_grad, settings.limit))
        entry["value_and_grad"] = t.as_dict()
        if reference is not None:
            entry["grad_error"] = relative_error(run.to_numpy(out), reference)
            if not entry["grad_error"] <= workload.tol:  # NaN is wrong too
                entry["status"] = "WRONG"
                return entry
        t, _ = measure(run.forward, budget=settings.budget, k_max=settings.k_max, limit=settings.limit,
                       settle=lambda: symdiff_runner.settle(run.forward, settings.limit))
        entry["forward"] = t.as_dict()
        entry["stats"] = program.stats()
        with time_limit(settings.limit):
            entry["compile_warm"] = symdiff_runner.compile_seconds(workload, size, device, fn)
    except Exception as exc:  # reported in the table; the run goes on
        entry["status"] = describe(exc)
        return entry
    entry["status"] = "ok" if reference is not None else "unchecked"
    return entry


def measure_cold_compiles(rows: list[dict], workloads: list[Workload], devices: list[str], sizes: list[str],
                          settings: Settings) -> dict[str, dict[str, dict[str, Any]]]:
    """Fill in ``compile_cold`` for every configuration that ran correctly; one
    child process per Slang device and size, after all in-process timings so it
    competes with none.  Returns each child's start-up cost (``startup``) and the
    seconds it then waited for the precompiled preludes (``prelude``), per device and size."""
    setup: dict[str, dict[str, Any]] = {"startup": {}, "prelude": {}}
    for device in (d for d in devices if d != "numpy"):
        for size_name in sizes:
            entries = {r["workload"]: r["symdiff"][device] for r in rows if r["size"] == size_name}
            todo = [w for w in workloads if entries[w.name]["status"] == "ok"]
            if not todo:
                continue
            try:
                cold = symdiff_runner.cold_compile_seconds(todo, size_name, device, settings.limit)
            except Exception as exc:  # the child failing costs the column, not the run
                cold = {"startup": describe(exc), "workloads": {w.name: describe(exc) for w in todo}}
            for part in ("startup", "prelude"):
                setup[part].setdefault(device, {})[size_name] = cold.get(part, 0.0)
            for name, seconds in cold["workloads"].items():
                entries[name]["compile_cold"] = seconds
            log(f"  cold compiles {device} {size_name}: {cold}")
    return setup


TRAINING_WARMUP = 20.0  # seconds of training steps per runner before timing (bench.training's default)


def measure_training(devices: list[str], settings: Settings) -> list[dict[str, Any]]:
    """``bench.training``'s rows (a training step of the examples' LeNet-5 and
    transformer: sd.compile_module against torch eager and torch.compile) on
    the cpu device and on a GPU present; a failure is a row saying so."""
    try:
        from . import training
    except ImportError as exc:  # no torch: the rows say so
        return [{"model": "all", "runner": "all", "status": describe(exc)}]
    entries = []
    for device in (d for d in devices if d in ("cpu", "cuda")):
        for name in training.models():
            try:
                entries += training.rows(name, device, TRAINING_WARMUP, settings.budget)
            except Exception as exc:  # compile_module itself failing costs its rows, not the run
                entries.append({"model": name, "runner": f"symdiff {device}", "status": describe(exc)})
            log(f"  training {name} symdiff/{device}: {[e['status'] for e in entries[-3:]]}")
    return entries


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small sizes only, no training step (under a minute)")
    p.add_argument("--device", action="append", choices=lowering.backends.kinds(),
                   help="symdiff device(s) to measure (repeatable); default: every device present")
    p.add_argument("--workload", action="append", choices=[w.name for w in WORKLOADS],
                   help="workload(s) to run (repeatable); default: all")
    p.add_argument("--large-numpy", action="store_true",
                   help="also run symdiff's numpy interpreter at the large sizes (slow)")
    return p.parse_args(argv)


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    started, load_at_start = time.perf_counter(), os.getloadavg()[0]
    machine = report.machine_info()  # before measuring: the revision is the code about to be measured
    settings = QUICK if args.quick else FULL
    present = lowering.available_devices()
    devices = [d for d in (args.device or present) if d in present]
    workloads = [w for w in WORKLOADS if not args.workload or w.name in args.workload]
    peers = [p for p in PEERS if p.available()]
    sizes = ["small"] if args.quick else ["small", "large"]
    log(f"bench: devices {devices}, peers {[p.name for p in peers]}, sizes {sizes}")

    rows = []
    for workload in workloads:
        for size_name in sizes:
            size = workload.size(size_name)
            inputs = workload.inputs(size)
            row: dict[str, Any] = {"workload": workload.name, "size": size_name, "label": size.label,
                                   "peers": {}, "symdiff": {}}
            reference = None
            for peer in peers:
                row["peers"][peer.name], grads = run_peer(peer, workload, inputs, settings, reference)
                reference = reference or grads
                log(f"  {workload.name} {size.label} {peer.name}: {row['peers'][peer.name]['status']}")
            for device in devices:
                if device == "numpy" and size_name == "large" and not args.large_numpy:
                    row["symdiff"][device] = {"status": "skipped"}
                    continue
                row["symdiff"][device] = run_symdiff(workload, size_name, inputs, device, settings, reference)
                log(f"  {workload.name} {size.label} symdiff/{device}: {row['symdiff'][device]['status']}")
            rows.append(row)
    cold_setup = measure_cold_compiles(rows, workloads, devices, sizes, settings) if settings.cold else {
        "startup": {}, "prelude": {}}
    training = [] if args.quick or args.workload else measure_training(devices, settings)

    results = {
        "command": " ".join(["python -m bench", shlex.join(argv)]).strip(),
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "elapsed_s": time.perf_counter() - started,
        "load_average": [load_at_start, os.getloadavg()[0]],
        "machine": machine,
        "devices": devices,
        "peers": [f"{p.name} {p.version()}" for p in peers],
        "settings": dataclasses.asdict(settings),
        "cold_startup_s": cold_setup["startup"],
        "cold_prelude_s": cold_setup["prelude"],
        "rows": rows,
        "training": training,
        "training_warmup_s": TRAINING_WARMUP,
    }
    print(report.render(results))
    if args.quick or args.device or args.workload:
        log("bench: partial run (--quick, --device or --workload): bench/results.json and docs/benchmarks.md "
            "are left as they are")
    else:
        report.write(results, ROOT / "bench" / "results.json", ROOT / "docs" / "benchmarks.md")


if __name__ == "__main__":
    main(sys.argv[1:])
