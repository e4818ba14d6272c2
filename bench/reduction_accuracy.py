"""float32 reduction accuracy at scale: ``python -m bench.reduction_accuracy``.

For each case and size, the relative error of symdiff's float32 value and
gradient (relative L2) against float64 computed by JAX from the same float32
inputs, on each device asked for, next to JAX float32's own error.  The
hardening issue's target: symdiff's error within 10x of JAX float32's at every
size up to 2**28, on every device.  Sizes past 2**24 need a few GB (a float64
copy is 8 bytes per element, and JAX's reverse pass holds several): go up one
power at a time.  ``--float32-accumulators`` shows the error before the
wide accumulators (docs/design.md, "Summation and accuracy").

Cases, each isolating one way a float32 sum loses accuracy:

* ``sum``: ``sum(x)``, x uniform in [0, 1): the error of one long sum.
* ``rowsum``: ``sum(x, axis=1)`` over 4096 rows: one thread per row, no
  second stage, so the whole row is summed by one thread.
* ``lse``: ``log(sum(exp(x - max(x)))) + max(x)``: its gradient w.r.t. the
  max is ``1 - sum(softmax)``, which must come out 0 although both terms are
  1, and lands on the argmax element, where the true gradient is only ~1/n.
  Even with exactly rounded sums it is 0 only when the softmax's float32 sum
  rounds to 1 (the rounding of ``1/sum`` decides): JAX float32 misses by an
  ulp for about a third of the seeds, so compare medians over ``--seeds``.
* ``rowlse``: the sum of ``lse`` over each of 4096 rows: 4096 argmax
  elements, so the error's statistics are stable in one seed; rows of up to
  256 points run in a row kernel (``lowering.rowfusion``).
* ``issue10``: the issue's program, ``lse + mean(log1p(exp(-|x|)) + max(x, 0))``.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import symdiff as sd
from symdiff.lowering.kernels import writer

N = sd.symbol("N")
R = sd.symbol("R")
ROWS = 4096


def _lse(xp, x):
    m = xp.max(x)
    return xp.log(xp.sum(xp.exp(x - m))) + m


def _row_lse(xp, x):
    m = xp.max(x, axis=1, keepdims=True)
    return xp.sum(xp.log(xp.sum(xp.exp(x - m), axis=1)) + m[:, 0])


def _issue10(xp, x):
    return _lse(xp, x) + xp.mean(xp.log1p(xp.exp(-xp.abs(x))) + xp.maximum(x, 0))


def _program(body, shape):
    def f(x: sd.f32[shape]):
        return body(np, x)
    return sd.differentiable_program(f)


CASES = {
    # name: (function of (numpy-like module, x), input sampler, 2-D by rows, has a gradient worth checking)
    # (the gradient of a plain sum is exactly 1 everywhere)
    "sum": (lambda xp, x: xp.sum(x), lambda rng, n: rng.random(n, dtype=np.float32), False, False),
    "rowsum": (lambda xp, x: xp.sum(x, axis=1), lambda rng, n: rng.random(n, dtype=np.float32), True, False),
    "lse": (_lse, lambda rng, n: rng.standard_normal(n, dtype=np.float32), False, True),
    "rowlse": (_row_lse, lambda rng, n: rng.standard_normal(n, dtype=np.float32), True, True),
    "issue10": (_issue10, lambda rng, n: rng.standard_normal(n, dtype=np.float32), False, True),
}


def rel(a, ref) -> float:
    a, ref = np.asarray(a, np.float64), np.asarray(ref, np.float64)
    return float(np.linalg.norm((a - ref).ravel()) / max(np.linalg.norm(ref.ravel()), 1e-300))


def jax_results(body, x: np.ndarray, grad: bool, dtype) -> tuple[np.ndarray, np.ndarray | None]:
    """JAX's value and (if ``grad``) gradient in ``dtype``."""
    import jax
    import jax.numpy as jnp
    xj = jnp.asarray(x, dtype)
    if not grad:
        return np.asarray(jax.jit(lambda a: body(jnp, a))(xj)), None
    v, g = jax.jit(jax.value_and_grad(lambda a: body(jnp, a)))(xj)
    return np.asarray(v), np.asarray(g)


def symdiff_results(body, x: np.ndarray, grad: bool, device: str) -> tuple[np.ndarray, np.ndarray | None]:
    prog = _program(body, (R, N) if x.ndim == 2 else N)
    if not grad:
        return np.asarray(prog(x, device=device)), None
    v, g = prog.value_and_grad(x, device=device)
    return np.asarray(v), np.asarray(g["x"])


def _summary(errors: list[float]) -> str:
    """One error, or the median and the worst over seeds."""
    return f"{errors[0]:.1e}" if len(errors) == 1 else f"{np.median(errors):.1e} ({max(errors):.1e})"


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.reduction_accuracy", description=__doc__.splitlines()[0])
    p.add_argument("--devices", nargs="+", default=["cpu", "vulkan"])
    p.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    p.add_argument("--min-log2", type=int, default=16)
    p.add_argument("--max-log2", type=int, default=24)
    p.add_argument("--step", type=int, default=2)
    p.add_argument("--seeds", type=int, default=1, help="inputs per size: the median (and the worst) error")
    p.add_argument("--float32-accumulators", action="store_true",
                   help="sum in float32 accumulators, as before lowering.kernels.writer.WIDE_ACCUMULATORS")
    args = p.parse_args(argv)
    if args.float32_accumulators:
        writer.WIDE_ACCUMULATORS = {}
    import jax
    jax.config.update("jax_enable_x64", True)
    runners = {"jax f32": lambda body, x, grad: jax_results(body, x, grad, np.float32)}
    runners |= {d: (lambda body, x, grad, d=d: symdiff_results(body, x, grad, d)) for d in args.devices}
    print("relative error vs JAX float64: value, then gradient (relative L2); "
          + ("median (worst) over seeds" if args.seeds > 1 else "one seed"))
    print(f"{'case':8} {'n':6}" + "".join(f" {name:>23}" for name in runners))
    for case in args.cases:
        body, sample, rows, grad = CASES[case]
        for k in range(args.min_log2, args.max_log2 + 1, args.step):
            n = 1 << k
            errors: dict[str, list[tuple[float, float]]] = {name: [] for name in runners}
            for seed in range(args.seeds):
                x = sample(np.random.default_rng(seed), n)
                x[x == 0] = 0.5  # float32 normal samples hold exact zeros, where abs' is a convention
                if rows:
                    x = x.reshape(ROWS, n // ROWS)
                ref_v, ref_g = jax_results(body, x, grad, np.float64)
                for name, run in runners.items():
                    v, g = run(body, x, grad)
                    errors[name].append((rel(v, ref_v), rel(g, ref_g) if grad else 0.0))
                    del v, g
                del x, ref_v, ref_g
            for what, column in (("value", 0), ("grad", 1))[:1 + grad]:
                cells = [_summary([e[column] for e in errors[name]]) for name in runners]
                print(f"{case:8} 2^{k:<4}" + "".join(f" {c:>23}" for c in cells) + f"  {what}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
