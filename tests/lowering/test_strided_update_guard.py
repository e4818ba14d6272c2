"""An in-place update through a strided slice that reaches the last row
(x[5::3] on 6 rows): the guard of the copy of the untouched elements held
(t0/3 - 5/3 >= 0), which a float evaluation gets wrong at t0 = 5 (-2e-16), so
the updated row also took the copy's gradient (2 instead of 1) on every device,
the numpy interpreter included.  Found by the fuzzer, seed 21171."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import symdiff as sd

jax.config.update("jax_enable_x64", True)


@sd.differentiable_program
def strided_update(x: sd.f32[6, 6], c: sd.f32[2]):
    for _ in range(2):
        x[5::3, 5:1:-1] += c[0]
        x[::-3, 1] *= c[1]
    return np.sum(x * x)


def reference(x, c):
    for _ in range(2):
        x = x.at[5::3, 5:1:-1].add(c[0])
        x = x.at[::-3, 1].multiply(c[1])
    return jnp.sum(x * x)


@pytest.mark.parametrize("device_name", ["numpy", "cpu", "vulkan"])
def test_strided_update_to_the_last_row_matches_jax(device_name):
    from symdiff import lowering
    if device_name not in lowering.available_devices():
        pytest.skip(f"no {device_name} device here")
    rng = np.random.default_rng(0)
    x, c = rng.standard_normal((6, 6)).astype(np.float32), np.array([0.5, 1.5], np.float32)
    value, grads = strided_update.value_and_grad(x, c, device=device_name)
    want, (gx, gc) = jax.jit(jax.value_and_grad(reference, argnums=(0, 1)))(x.astype(np.float64), c.astype(np.float64))
    np.testing.assert_allclose(value, want, rtol=1e-5)
    np.testing.assert_allclose(grads["x"], gx, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(grads["c"], gc, rtol=1e-5, atol=1e-5)
