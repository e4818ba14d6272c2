"""Gradients of ``sd.map`` programs whose indices need the index analysis
(reshaped views read at shifted offsets; strided and reversed plain writes),
on the numpy interpreter and every Slang device, against JAX in float64."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from symdiff import lowering
import symdiff as sd

jax.config.update("jax_enable_x64", True)
DEVICES = [pytest.param("numpy", id="numpy")] + [
    pytest.param(d, id=d, marks=[pytest.mark.vulkan] if d == "vulkan" else []) for d in ("cpu", "vulkan")]


@sd.differentiable_program
def reshaped_sum_of_squares(a: sd.f32[3, 3]):
    t = (a * 1.0).reshape(-1)
    s = np.zeros(1, dtype=np.float32)
    for i in sd.map[1:9]:
        s[0] += t[i - 1] * t[i - 1]
    return s[0]


@sd.differentiable_program
def reshaped_shift(a: sd.f32[5, 3, 5]):
    t = (a * 1.0).reshape(-1)
    out = np.zeros(75, dtype=np.float32)
    for i in sd.map[2:75]:
        out[i] = t[i - 2]
    return np.sum(out * out)


@sd.differentiable_program
def strided_and_reversed(a: sd.f32[8]):
    out = np.zeros(16, dtype=np.float32)
    for i in sd.map[0:8]:
        out[2 * i] = a[i] * a[i]
    rev = np.zeros(8, dtype=np.float32)
    for i in sd.map[0:8]:
        rev[7 - i] = out[2 * i] * (i + 1)
    return np.sum(np.sin(rev)) + np.sum(out)


def _jax_strided_and_reversed(a):
    out = jnp.zeros(16).at[::2].set(a * a)
    rev = (out[::2] * jnp.arange(1, 9))[::-1]
    return jnp.sum(jnp.sin(rev)) + jnp.sum(out)


CASES = {
    "reshaped_sum_of_squares": (reshaped_sum_of_squares, (3, 3), lambda a: jnp.sum(a.reshape(-1)[:8] ** 2)),
    "reshaped_shift": (reshaped_shift, (5, 3, 5), lambda a: jnp.sum(a.reshape(-1)[:73] ** 2)),
    "strided_and_reversed": (strided_and_reversed, (8,), _jax_strided_and_reversed),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_value_and_gradient_match_jax(case, device):
    if device != "numpy" and device not in lowering.available_devices():
        pytest.skip(f"no {device} device here")
    prog, shape, ref = CASES[case]
    a = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    value, grads = prog.value_and_grad(a, device=device)
    ref_value, ref_grad = jax.jit(jax.value_and_grad(ref))(jnp.asarray(a, dtype=jnp.float64))
    np.testing.assert_allclose(float(value), float(ref_value), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(grads["a"], np.asarray(ref_grad), rtol=1e-4, atol=1e-5)
