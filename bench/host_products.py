"""Matrix products on the CPU device: the host's BLAS (``lowering.host_products``)
against the generated micro-kernels, interleaved in one process, per size.

    python -m bench.host_products [--repeats 15] [--shape 64x256x256 ...]

Prints, per product shape, the minimum ms of a program computing ``sum((a @ b) * c)``
forward only (one product) and its ``value_and_grad`` (three products), each
way, and numpy's ``a @ b`` alone (the floor the host path pays for), plus the
first call (trace, plan, generate, compile) each way.  ``Tuning.host_blas_min_work``
(``lowering.targets``) comes from where the host path starts to win.
"""
from __future__ import annotations

import argparse
import os
import time
from contextlib import contextmanager
from dataclasses import replace

import numpy as np

import symdiff as sd
from symdiff.lowering import backends

SHAPES = [(16, 64, 64), (64, 16, 64), (64, 64, 64), (64, 256, 256), (256, 64, 256), (128, 128, 128), (256, 128, 128), (256, 256, 256), (512, 512, 512),
          (1024, 256, 256), (4096, 512, 512), (1024, 1024, 1024)]


@contextmanager
def products_on(way: str):
    """Every product on the host's BLAS (``"host"``) or as a generated Slang
    kernel (``"generated"``), whatever its size, for the duration."""
    least = 0 if way == "host" else 1 << 62
    with backends.targets_changed(lambda t: replace(t, tuning=replace(t.tuning, host_blas_min_work=least))):
        yield


def program(m: int, k: int, n: int, way: str):
    """A program of its own per way (a named graph: no cache hands one way's plan to the other)."""
    def product(a: sd.f32[m, k], b: sd.f32[k, n], c: sd.f32[m, n]):
        return np.sum((a @ b) * c)
    product.__name__ = product.__qualname__ = f"product_{m}x{k}x{n}_{way}"
    return sd.differentiable_program(product)


def timed(f, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.host_products", description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--shape", action="append", metavar="MxKxN", help="shape(s) to run (repeatable); default: all")
    args = ap.parse_args(argv)
    shapes = [tuple(int(n) for n in s.split("x")) for s in args.shape] if args.shape else SHAPES
    os.environ["SYMDIFF_DISK_CACHE"] = "0"  # first calls compile, as a new user's do
    rng = np.random.default_rng(0)
    print(f"{'m x k x n':>16} {'MACs':>8} | {'fwd BLAS':>9} {'fwd gen':>8} | {'v&g BLAS':>9} {'v&g gen':>8} | "
          f"{'numpy a@b':>9} | {'1st BLAS s':>10} {'1st gen s':>9}")
    for m, k, n in shapes:
        a, b, c = (rng.standard_normal(s).astype(np.float32) for s in [(m, k), (k, n), (m, n)])
        ways = {}
        for way in ("host", "generated"):
            p = program(m, k, n, way)
            start = time.perf_counter()
            with products_on(way):
                p.value_and_grad(a, b, c, device="cpu")
                p(a, b, c, device="cpu")
            ways[way] = (p, time.perf_counter() - start)
        results = {}
        for _ in range(2):  # interleaved: the machine's load changes between them alike
            for way, (p, _) in ways.items():
                with products_on(way):
                    fwd = timed(lambda: p(a, b, c, device="cpu"), args.repeats)
                    vg = timed(lambda: p.value_and_grad(a, b, c, device="cpu"), args.repeats)
                old = results.get(way, (float("inf"),) * 2)
                results[way] = (min(old[0], fwd), min(old[1], vg))
        floor = timed(lambda: a @ b, args.repeats)
        print(f"{m:>5}x{k:>4}x{n:>4} {m * k * n / 1e6:>7.1f}M | {results['host'][0]:>9.2f} "
              f"{results['generated'][0]:>8.2f} | {results['host'][1]:>9.2f} {results['generated'][1]:>8.2f} | "
              f"{floor:>9.2f} | {ways['host'][1]:>10.2f} {ways['generated'][1]:>9.2f}", flush=True)


if __name__ == "__main__":
    main()
