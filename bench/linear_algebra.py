"""``python -m bench.linear_algebra``: value_and_grad of PolyBench/NPBench linear-algebra kernels
against JAX ``jit(value_and_grad)``, float32 on the CPU, in one process.

The kernels are the external-kernel suite's (``tests/kernels/polybench.py``),
written as an NPBench user writes them (in-place row updates, Python loops that
unroll at trace time) with their JAX twins; ``alpha``/``beta`` are fixed at
PolyBench's 1.5 and 1.2 and every array argument is differentiated.  Sizes are
where JAX's call takes at least ~5 ms on a 2-core machine (issue 12's CPU
target: every row within 2x of JAX), except for the loop kernels: JAX and
symdiff both compile every unrolled row (syrk with 64 rows: JAX 25 s, symdiff
230 s here), so they keep 32-64 rows, syrk and syr2k a long inner axis, and
trisolv's row (64 unrolled solves) runs under a millisecond in JAX.

Per row: min / median ms of value_and_grad (symdiff's inputs on the device and
the call ending with its scalar on the host, as in ``python -m bench``), the
ratio of the medians, GFLOP/s, symdiff's kernel count, and the max relative L2
error of the value and each gradient against JAX (``bench.__main__.relative_error``,
in the same run, on the same inputs).  GFLOP/s counts three times the forward's
floating-point operations (PolyBench's counts: the forward product and the two
products of its reverse pass), so it compares the two columns, not hardware peaks.
"""
from __future__ import annotations

import argparse
import datetime
import functools
import os
import shlex
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from symdiff import lowering
import symdiff as sd
from symdiff.loops import UnrolledLoopWarning

from . import report, symdiff_runner
from .__main__ import log, relative_error
from .first_call import _polybench
from .gpu import geomean, gradient_executable
from .peers import JaxPeer
from .timing import describe, measure
from .workloads import Size, Workload, fan_in

ALPHA, BETA = 1.5, 1.2        # PolyBench's initial values
TOLERANCE = 1e-3              # relative L2 error above which a row is WRONG, not timed


def _diagonal(rng: np.random.Generator, shape: tuple) -> np.ndarray:
    """A well-conditioned lower-triangular system's matrix: trisolv's division stays O(1)."""
    n = shape[0]
    return (rng.uniform(-1.0, 1.0, shape) * 0.3 / np.sqrt(n) + 2.0 * np.eye(n)).astype(np.float32)


@dataclass(frozen=True)
class Kernel:
    """One bench row: a ``polybench`` kernel (by its registry name), its array
    shapes and its forward's flops as a function of them."""

    name: str
    shapes: dict[str, tuple]
    flops: Callable[..., int]          # flops(**shapes) of the forward
    scalars: bool = False              # the body starts with (alpha, beta)
    init: dict[str, Any] = field(default_factory=dict)   # default: standard normal

    def workload(self, pb: Any) -> Workload:
        source = {"2mm": "k2mm", "3mm": "k3mm"}.get(self.name, self.name)
        body, twin = getattr(pb, source), getattr(pb, source + "_jax")
        lead = (ALPHA, BETA) if self.scalars else ()
        size = Size(" ".join(f"{n}:{'x'.join(map(str, s))}" for n, s in self.shapes.items() if len(s) > 1),
                    self.shapes)
        return Workload(self.name, lambda xp, *a: body(*lead, *a), size, size, tuple(self.shapes),
                        functional=lambda jnp, *a: twin(jnp, *lead, *a), init=dict(self.init), tol=TOLERANCE)


SQUARE = {"A": (512, 512), "B": (512, 512), "C": (512, 512), "D": (512, 512)}
VECTORS = 2048

KERNELS: list[Kernel] = [
    Kernel("gemm", {"C": (512, 512), "A": (512, 512), "B": (512, 512)},
           lambda C, A, B: 2 * A[0] * A[1] * B[1], scalars=True),
    Kernel("2mm", SQUARE, lambda A, B, C, D: 2 * A[0] * A[1] * B[1] + 2 * A[0] * B[1] * C[1], scalars=True),
    Kernel("3mm", SQUARE, lambda A, B, C, D: 2 * (A[0] * A[1] * B[1] + C[0] * C[1] * D[1] + A[0] * B[1] * D[1]),
           init={k: fan_in for k in SQUARE}),
    Kernel("syrk", {"C": (32, 32), "A": (32, 4096)},
           lambda C, A: A[0] * (A[0] + 1) * A[1], scalars=True),
    Kernel("syr2k", {"C": (32, 32), "A": (32, 2048), "B": (32, 2048)},
           lambda C, A, B: 2 * A[0] * (A[0] + 1) * A[1], scalars=True),
    Kernel("trisolv", {"L": (64, 64), "x": (64,), "b": (64,)}, lambda L, x, b: L[0] * L[0],
           init={"L": _diagonal}),
    Kernel("mvt", {"x1": (VECTORS,), "x2": (VECTORS,), "y_1": (VECTORS,), "y_2": (VECTORS,),
                   "A": (VECTORS, VECTORS)}, lambda A, **_: 4 * A[0] * A[1]),
    Kernel("atax", {"A": (VECTORS, VECTORS), "x": (VECTORS,)}, lambda A, x: 4 * A[0] * A[1], init={"A": fan_in}),
    Kernel("bicg", {"A": (VECTORS, VECTORS), "p": (VECTORS,), "r": (VECTORS,)}, lambda A, p, r: 4 * A[0] * A[1],
           init={"A": fan_in}),
    Kernel("gesummv", {"A": (VECTORS, VECTORS), "B": (VECTORS, VECTORS), "x": (VECTORS,)},
           lambda A, B, x: 4 * A[0] * A[1], scalars=True),
]


@dataclass(frozen=True)
class Settings:
    budget: float = 2.0       # seconds of timed calls per measurement, after the warm-up
    k_max: int = 15           # most timed calls per measurement
    limit: float = 600.0      # seconds the warm-up (compiling: loops unroll) call may take


def run_jax(workload: Workload, inputs: dict[str, np.ndarray], settings: Settings) -> tuple[dict[str, Any], Any]:
    try:
        run = JaxPeer().runner(workload, inputs, device="cpu")
        t, out = measure(run.value_and_grad, budget=settings.budget, k_max=settings.k_max, limit=settings.limit)
    except Exception as exc:  # reported in the table; the run goes on
        return {"status": describe(exc)}, None
    return {"status": "ok", "timing": t.as_dict()}, run.to_numpy(out)


def run_symdiff(workload: Workload, inputs: dict[str, np.ndarray], device: str, settings: Settings,
                reference: Any) -> dict[str, Any]:
    try:
        with warnings.catch_warnings():  # the loop kernels unroll on purpose (NPBench's form)
            warnings.simplefilter("ignore", UnrolledLoopWarning)
            program = sd.differentiable_program(symdiff_runner.program_function(workload, workload.small))
            run = symdiff_runner.runner(workload, program, inputs, device)
            t, out = measure(run.value_and_grad, budget=settings.budget, k_max=settings.k_max,
                             limit=settings.limit)
        e: dict[str, Any] = {"status": "ok", "timing": t.as_dict()}
        if reference is None:
            e["status"] = "unchecked"
        else:
            e["grad_error"] = relative_error(run.to_numpy(out), reference)
            if not e["grad_error"] <= workload.tol:  # NaN is wrong too
                e["status"] = "WRONG"
        exe = gradient_executable(program)
        e["kernels"] = exe.stats()["kernels"]
        if exe._last is not None and exe._last.level != "maximal":
            e["hot"] = hot(run.value_and_grad, exe, settings)
    except Exception as exc:  # reported in the table; the run goes on
        return {"status": describe(exc)}
    return e


def hot(call: Any, exe: Any, settings: Settings) -> dict[str, Any]:
    """A module compiled at g++ -O0 is compiled again at -O3 once its calls have
    run for a while (``lowering.runtime.HOT_RECOMPILE``): call until that
    happens (within ``settings.limit`` seconds), then time the calls after it."""
    start, calls = time.perf_counter(), 0
    while exe._last.level != "maximal" and time.perf_counter() - start < settings.limit:
        call()
        calls += 1
    if exe._last.level != "maximal":
        return {"status": f"not hot after {calls} calls"}
    seconds = time.perf_counter() - start
    t, _ = measure(call, budget=settings.budget, k_max=settings.k_max, limit=settings.limit)
    return {"status": "ok", "timing": t.as_dict(), "calls": calls, "seconds": seconds}


def run_row(kernel: Kernel, pb: Any, devices: list[str], settings: Settings) -> dict[str, Any]:
    workload = kernel.workload(pb)
    inputs = workload.inputs(workload.small)
    row: dict[str, Any] = {"workload": kernel.name, "size": workload.small.label,
                           "flops": 3 * kernel.flops(**kernel.shapes), "symdiff": {}}
    row["jax"], reference = run_jax(workload, inputs, settings)
    log(f"  {kernel.name} jax: {row['jax']['status']}")
    for device in devices:
        row["symdiff"][device] = run_symdiff(workload, inputs, device, settings, reference)
        log(f"  {kernel.name} symdiff/{device}: {row['symdiff'][device]['status']}")
    return row


# -- output ----------------------------------------------------------------------------

def _times(e: dict[str, Any]) -> str:
    t = e["timing"]
    return f"{t['min'] * 1e3:.3g} / {t['median'] * 1e3:.3g}"


def _gflops(flops: int, e: dict[str, Any]) -> str:
    return f"{flops / e['timing']['min'] / 1e9:.3g}"


def ratio(row: dict[str, Any], device: str, hot: bool = False) -> float | None:
    """symdiff's median time (``hot``: after its hot recompile, where it had one)
    over JAX's, where both ran and symdiff's answer is right."""
    s, j = row["symdiff"].get(device, {}), row["jax"]
    if s.get("status") != "ok" or j.get("status") != "ok":
        return None
    timing = s["hot"]["timing"] if hot and s.get("hot", {}).get("status") == "ok" else s["timing"]
    return timing["median"] / j["timing"]["median"]


def _hot(s: dict[str, Any], r: float | None) -> str:
    h = s.get("hot")
    if h is None:
        return "-"
    if h["status"] != "ok":
        return h["status"]
    return f"{_times(h)} ({'-' if r is None else f'{r:.2f}'}x JAX) after {h['calls']} calls, {h['seconds']:.1f} s"


def render(results: dict[str, Any]) -> str:
    header = ["workload", "size", "device", "JAX ms min / med", "symdiff ms min / med", "x JAX (med)",
              "JAX GFLOP/s", "symdiff GFLOP/s", "kernels", "first call s JAX / symdiff", "err vs JAX",
              "after hot recompile: ms min / med"]
    lines = []
    for row in results["rows"]:
        j = row["jax"]
        for device, s in row["symdiff"].items():
            ok_j, ok_s = j["status"] == "ok", s["status"] == "ok"
            cell = _times(s) if ok_s else (f"WRONG (err {s['grad_error']:.2g})" if s["status"] == "WRONG"
                                           else s["status"])
            r = ratio(row, device)
            first = " / ".join(f"{e['timing']['first']:.1f}" if "timing" in e else "-" for e in (j, s))
            lines.append([row["workload"], row["size"], device, _times(j) if ok_j else j["status"], cell,
                          "-" if r is None else f"{r:.2f}", _gflops(row["flops"], j) if ok_j else "-",
                          _gflops(row["flops"], s) if ok_s else "-", str(s.get("kernels", "-")), first,
                          f"{s['grad_error']:.1e}" if "grad_error" in s else "-", _hot(s, ratio(row, device, hot=True))])
    r = results
    intro = (f"`{r['command']}` on {r['date']}, {r['elapsed_s']:.0f} s, {r['machine']['cpu']} "
             f"({r['machine']['cores']} cores), load average {r['load_average'][0]:.2f} at the start and "
             f"{r['load_average'][1]:.2f} at the end; symdiff {r['machine']['symdiff revision']}, {r['jax']}. "
             f"value_and_grad w.r.t. every array, float32; min / median of up to {r['settings']['k_max']} calls "
             f"in {r['settings']['budget']} s after a warm-up (the first call, which compiles). "
             f"GFLOP/s: 3x the forward's flops over the min time. err: max relative L2 error of the value and "
             f"each gradient against JAX; above {TOLERANCE:g} a row says WRONG. After hot recompile: a "
             f"module compiled at g++ -O0 called until it is compiled at -O3 (lowering.runtime.HOT_RECOMPILE), "
             f"then timed again.")
    def mean(device: str, hot: bool) -> str:
        g = geomean([x for row in r["rows"] if (x := ratio(row, device, hot)) is not None])
        return "-" if g is None else f"{g:.2f}"
    footer = "; ".join(f"geometric mean of x JAX on {d}: {mean(d, False)}, after hot recompiles {mean(d, True)}"
                       for d in r["devices"])
    return "\n\n".join([intro, report._table(header, lines), footer])


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.linear_algebra", description=__doc__.splitlines()[0])
    p.add_argument("--device", action="append", choices=["cpu", "vulkan"],
                   help="symdiff device(s) (repeatable); default: cpu")
    p.add_argument("--workload", action="append", choices=[k.name for k in KERNELS],
                   help="workload(s) to run (repeatable); default: all")
    p.add_argument("--budget", type=float, default=Settings.budget,
                   help="seconds of timed calls per measurement after the warm-up")
    p.add_argument("--json", type=Path, help="also write every number to this JSON file")
    return p.parse_args(argv)


def main(argv: list[str]) -> dict[str, Any]:
    args = parse_args(argv)
    started, load_at_start = time.perf_counter(), os.getloadavg()[0]
    machine = report.machine_info()
    present = lowering.available_devices()
    devices = [d for d in (args.device or ["cpu"]) if d in present]
    settings = Settings(budget=args.budget)
    pb = _polybench()
    kernels = [k for k in KERNELS if not args.workload or k.name in args.workload]
    log(f"bench.linear_algebra: symdiff on {devices}, JAX on the CPU")
    rows = [run_row(k, pb, devices, settings) for k in kernels]
    import jax
    results = {
        "command": " ".join(["python -m bench.linear_algebra", shlex.join(argv)]).strip(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "elapsed_s": time.perf_counter() - started,
        "load_average": [load_at_start, os.getloadavg()[0]],
        "machine": machine,
        "jax": f"jax {jax.__version__} on {jax.devices('cpu')[0].device_kind}",
        "devices": devices,
        "settings": {"budget": settings.budget, "k_max": settings.k_max, "limit": settings.limit},
        "rows": rows,
    }
    return report.publish(results, render(results), args.json)


if __name__ == "__main__":
    main(sys.argv[1:])
