"""16-bit arguments on memory-bound programs: ``python -m bench.sixteen_bit --device D``.

For each workload (``bench.gpu``'s memory-bound bodies), the value_and_grad
time with every float argument in float32, float16 and bfloat16 on one
symdiff device, next to JAX ``jit`` on its own platform with the same
arguments (JAX rounds every operation to the 16-bit format; symdiff computes
in float32 between its 16-bit loads and stores: ``ir.storage``), the
bytes floor (each argument read once, each gradient written once) per
format, and each side's error against JAX float64 on the same arguments
(relative L2 of the value and each gradient, the worst).  What it answers:
whether a 16-bit program pays for its conversions by moving half the bytes,
and what its rounding costs.  ``--scale`` divides the element counts.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

import ml_dtypes
import numpy as np

import symdiff as sd

from . import report, symdiff_runner
from .gpu import WORKLOADS, peer_devices
from .peers import JaxPeer
from .timing import describe, measure
from .__main__ import relative_error

FORMATS = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
NAMES = ("elementwise_chain", "softmax_xent", "layer_norm")


def row(spec: Any, scale: float, device: str, budget: float, jax: bool) -> dict[str, Any]:
    workload, size = spec.at(scale)
    base = workload.inputs(size)
    out: dict[str, Any] = {"workload": spec.name, "size": size.label, "formats": {}}

    def exact(inputs: dict[str, np.ndarray]) -> Any:
        wide = {n: v.astype(np.float64) if v.dtype.kind != "i" else v for n, v in inputs.items()}
        peer = JaxPeer().runner(workload, wide, device="cpu")
        return peer.to_numpy(peer.value_and_grad())
    for fmt, dtype in FORMATS.items():
        inputs = {n: v.astype(dtype, copy=False) if v.dtype == np.float32 else v for n, v in base.items()}
        cell: dict[str, Any] = {"floor_bytes": sum(v.nbytes for v in inputs.values())
                                + sum(inputs[w].nbytes for w in workload.wrt)}
        truth = exact(inputs)
        try:
            program = sd.differentiable_program(
                symdiff_runner.program_function(workload, size, {n: v.dtype.name for n, v in inputs.items()}))
            run = symdiff_runner.runner(workload, program, inputs, device)
            t, result = measure(run.value_and_grad, budget=budget, k_max=30, limit=300.0)
            cell["symdiff_ms"] = t.median * 1e3
            mine = run.to_numpy(result)
            cell["symdiff_error"] = relative_error(mine, truth)
        except Exception as exc:  # a cell, not the run
            cell["symdiff"] = describe(exc)
            mine = None
        if jax:
            try:
                peer = JaxPeer().runner(workload, inputs, device=peer_devices(device)[0])
                t, result = measure(peer.value_and_grad, budget=budget, k_max=30, limit=300.0)
                cell["jax_ms"] = t.median * 1e3
                cell["jax_error"] = relative_error(peer.to_numpy(result), truth)
            except Exception as exc:
                cell["jax"] = describe(exc)
        out["formats"][fmt] = cell
    return out


def render(results: dict[str, Any]) -> str:
    header = ["workload", "size", "format", "symdiff ms", "x float32", "JAX ms", "x JAX", "floor MB",
              "symdiff err", "JAX err"]
    lines = []
    for r in results["rows"]:
        f32 = r["formats"]["float32"].get("symdiff_ms")
        for fmt, c in r["formats"].items():
            ms, jax_ms = c.get("symdiff_ms"), c.get("jax_ms")
            lines.append([r["workload"], r["size"], fmt, f"{ms:.3g}" if ms else c.get("symdiff", "-"),
                          f"{ms / f32:.2f}" if ms and f32 else "-", f"{jax_ms:.3g}" if jax_ms else c.get("jax", "-"),
                          f"{ms / jax_ms:.2f}" if ms and jax_ms else "-", f"{c['floor_bytes'] / 1e6:.1f}",
                          *(f"{c[k]:.1e}" if k in c else "-" for k in ("symdiff_error", "jax_error"))])
    return (f"symdiff on `{results['device']}`, scale {results['scale']:g}, value_and_grad medians; errors "
            "against JAX float64 on the same arguments.\n\n"
            + report._table(header, lines))


def main(argv: list[str]) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m bench.sixteen_bit", description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--budget", type=float, default=0.5)
    p.add_argument("--workload", action="append", choices=list(NAMES))
    p.add_argument("--no-jax", action="store_true")
    args = p.parse_args(argv)
    import jax
    jax.config.update("jax_enable_x64", True)  # the float64 truth (the others keep their arguments' dtypes)
    specs = [w for w in WORKLOADS if w.name in (args.workload or NAMES)]
    results = {"device": args.device, "scale": args.scale,
               "rows": [row(w, args.scale, args.device, args.budget, not args.no_jax) for w in specs]}
    print(render(results))
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
