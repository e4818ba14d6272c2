"""Literal zeros, infinities and NaNs in traced arithmetic (``x / 0.0``,
``x * np.inf``, ``x + np.nan``...): values must be numpy's IEEE results and
gradients JAX's (float64) on every device.  sympy folds such constants by its
own rules (``x / 0`` is complex infinity, ``x + nan`` is ``nan`` with
derivative 0, ``0 * x`` is 0), so each case checks that none of that reaches a
device.  Shared by tests/ir (the numpy device) and tests/lowering (the Slang
devices); the checks are ``nan_cases.check``.
"""
from __future__ import annotations

import numpy as np

from nan_cases import NanCase

# every kind of float an IEEE rule treats apart: signs, zero, NaN, inf
X = np.array([1, -1, 0, np.nan, np.inf, -2.5], np.float32)


def _cat(xp, *parts):
    return xp.concatenate(parts)


CASES = [
    # a covariance's / (n - 1.0) at n = 1; JAX: d(x/0)/dx = 1/0 = inf
    NanCase("divide_by_zero", lambda xp, x: _cat(xp, x / 0.0, x / -0.0, x * x / 0.0, x / 0), (X,)),
    NanCase("zero_divided", lambda xp, x: _cat(xp, 0.0 / x, -0.0 / x), (X,)),
    NanCase("zero_times", lambda xp, x: _cat(xp, 0.0 * x, x * 0, x * -0.0), (X,)),
    NanCase("floor_divide_remainder_by_zero", lambda xp, x: _cat(xp, x // 0.0, x // -0.0, x % 0.0), (X,)),
    NanCase("infinite_constants",
            lambda xp, x: _cat(xp, x * np.inf, x - np.inf, np.float32(-np.inf) * x,
                               xp.where(x > 0, x, -np.inf), xp.minimum(x, xp.full(6, np.inf)),
                               xp.exp(x - np.inf)), (X,)),
    NanCase("nan_constants", lambda xp, x: _cat(xp, x + np.nan, x * np.float32(np.nan), xp.maximum(x, np.nan)),
            (X,)),
]


def map_body(xp, a):
    """What ``map_program``'s loop computes, for numpy and JAX."""
    return a / 0.0 + a * np.inf - 0.0 / a


def map_program(sd, dtype=np.float32):
    """``map_body`` written per element in an ``sd.map`` loop."""
    spec = (sd.f32 if dtype == np.float32 else sd.f64)[X.shape]

    def ieee_map(a: spec):
        out = np.zeros_like(a)
        for i in sd.map[0:X.shape[0]]:
            out[i] = a[i] / 0.0 + a[i] * np.inf - 0.0 / a[i]
        return out
    return sd.differentiable_program(ieee_map)


def check_map(sd, device: str, dtype=np.float32) -> None:
    """``map_program`` against numpy's values and JAX's float64 gradients."""
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    x = X.astype(dtype)
    with np.errstate(all="ignore"):
        want = map_body(np, x.astype(np.float64))
    prog = map_program(sd, dtype)
    np.testing.assert_allclose(prog(x, device=device), want, rtol=1e-6, err_msg=f"value on {device}")
    _, pullback = jax.vjp(jax.jit(lambda a: map_body(jnp, a)), jnp.asarray(x, jnp.float64))
    _, grads = prog.vjp(x, cotangent=np.ones_like(x), device=device)
    np.testing.assert_allclose(grads["a"], pullback(jnp.ones(x.shape, jnp.float64))[0], rtol=1e-6,
                               err_msg=f"gradient on {device}")


def integer_program(sd):
    def integer_by_zero(n: sd.i32[4]):
        return np.concatenate([n // 0, n % 0, n * 0])
    return sd.differentiable_program(integer_by_zero)


N = np.array([7, -3, 0, 1], np.int32)
