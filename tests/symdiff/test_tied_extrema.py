"""A tie's derivative sums to 1 through nested maxima and minima:
``max(t, max(2t - t, min(t, 1.0 t)))`` is ``t``, whose derivative is 1 (it
was 1.5: sympy flattened the nesting and gave half to each of three tied
arguments; fuzzer seed 401840).  np.maximum is now a binary ``maximum`` that
splits each tie in half as JAX does, and a flattened ``Max`` (np.clip's,
hand-built graphs) shares a tie equally.  Checked against central finite
differences of the same program on the numpy device (the function is smooth:
all arguments are t)."""
# (no ``from __future__ import annotations``: the programs' shape annotations close over local sizes)
import numpy as np
import pytest

import symdiff as sd


def nested(t: sd.f64[4]):
    out = np.zeros((4,))
    for i in sd.map[0:4]:
        out[i] = np.maximum(t[i], np.maximum(2.0 * t[i] - t[i], np.minimum(t[i], t[i] * 1.0))) \
            + 3.0 * np.minimum(t[i] * t[i], np.minimum(t[i] ** 2, np.maximum(t[i] * t[i], t[i] * t[i])))
    return np.sum(out)


@pytest.mark.parametrize("device", ["numpy", "cpu"])
def test_a_three_way_tie_shares_one(device):
    if device not in sd.available_devices():
        pytest.skip(f"no {device} device here")
    prog = sd.differentiable_program(nested)
    t = np.array([0.5, -1.0, 2.0, 0.0])
    _, grads = prog.value_and_grad(t, device=device)
    h = 1e-6
    fd = np.array([(prog(t + h * e, device="numpy") - prog(t - h * e, device="numpy")) / (2 * h) for e in np.eye(4)])
    np.testing.assert_allclose(grads["t"], fd, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(grads["t"], 1.0 + 6.0 * t, rtol=1e-12)  # d/dt (t + 3 t^2)


def nested_three(a: sd.f64[3], b: sd.f64[3], c: sd.f64[3]):
    out = np.zeros((3,))
    for i in sd.map[0:3]:
        out[i] = np.maximum(a[i], np.maximum(b[i], c[i])) + np.minimum(np.minimum(a[i], b[i]), c[i])
    return np.sum(out)


def test_nested_ties_split_as_the_program_nests_them_like_jax():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy

    def twin(a, b, c):
        return jnp.sum(jnp.maximum(a, jnp.maximum(b, c)) + jnp.minimum(jnp.minimum(a, b), c))
    a = np.array([1.0, 2.0, 0.0])   # a three-way tie, a two-way tie of b and c, no tie
    b = np.array([1.0, 0.5, 1.0])
    c = np.array([1.0, 0.5, -1.0])
    _, grads = sd.differentiable_program(nested_three).value_and_grad(a, b, c, device="numpy")
    want = jax.jit(jax.grad(twin, argnums=(0, 1, 2)))(*(jnp.asarray(v) for v in (a, b, c)))
    for name, w in zip("abc", want):
        np.testing.assert_allclose(grads[name], np.asarray(w), rtol=1e-12, err_msg=name)
