"""``python -m bench.gpu_products``: the GPU issue's (36) matrix-product rows, the MLP
65536x512 -> 512 -> 10 and a 4096^3 gemm, as ``bench.gpu`` rows (symdiff's
value_and_grad against JAX ``jit`` and PyTorch on the same device) with TFLOP/s.

Precision (``--precision``): ``fp32`` (the default) holds every side to exact
float32: symdiff's default ``matmul_precision``, JAX's
``jax_default_matmul_precision="highest"`` (its default float32 matmul on an
H100 is TF32, ``../shared/notes/gpu.md``) and torch's TF32 off.  ``tf32`` lets
every side use TF32 tensor cores: symdiff's ``matmul_precision="tf32"``
(``lowering.kernels.tensor_tiles`` on CUDA), JAX's ``"tensorfloat32"`` and
torch's TF32 on; gradients are then checked against JAX at ``TF32_TOLERANCE``
(TF32 keeps 11 significant bits).  ``bf16`` gives every side its float
arguments in bfloat16: symdiff's 16-bit products on tensor cores
(``lowering.kernels.tensor_tiles``; float32 in between, ``ir.storage``)
against JAX's and torch's bfloat16 programs (bfloat16 between operations),
checked at ``BF16_TOLERANCE``; ``f16`` the same in float16 (on Vulkan, symdiff's
products through cooperative matrices: ``lowering.kernels.coop_tiles``),
checked at ``TF32_TOLERANCE`` (float16 keeps TF32's 11 significant bits).
Run it in its own process
(``bench.gpu_session`` does): the settings are global.
``--tuning JSON`` overrides the device's ``Tuning`` fields for one variant of
``bench.gpu_session``'s sweep.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import symdiff as sd
from symdiff import lowering
from symdiff.lowering import targets

from . import gpu, report
from .workloads import fan_in, mlp_softmax_xent, normal, one_hot

PRECISIONS = ("fp32", "tf32", "bf16", "f16")
# Relative error of a TF32 row's gradients against JAX's (TF32 on a GPU, exact float32 on a
# CPU).  Not 2^-11: where TF32 moves a pre-activation across 0, the MLP's ReLU mask flips
# and that gradient element changes whole, so the error grows as the square root of the
# flipped fraction.  A float64 model of the 256-row MLP with every product's operands
# rounded to TF32 is 1.2e-2 from the exact gradients of x and w1 (symdiff's TF32 kernels on
# lavapipe are 1.4e-5 from that model: tests/lowering/kernels/test_tensor_tiles.py checks
# them against such a model).
TF32_TOLERANCE = 5e-2
# bfloat16 keeps 8 significant bits, and JAX and torch round every operation's result to them (symdiff
# only its arguments and gradients): 2^-8 relative an operation, more where a ReLU mask flips (above).
BF16_TOLERANCE = 1e-1
PRECISION_NOTE = {"fp32": "fp32: every side exact float32 (JAX \"highest\", torch TF32 off)",
                  "tf32": "tf32: every side on TF32 tensor cores (symdiff matmul_precision=\"tf32\", "
                          f"JAX \"tensorfloat32\", torch allow_tf32), checked at {TF32_TOLERANCE:g}",
                  "bf16": "bf16: every side's arguments and gradients bfloat16, products on bfloat16 tensor "
                          f"cores (JAX's and torch's bfloat16 between operations too), checked at {BF16_TOLERANCE:g}",
                  "f16": "f16: every side's arguments and gradients float16, products on float16 tensor cores "
                         f"(JAX's and torch's float16 between operations too), checked at {TF32_TOLERANCE:g}"}
TOLERANCES = {"tf32": TF32_TOLERANCE, "bf16": BF16_TOLERANCE, "f16": TF32_TOLERANCE}
FLOATS = {"bf16": "bfloat16", "f16": "float16"}  # the dtype of the float arguments at a precision (else float32)


def gemm_loss(xp, a, b, c):
    """A product's value and both operands' gradients: C (A B) summed is
    A B forward, then C B^T and A^T C backward (three n^3 products)."""
    return xp.sum(c * (a @ b))


PRODUCTS: list[gpu.GpuWorkload] = [
    gpu.GpuWorkload("mlp_softmax_xent", mlp_softmax_xent,
                    lambda s: {"x": (gpu.scaled(65536, s, 16), 512), "w1": (512, 512), "b1": (512,),
                               "w2": (512, 10), "y": (gpu.scaled(65536, s, 16), 10)},
                    ("w1", "b1", "w2"), init={"w1": fan_in, "w2": fan_in, "b1": normal(0.1), "y": one_hot}),
    gpu.GpuWorkload("gemm", gemm_loss, lambda s: {k: (gpu._grid(4096)(s),) * 2 for k in "abc"}, ("a", "b", "c"),
                    init={"a": fan_in, "b": fan_in}),
]


def flops(name: str, shapes: dict[str, tuple]) -> int:
    """Multiply-adds x 2 of value_and_grad's products: forward, and for each
    gradient asked one product of the same size (the MLP's input gets none)."""
    if name == "gemm":
        n, k = shapes["a"]
        return 3 * 2 * n * k * shapes["b"][1]
    batch, d_in = shapes["x"]
    hidden, classes = shapes["w2"]
    first, second = 2 * batch * d_in * hidden, 2 * batch * hidden * classes
    return 2 * first + 3 * second   # x@w1, dW1; h@w2, dW2, dh


def use_tuning(overrides: dict[str, Any]) -> dict[str, Any]:
    """Plan and generate this process's programs with the device's ``Tuning``
    changed by ``overrides`` (field -> value; a JSON list for a tuple field):
    one variant of ``bench.gpu_session``'s sweep.  The target's ``repr``, which
    the on-disk plan cache keys by, holds its tuning: no variant reads
    another's plans.  Returns the overrides as applied."""
    from dataclasses import fields, replace

    known = {f.name: f for f in fields(targets.Tuning)}
    unknown = sorted(set(overrides) - set(known))
    if unknown:
        raise SystemExit(f"bench.gpu_products: --tuning names no Tuning field {unknown}; "
                         f"fields are {sorted(known)}")
    applied = {k: tuple(v) if isinstance(v, list) else v for k, v in overrides.items()}
    lowering.backends.change_targets(lambda target: replace(target, tuning=replace(target.tuning, **applied)))
    return applied


def use_precision(precision: str) -> None:
    """Every side's float32 products at ``precision`` (module docstring)."""
    tf32 = precision == "tf32"
    sd.set_matmul_precision("tf32" if tf32 else "highest")
    try:
        import jax
        jax.config.update("jax_default_matmul_precision", "tensorfloat32" if tf32 else "highest")
    except ImportError:
        pass
    try:
        import torch
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
    except ImportError:
        pass


def with_tflops(row: dict[str, Any], precision: str) -> dict[str, Any]:
    work = flops(row["workload"], row["shapes"])
    row["flops"], row["precision"] = work, precision
    for entry in [row["symdiff"], *row["peers"].values()]:
        if entry.get("ms"):
            entry["tflops"] = work / (entry["ms"] * 1e-3) / 1e12
    return row


def render(results: dict[str, Any]) -> str:
    header = ["workload", "size", "precision", "symdiff ms", "JAX ms", "torch ms", "x JAX", "x torch",
              "symdiff TFLOP/s", "JAX TFLOP/s", "torch TFLOP/s", "err vs JAX"]
    lines = []
    for row in results["rows"]:
        s, j, t = row["symdiff"], row["peers"].get("jax", {}), row["peers"].get("torch", {})
        lines.append([row["workload"], row["size"], row["precision"], gpu._cell(s), gpu._cell(j) if j else "-",
                      gpu._cell(t) if t else "-", gpu._num(row.get("x_jax"), ".2f"),
                      gpu._num(row.get("x_torch"), ".2f"), gpu._num(s.get("tflops"), ".3g"),
                      gpu._num(j.get("tflops"), ".3g"), gpu._num(t.get("tflops"), ".3g"),
                      gpu._num(s.get("grad_error"), ".1e")])
    return "\n\n".join([f"symdiff on `{results['device']}`, scale {results['scale']:g}. "
                         f"{PRECISION_NOTE[results['precision']]}.",
                        report._table(header, lines)])


def main(argv: list[str]) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m bench.gpu_products", description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=gpu.DEVICES, required=True)
    p.add_argument("--workload", action="append", choices=[w.name for w in PRODUCTS],
                   help="workload(s) to run (repeatable); default: all")
    p.add_argument("--scale", type=float, default=1.0, help="divide every workload's element count by this")
    p.add_argument("--budget", type=float, default=gpu.Settings.budget)
    p.add_argument("--json", type=Path)
    p.add_argument("--gpu-form", action="store_true",
                   help="on lavapipe, the kernels a hardware GPU gets (bench.gpu.use_gpu_form): group tiles, split-K")
    p.add_argument("--tuning", type=json.loads, default={}, metavar="JSON",
                   help='Tuning fields to override, e.g. \'{"group_tile": [128, 64], "group_thread_tile": [8, 4]}\'')
    p.add_argument("--peers", default="jax,torch", help="comma-separated peers to time (the first is the reference)")
    p.add_argument("--precision", choices=PRECISIONS, default="fp32",
                   help="fp32: exact float32 everywhere; tf32: TF32 tensor cores everywhere; "
                        "bf16, f16: bfloat16 or float16 arguments everywhere")
    args = p.parse_args(argv)
    if args.gpu_form:
        gpu.use_gpu_form()
    tuning = use_tuning(args.tuning)
    use_precision(args.precision)
    wanted = [q for q in args.peers.split(",") if q]
    peers = [q for q in (gpu.JaxPeer(), gpu.TorchPeer()) if q.name in wanted and q.available()]
    settings = gpu.Settings(budget=args.budget, tolerance=TOLERANCES.get(args.precision, gpu.TOLERANCE),
                            floats=FLOATS.get(args.precision, "float32"))
    specs = [w for w in PRODUCTS if not args.workload or w.name in args.workload]
    rows = [with_tflops(gpu.run_row(spec, args.scale, args.device, peers, settings, bandwidth=math.inf),
                        args.precision) for spec in specs]
    platform_of = dict(zip(("jax", "torch"), gpu.peer_devices(args.device)))
    results = {"device": args.device + (" (GPU form)" if args.gpu_form else ""), "scale": args.scale,
               "tuning": tuning, "precision": args.precision, "precision_note": PRECISION_NOTE[args.precision],
               "peers": gpu.peer_names({q.name: platform_of[q.name] for q in peers}),
               "available_devices": lowering.available_devices(), "rows": rows}
    return report.publish(results, render(results), args.json)


if __name__ == "__main__":
    main(sys.argv[1:])
