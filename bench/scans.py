"""cumsum on the CPU device against JAX: ``value_and_grad`` of
``mean(cumsum(x) ** 2)`` over float32 ``x`` (issue 31's target: within 2x of
JAX's ``jit(value_and_grad)``), interleaved in one process.

    python -m bench.scans [--size 16777216] [--repeats 10]

Prints the minimum ms of each over ``--repeats`` calls (after a first call
that compiles), their ratio, the number of host steps symdiff's call ran (0:
the scans ran as device kernels, ``lowering.library_kernels.scans``), the
largest difference of each gradient from float64's relative to the largest
gradient, and the load average.
"""
from __future__ import annotations

import argparse
import os

import numpy as np

import symdiff as sd

from .profile import best_of


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.scans", description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=1 << 24)
    ap.add_argument("--repeats", type=int, default=10)
    args = ap.parse_args(argv)
    import jax
    import jax.numpy as jnp

    n = args.size
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32) * np.float32(1e-3)

    def loss(x: sd.f32[n]):
        return np.mean(np.cumsum(x) ** 2)
    program = sd.differentiable_program(loss)
    jax_vg = jax.jit(jax.value_and_grad(lambda x: jnp.mean(jnp.cumsum(x) ** 2)))

    ours = program.value_and_grad(x, device="cpu")
    theirs = jax_vg(x)
    jax.block_until_ready(theirs)
    steps = sum(s.get("host_steps", 0) for s in program.stats().values())
    wide = np.cumsum(x.astype(np.float64))
    exact = 2.0 / n * np.cumsum(wide[::-1])[::-1]    # the gradient in float64
    error = {name: float(np.max(np.abs(np.asarray(g, np.float64) - exact)) / np.max(np.abs(exact)))
             for name, g in (("symdiff", ours[1]["x"]), ("jax", theirs[1]))}
    best = {"symdiff": float("inf"), "jax": float("inf")}
    for _ in range(2):  # interleaved: the machine's load changes between them alike
        best["symdiff"] = min(best["symdiff"], 1e3 * best_of(lambda: program.value_and_grad(x, device="cpu"),
                                                             args.repeats))
        best["jax"] = min(best["jax"], 1e3 * best_of(lambda: jax.block_until_ready(jax_vg(x)), args.repeats))
    print(f"value_and_grad of mean(cumsum(x) ** 2), {n} float32, cpu device, best of {2 * args.repeats}")
    print(f"  symdiff {best['symdiff']:8.2f} ms   host steps {steps}   gradient error {error['symdiff']:.1e}")
    print(f"  jax     {best['jax']:8.2f} ms   (jit(value_and_grad))   gradient error {error['jax']:.1e}")
    print(f"  ratio   {best['symdiff'] / best['jax']:8.2f}   (errors: largest difference from float64, "
          "relative to the largest gradient)")
    print(f"  load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
