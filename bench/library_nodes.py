"""``python -m bench.library_nodes``: value_and_grad of programs built on np.linalg
library nodes (solve, cholesky, inv) against JAX ``jit(value_and_grad)``, float64, on
one device (default the CPU device), in one process.

    python -m bench.library_nodes [--n 512] [--device cpu] [--repeats 7]

Per row: min / median ms of each, and their ratio.  At 512 a library node is past
the device kernels' sizes (``lowering.library_kernels.linalg``): on the Slang
devices it runs on the host through numpy's LAPACK between the compiled pieces of
the program (``lowering.host_steps``), so the rows measure that split: the pieces'
kernels, the host's LAPACK, and the copies between them.  On a loaded machine,
run with ``OPENBLAS_NUM_THREADS=1``: OpenBLAS's threads spin against the load
and made both sides 5-10x slower (docs/benchmarks.md).
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import symdiff as sd

ROWS = {
    "solve": (lambda xp, a, b: xp.sum(xp.tanh(xp.linalg.solve(a, b))), 2),
    "cholesky": (lambda xp, a: xp.sum(xp.linalg.cholesky(a) ** 2), 1),
    "inv": (lambda xp, a: xp.sum(xp.linalg.inv(a) * a), 1),
}


def inputs(name: str, n: int, rng: np.random.Generator) -> list[np.ndarray]:
    x = rng.normal(size=(n, n)) / np.sqrt(n)
    a = x @ x.T + np.eye(n) if name == "cholesky" else x + 2 * np.eye(n)
    return [a, rng.normal(size=(n, 16))][:ROWS[name][1]]


def timed(call, repeats: int) -> list[float]:
    call()
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        out.append((time.perf_counter() - start) * 1e3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=512)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=7)
    opts = parser.parse_args()
    import jax
    jax.config.update("jax_enable_x64", True)
    rng = np.random.default_rng(0)
    print(f"value_and_grad, float64, n={opts.n}, symdiff on {opts.device} vs JAX jit on its default backend")
    print(f"{'row':<10} {'symdiff min/median ms':>22} {'JAX min/median ms':>18} {'ratio':>6}")
    for name, (fn, count) in ROWS.items():
        args = inputs(name, opts.n, rng)
        names = "ab"[:count]
        scope = {"fn": fn, "np": np}
        exec(f"def {name}({', '.join(names)}):\n    return fn(np, {', '.join(names)})\n", scope)  # noqa: S102
        program = sd.differentiable_program(scope[name])
        ours = timed(lambda: program.value_and_grad(*args, device=opts.device), opts.repeats)
        jitted = jax.jit(jax.value_and_grad(lambda *xs: fn(jax.numpy, *xs), argnums=tuple(range(count))))
        jargs = [jax.numpy.asarray(a) for a in args]
        theirs = timed(lambda: jax.block_until_ready(jitted(*jargs)), opts.repeats)
        print(f"{name:<10} {min(ours):>10.2f} / {np.median(ours):>9.2f} {min(theirs):>8.2f} / "
              f"{np.median(theirs):>7.2f} {np.median(ours) / np.median(theirs):>6.2f}")


if __name__ == "__main__":
    main()
