"""abs'(0) = 0 (symdiff's convention) also where sympy proves the argument's
sign and drops the Abs: at a tie of a maximum at 0 the maximum's half-and-half
derivative leaked through (fuzzer seed 400695).  Checked against JAX float64
with |x| written sign(x) * x, the same convention."""
# (no ``from __future__ import annotations``: the programs' shape annotations close over local sizes)
import numpy as np
import pytest

import symdiff as sd

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy


def program(a: sd.f64[4], b: sd.f64[4]):
    # one sd.map body is one sympy expression: there sympy sees Max(atan2(a, 1.5), b**2) >= 0
    out = np.zeros((4,))
    for i in sd.map[0:4]:
        out[i] = np.hypot(2.0, np.abs(np.maximum(np.arctan2(a[i], 1.5), np.square(b[i]))) + 0.5) + np.abs(np.exp(a[i]) - 1.0) \
            + np.abs(np.clip(a[i], 0.0, 1.0))
    return np.sum(out)


def twin(a, b):
    def absolute(x):
        return jnp.sign(x) * x
    return jnp.sum(jnp.hypot(2.0, absolute(jnp.maximum(jnp.arctan2(a, 1.5), b * b)) + 0.5)
                   + absolute(jnp.exp(a) - 1.0) + absolute(jnp.clip(a, 0.0, 1.0)))


@pytest.mark.parametrize("device", ["numpy", "cpu"])
def test_abs_of_a_provably_nonnegative_tie_has_derivative_zero_at_zero(device):
    if device not in sd.available_devices():
        pytest.skip(f"no {device} device here")
    a = np.array([0.0, 0.3, -0.2, 0.0])
    b = np.array([0.0, 0.1, 0.5, 1.0])   # a tie at 0 in the first element
    value, grads = sd.differentiable_program(program).value_and_grad(a, b, device=device)
    want_value, want = jax.jit(jax.value_and_grad(twin, argnums=(0, 1)))(jnp.asarray(a), jnp.asarray(b))
    rtol = 1e-12 if device == "numpy" else 1e-5
    np.testing.assert_allclose(value, float(want_value), rtol=rtol)
    np.testing.assert_allclose(grads["a"], np.asarray(want[0]), rtol=rtol, atol=rtol)
    np.testing.assert_allclose(grads["b"], np.asarray(want[1]), rtol=rtol, atol=rtol)
