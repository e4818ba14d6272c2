"""NaN and edge-point cases (issue 10, bug 7): values must be numpy's and
gradients JAX's (float64) on every device; shared by tests/symdiff (the numpy
device) and tests/lowering (the Slang devices).

Each case is an elementwise-or-reduction function written once for ``np`` and
``jnp``, with inputs holding NaNs, ties and negative bases; its vector-Jacobian
product with a ones cotangent shows every element's gradient.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

NAN = np.nan


@dataclass(frozen=True)
class NanCase:
    name: str
    body: Callable  # body(xp, *arrays) with xp numpy or jax.numpy
    inputs: tuple[np.ndarray, ...]


def _f32(*rows) -> np.ndarray:
    return np.array(rows, np.float32)


CASES = [
    NanCase("maximum", lambda xp, x, y: xp.maximum(x, y) + xp.maximum(x, 0.0),  # and relu
            (_f32(NAN, 1, 2, 0, NAN, -1), _f32(0, NAN, 2, 1, NAN, -3))),
    NanCase("minimum", lambda xp, x, y: xp.minimum(x, y),
            (_f32(NAN, 1, 2, 0, NAN, -1), _f32(0, NAN, 2, 1, NAN, -3))),
    NanCase("clip", lambda xp, x: xp.clip(x, -1.0, 1.0), (_f32(NAN, -2, 0.5, 3, -0.25, NAN),)),
    # abs at 0 is left out: JAX gives 1 there, we give 0 (docs/guide.md)
    NanCase("abs", lambda xp, x: xp.abs(x), (_f32(NAN, -2, 3, -0.5),)),
    NanCase("sign", lambda xp, x: xp.sign(x) * x, (_f32(NAN, -2, 3, 0.5),)),
    NanCase("max_rows", lambda xp, x: xp.max(x, axis=1),
            (_f32([1, NAN, 3], [1, 2, 3], [3, 1, 3], [NAN, NAN, 0]),)),
    NanCase("min_rows", lambda xp, x: xp.min(x, axis=1),
            (_f32([1, NAN, 3], [1, 2, 3], [1, 3, 1], [NAN, NAN, 0]),)),
    NanCase("power", lambda xp, x, y: xp.power(x, y),
            (_f32(-2, -2, -2, 0, 0, 2, -0.5, 0, 3, 1, NAN),
             _f32(2, 3, 0.5, 2, 0, 0.5, -1, 1, 0, NAN, 0))),
    NanCase("power_large_integer", lambda xp, x: xp.power(x, 20.0), (_f32(-1.5, 1.25, -0.5),)),
    # fmax/fmin drop a NaN argument; JAX gives a tie's gradient to the second argument
    NanCase("fmax", lambda xp, x, y: xp.fmax(x, y) + 2 * xp.fmax(x, 0.0),
            (_f32(NAN, 1, 2, 0, NAN, -1), _f32(0, NAN, 2, 1, NAN, -3))),
    NanCase("fmin", lambda xp, x, y: xp.fmin(x, y) + 2 * xp.fmin(0.0, x),
            (_f32(NAN, 1, 2, 0, NAN, -1), _f32(0, NAN, 2, 1, NAN, -3))),
    # the real cube root: negative for a negative argument, gradient inf at 0
    NanCase("cbrt", lambda xp, x: xp.cbrt(x), (_f32(-8, -0.5, 2, 0, 27, NAN, -1e-3, 1e-3),)),
]


def program(sd, case: NanCase):
    """The case as a ``@differentiable_program`` with ``sd.f32`` annotations."""
    names = [f"a{k}" for k in range(len(case.inputs))]
    ns = {"body": case.body, "np": np}
    exec(f"def {case.name}({', '.join(names)}):\n    return body(np, {', '.join(names)})\n", ns)
    fn = ns[case.name]
    fn.__annotations__ = {n: sd.f32[x.shape] for n, x in zip(names, case.inputs)}
    return sd.differentiable_program(fn)


def jax_vjp(case: NanCase) -> tuple[np.ndarray, ...]:
    """JAX's float64 gradients of ``sum(body)`` (a ones cotangent)."""
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    xs = [jnp.asarray(x, jnp.float64) for x in case.inputs]
    out, pullback = jax.vjp(jax.jit(lambda *a: case.body(jnp, *a)), *xs)
    return tuple(np.asarray(g) for g in pullback(jnp.ones_like(out)))


def check(sd, case: NanCase, device: str) -> None:
    """Values against numpy, gradients against JAX, NaN where they have NaN."""
    prog = program(sd, case)
    with np.errstate(invalid="ignore", divide="ignore"):
        want = case.body(np, *case.inputs)
    got = prog(*case.inputs, device=device)
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=1e-6, err_msg=f"{case.name} value on {device}")
    _, grads = prog.vjp(*case.inputs, cotangent=np.ones_like(want), device=device)
    for n, ref in zip(sorted(grads), jax_vjp(case)):
        np.testing.assert_allclose(np.asarray(grads[n], np.float64), ref, rtol=1e-5, atol=1e-6,
                                   err_msg=f"{case.name}: gradient of {n} on {device}")
