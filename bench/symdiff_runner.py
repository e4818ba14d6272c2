"""symdiff under test: programs built through the public API, run on device-resident inputs.

Also the child process of the cold-compile measurement: ``python -m
bench.symdiff_runner SIZE DEVICE LIMIT WORKLOAD...`` times first
``value_and_grad`` calls in a fresh interpreter with empty caches (the CPU
device's precompiled preludes, which a machine builds once, are built after
the start-up program, before the clock starts) and prints one JSON line.
"""
from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Mapping

import numpy as np

from symdiff import lowering
from symdiff.lowering import compiler_cache
import symdiff as sd

from .peers import Grads, Runner
from .timing import describe, time_limit, timed
from .workloads import WORKLOADS, Size, Workload


def program_function(workload: Workload, size: Size, dtypes: Mapping[str, str] | None = None) -> Callable:
    """``workload.body`` with numpy bound, named arguments and ``sd.f32[...]``
    annotations (``sd.i32`` for index arguments, or the dtype ``dtypes`` names:
    ``sd.bf16[...]`` for bfloat16 inputs): what a user would decorate."""
    def program(*arrays):
        return workload.body(np, *arrays)

    def spec(name: str) -> sd.ArraySpec:
        return sd.ArraySpec((dtypes or {}).get(name, "int32" if name in workload.ints else "float32"))

    program.__name__ = program.__qualname__ = workload.name
    program.__annotations__ = {n: spec(n)[s] for n, s in size.shapes.items()}
    # the signature carries the specs: inspect reads annotations from it, not from __annotations__
    program.__signature__ = inspect.Signature(
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=program.__annotations__[n])
         for n in size.shapes])
    return program


def _ready(value: Any) -> float:
    """Read the scalar result back: the call is finished only once it is on the host."""
    return float(np.asarray(value))


def runner(workload: Workload, program: Any, inputs: dict[str, np.ndarray], device: str) -> Runner:
    """Forward and value_and_grad of ``program`` with inputs uploaded once, results left on the device
    (the numpy interpreter keeps everything in host memory anyway)."""
    resident = device != "numpy"
    args = [sd.asarray(v, device=device) if resident else v for v in inputs.values()]

    def forward() -> float:
        return _ready(program(*args, device=device, device_arrays=resident))

    def value_and_grad() -> tuple[float, dict[str, Any]]:
        value, grads = program.value_and_grad(*args, wrt=list(workload.wrt), device=device,
                                              device_arrays=resident)
        return _ready(value), grads

    def to_numpy(out: tuple[float, dict[str, Any]]) -> Grads:
        value, grads = out
        return value, {w: np.asarray(g) for w, g in grads.items()}

    return Runner(forward, value_and_grad, to_numpy)


def settle(call: Callable[[], Any], limit: float) -> None:
    """Wait for the -O3 code of modules the first call compiled at -O0 (the CPU
    device compiles it in the background: ``lowering.cache.wait_for_later``)
    and make the call that switches to it, so that steady calls time the code a
    program runs once it is warm, as JAX's exclude its compile."""
    if lowering.cache.wait_for_later(limit):
        call()


def compile_seconds(workload: Workload, size: Size, device: str, fn: Callable | None = None) -> float:
    """Trace + differentiate + generate + compile of a new program object, in seconds.

    ``slang_source`` builds exactly what the first ``value_and_grad`` call
    would (the executable it caches is the one later calls run), without
    running it, so no run time has to be subtracted; the numpy interpreter
    compiles nothing, so there it is trace + differentiate."""
    program = sd.differentiable_program(fn or program_function(workload, size), **workload.options)
    if device == "numpy":
        return timed(lambda: program.backward_graph(wrt=list(workload.wrt)))[0]
    lowering.backends.of(device).device()  # created before the clock starts, as a resident input would
    return timed(lambda: program.slang_source(wrt=list(workload.wrt), device=device))[0]


def cold_compile_seconds(workloads: list[Workload], size_name: str, device: str,
                         limit: float) -> dict[str, Any]:
    """Compile times of first calls in a fresh process with empty on-disk caches.

    One child process per device and size serves all workloads (starting
    Python and importing symdiff takes seconds here); every workload's Slang
    source is new to it, so each compile is cold.  What a process pays once
    (device creation, the Slang session, the first g++ run) is measured on a
    trivial program first and reported as ``startup``, not charged to the first
    workload."""
    with tempfile.TemporaryDirectory(prefix="symdiff-bench-") as cache:
        env = dict(os.environ, SYMDIFF_CACHE_DIR=cache, XDG_CACHE_HOME=cache)
        proc = subprocess.run([sys.executable, "-m", "bench.symdiff_runner", size_name, device, str(limit)]
                              + [w.name for w in workloads],
                              capture_output=True, text=True, env=env, timeout=limit * (len(workloads) + 1) + 60,
                              cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "child failed")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def prelude_seconds(device: str, limit: float = 120.0) -> float:
    """On the CPU device, wait until the precompiled preludes the start-up compile
    began (one per g++ level, ``lowering.compiler_cache``) are built; the seconds
    waited.  A machine builds them once, and a first call compiling while they are
    built competes with them for the cores: cold compiles are measured after."""
    folder = lowering.backends.of(device).libraries_folder() if device == "cpu" else None
    start = time.perf_counter()
    while folder is not None and compiler_cache.headers_building(folder) and time.perf_counter() - start < limit:
        time.sleep(0.05)
    return time.perf_counter() - start


STARTUP = Workload("startup", lambda xp, x: xp.sum(x * x), Size("n=4", {"x": (4,)}), Size("n=4", {"x": (4,)}),
                   wrt=("x",))


def main(argv: list[str]) -> None:
    size_name, device, limit, *names = argv
    results: dict[str, Any] = {"startup": compile_seconds(STARTUP, STARTUP.small, device), "workloads": {}}
    results["prelude"] = prelude_seconds(device)
    for workload in (w for w in WORKLOADS if w.name in names):
        try:
            with time_limit(float(limit)):
                results["workloads"][workload.name] = compile_seconds(workload, workload.size(size_name), device)
        except Exception as exc:  # reported per workload; the others still get measured
            results["workloads"][workload.name] = describe(exc)
    print(json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1:])
