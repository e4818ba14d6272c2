"""Writes through reshaped views (``A.ravel()``, ``A.reshape(2, 6)[1]``, a
strided slice of ``A.reshape(-1)``, an in-place op on a split) change ``A`` as
in numpy; values against numpy, gradients against JAX float64 (its twin
writes the same flat positions with ``.at``).  Shared by tests/ir (the numpy
device) and tests/lowering (the Slang devices)."""
from __future__ import annotations

import numpy as np

X = np.linspace(-1.0, 1.0, 12).reshape(3, 4)


def writes(x):
    y = x * 1.0
    y.reshape(-1)[::3] = 0.5
    v = y.ravel()
    v += x.ravel() * 2.0
    y.reshape(2, 6)[1] *= 3.0
    w = y.reshape(3, 2, 2)
    w -= x.reshape(3, 2, 2) ** 2
    return y * y


def writes_jax(jnp, x):
    y = x.reshape(-1)
    y = y.at[::3].set(0.5)
    y = y + x.reshape(-1) * 2.0
    y = y.at[6:].multiply(3.0)
    y = y - x.reshape(-1) ** 2
    return (y * y).reshape(3, 4)


def check(sd, device: str) -> None:
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    def prog(x: sd.f32[3, 4]):
        return writes(x)
    program = sd.differentiable_program(prog)
    x = X.astype(np.float32)
    np.testing.assert_allclose(program(x, device=device), writes(X), rtol=1e-5, atol=1e-6)
    _, pullback = jax.vjp(jax.jit(lambda a: writes_jax(jnp, a)), jnp.asarray(X))
    _, grads = program.vjp(x, cotangent=np.ones((3, 4), np.float32), device=device)
    np.testing.assert_allclose(grads["x"], pullback(jnp.ones((3, 4)))[0], rtol=1e-5, atol=1e-5)
