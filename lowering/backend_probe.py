"""The probe ``"auto"`` times on each GPU kind to choose between them (``backends.choice``).

Two workloads stand for what users run: a float32 matrix product (the
product kernels' speed) and an elementwise kernel over a long array (memory
bandwidth and per-call overhead).  Each is traced, planned, generated and
compiled through symdiff's own pipeline, so the choice reflects symdiff's
kernels on that kind, not the vendor's libraries.  Importing this module
hands ``time_kind`` to the registry (``backends.set_probe``); ``lowering``
imports it.
"""
from __future__ import annotations

import time

import numpy as np

from symdiff import ir
from symdiff.ir.specs import ArraySpec

from . import backends
from .runtime import Executable, asarray, compile

PRODUCT_N = 1024  # 2 GFLOP: milliseconds on a GPU, long enough to see the product kernel
MEMORY_N = 1 << 24  # 64 MiB per array, 192 MiB moved a call
BUDGET_S = 0.25  # timed calls per workload stop after this long (at least MIN_CALLS)
MIN_CALLS, MAX_CALLS = 3, 20


def _product(x, y):
    return x @ y


def _memory(x, y):
    return x * 2.0 + y


def workloads(product_n: int = PRODUCT_N, memory_n: int = MEMORY_N) -> dict[str, tuple]:
    """The probe's programs: name -> (graph, its inputs as host arrays)."""
    rng = np.random.default_rng(0)
    square = ArraySpec("float32")[product_n, product_n]
    line = ArraySpec("float32")[memory_n]
    return {
        "product": (ir.trace(_product, square, square),
                    {"x": rng.standard_normal((product_n, product_n), np.float32),
                     "y": rng.standard_normal((product_n, product_n), np.float32)}),
        "memory": (ir.trace(_memory, line, line),
                   {"x": rng.standard_normal(memory_n, np.float32), "y": rng.standard_normal(memory_n, np.float32)}),
    }


def best_seconds(exe: Executable, inputs: dict, device: str) -> float:
    """The fastest of several timed calls after an untimed one (which compiles),
    each waiting for its kernels, inputs and results staying on the device."""
    on_device = {name: asarray(value, device=device) for name, value in inputs.items()}
    wait = backends.of(device).device().wait
    exe(on_device, return_device_arrays=True)
    wait()
    times: list[float] = []
    started = time.perf_counter()
    while len(times) < MIN_CALLS or (len(times) < MAX_CALLS and time.perf_counter() - started < BUDGET_S):
        start = time.perf_counter()
        exe(on_device, return_device_arrays=True)
        wait()
        times.append(time.perf_counter() - start)
    return min(times)


def time_kind(device: str, product_n: int = PRODUCT_N, memory_n: int = MEMORY_N) -> dict[str, float]:
    """Seconds per probe workload on ``device`` (a slangpy kind)."""
    return {name: best_seconds(compile(graph, device=device), inputs, device)
            for name, (graph, inputs) in workloads(product_n, memory_n).items()}


backends.set_probe(time_kind)
