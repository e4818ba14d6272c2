"""GFLOP/s of the generated matmul kernels: ``python -m bench.matmul_kernels [--device cpu vulkan]``.

Compares the register-blocked kernels of ``lowering.matmul`` with one thread
per output (what the planner emits without them) on the forward and the two
backward layouts, so a change to the tile shapes can be judged per backend.
Times are kernel + submit + readback of one element's buffer, best of 5; the
tiled kernel's GFLOP/s also over the process's CPU time (on the CPU device its
worker threads' time added up: against one core's peak, and whether a second
core took part, on a machine others share).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from unittest import mock

import numpy as np

from symdiff import lowering
from symdiff.ir.graph import DataflowGraph, connector_symbol, index_symbol

I, J, K = (index_symbol(n) for n in "ijk")
# name: (m, k, n, a index, b index)
CASES = {
    "512x512x512": (512, 512, 512, (I, K), (K, J)),
    "512x512x512 A^T B (dB = A^T G)": (512, 512, 512, (K, I), (K, J)),
    "512x512x512 A B^T (dA = G B^T)": (512, 512, 512, (I, K), (J, K)),
    "mlp fwd 4096x64 @ 64x128": (4096, 64, 128, (I, K), (K, J)),
    "mlp dW 64x4096 @ 4096x128 (X^T dY)": (64, 4096, 128, (K, I), (K, J)),
    "mlp dW 512x4096 @ 4096x512 (X^T dY)": (512, 4096, 512, (K, I), (K, J)),
    "mlp dX 4096x10 @ 10x128 (dY W^T)": (4096, 10, 128, (I, K), (J, K)),
}


def matmul_graph(m: int, kk: int, n: int, ia: tuple, ib: tuple) -> tuple[DataflowGraph, dict]:
    ext = {I: m, J: n, K: kk}
    g = DataflowGraph("matmul")
    g.add_container("a", tuple(ext[s] for s in ia), "float32", "argument")
    g.add_container("b", tuple(ext[s] for s in ib), "float32", "argument")
    g.add_container("c", (m, n), "float32", "result")
    x, y = connector_symbol("x", "float32"), connector_symbol("y", "float32")
    g.add_tasklet("mm", ((I, 0, m), (J, 0, n), (K, 0, kk)), {"o": x * y},
                  {"x": (g.access("a", 0), ia), "y": (g.access("b", 0), ib)},
                  {"o": (g.new_version("c"), (I, J), "sum")})
    rng = np.random.default_rng(0)
    return g, {c: rng.standard_normal(g.containers[c].shape).astype(np.float32) for c in ("a", "b")}


def gflops(graph: DataflowGraph, inputs: dict, device: str, flops: int) -> tuple[float, float]:
    """GFLOP/s over the best wall time and over the best CPU time of the process."""
    exe = lowering.compile(graph, device=device)
    args = {n: lowering.asarray(v, device=device) for n, v in inputs.items()}
    wall = cpu = np.inf
    for _ in range(5):
        t0, c0 = time.perf_counter(), time.process_time()
        np.asarray(exe(args, return_device_arrays=True)["c"])
        wall, cpu = min(wall, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
    return flops / wall / 1e9, flops / cpu / 1e9


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.matmul_kernels", description=__doc__.splitlines()[0])
    p.add_argument("--device", nargs="+", default=[d for d in ("cpu", "vulkan") if d in lowering.available_devices()])
    args = p.parse_args(argv)
    print(f"{'case':40s} {'device':7s} {'1 thread/output':>16s} {'tiled':>10s} {'tiled, CPU time':>16s}  GFLOP/s")
    for name, (m, kk, n, ia, ib) in CASES.items():
        graph, inputs = matmul_graph(m, kk, n, ia, ib)
        for device in args.device:
            # the on-disk cache of lowered programs keys by source text, not by this patch: off
            with mock.patch("symdiff.lowering.kernels.writer.tiling", lambda *_: None), \
                    mock.patch.dict(os.environ, {"SYMDIFF_DISK_CACHE": "0"}):
                plain, _ = gflops(graph, inputs, device, 2 * m * n * kk)
            tiled, tiled_cpu = gflops(graph, inputs, device, 2 * m * n * kk)
            print(f"{name:40s} {device:7s} {plain:16.2f} {tiled:10.2f} {tiled_cpu:16.2f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
