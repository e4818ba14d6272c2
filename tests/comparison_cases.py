"""Comparisons of two computed values inside one tasklet (an ``sd.map`` body)
that sympy 1.14 cannot put in a stable canonical form: ``b - c*a <
acos(e*tanh(-d))`` and ``acos(...) > -a*c + b`` turn into each other, and
``Piecewise`` re-canonicalises its conditions until they stop changing, so
tracing the ``where`` (or differentiating ``minimum``, whose partials compare
its arguments) recursed until Python gave up (fuzzer seeds 101315, 101997).

The argument names matter: sympy orders the two sides by their symbols' names
(``a_5*c_4`` ...), and these names make the canonical form oscillate.  Shared
by tests/symdiff (numpy device, float64) and tests/lowering (Slang devices,
float32); values against numpy, gradients against JAX float64.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

N = 4


@dataclass(frozen=True)
class ComparisonCase:
    name: str
    body: Callable  # body(xp, a, b, c, d, e) on scalars (a map body) or arrays (numpy, JAX)


CASES = [
    # Min's derivative rule compares its two arguments (a Piecewise per partial)
    ComparisonCase("minimum", lambda xp, a, b, c, d, e: xp.minimum(xp.arccos(e * xp.tanh(-d)), b - c * a)),
    ComparisonCase("maximum", lambda xp, a, b, c, d, e: xp.maximum(xp.arccos(e * xp.tanh(-d)), b - c * a)),
    # the user's own comparison as the where's condition, both ways round
    ComparisonCase("where_less", lambda xp, a, b, c, d, e:
                   xp.where(b - c * a < xp.arccos(e * xp.tanh(-d)), a * b, c)),
    ComparisonCase("where_greater", lambda xp, a, b, c, d, e:
                   xp.where(xp.arccos(e * xp.tanh(-d)) > b - c * a, a * b, c)),
]

NAMES = ("a", "b", "c", "d", "e")


def inputs(dtype) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(2026)
    return tuple(rng.uniform(-0.9, 0.9, N).astype(dtype) for _ in NAMES)


def program(sd, case: ComparisonCase, spec):
    """``sum(body)`` with the body in one ``sd.map`` tasklet, arguments ``spec[N]``."""
    ns = {"body": case.body, "np": np, "sd": sd}
    args = ", ".join(f"{n}[i]" for n in NAMES)
    exec(f"def {case.name}({', '.join(NAMES)}):\n"
         f"    v = np.zeros({N})\n"
         f"    for i in sd.map[0:{N}]:\n"
         f"        v[i] = body(np, {args})\n"
         f"    return np.sum(v)\n", ns)
    fn = ns[case.name]
    fn.__annotations__ = {n: spec[N] for n in NAMES}
    return sd.differentiable_program(fn)


def jax_value_and_grad(case: ComparisonCase, xs: tuple[np.ndarray, ...]) -> tuple[float, tuple[np.ndarray, ...]]:
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    f = jax.value_and_grad(lambda *a: jnp.sum(case.body(jnp, *a)), argnums=tuple(range(len(xs))))
    v, g = f(*(jnp.asarray(x, jnp.float64) for x in xs))
    return float(v), tuple(np.asarray(x) for x in g)


def check(sd, case: ComparisonCase, device: str, spec, dtype, rtol: float) -> None:
    """The value against numpy's, every gradient against JAX float64's."""
    xs = inputs(dtype)
    prog = program(sd, case, spec)
    value, grads = prog.value_and_grad(*xs, device=device)
    want = np.sum(case.body(np, *(x.astype(np.float64) for x in xs)))
    np.testing.assert_allclose(float(value), want, rtol=rtol, err_msg=f"{case.name} value on {device}")
    ref_value, ref_grads = jax_value_and_grad(case, xs)
    assert abs(ref_value - want) <= 1e-12 * max(1.0, abs(want))  # the JAX twin computes the same function
    for n, ref in zip(NAMES, ref_grads):
        np.testing.assert_allclose(np.asarray(grads[n], np.float64), ref, rtol=rtol, atol=rtol,
                                   err_msg=f"{case.name}: gradient of {n} on {device}")
