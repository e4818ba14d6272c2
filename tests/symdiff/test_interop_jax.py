"""sd.to_jax against JAX's own autodiff of the same function written in
jax.numpy, in float64 (numpy interpreter; one float32 check on slangpy's CPU device)."""
import numpy as np
import pytest

import symdiff as sd

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402


def _two_outputs(xp):
    def f(a, b, idx):
        return xp.sum(xp.tanh(a * b) ** 2) + xp.sum(a[idx]), xp.sin(a) * b
    return f


def _inputs():
    rng = np.random.default_rng(7)
    return rng.standard_normal(6), rng.standard_normal(6), np.array([0, 2, 2, 5], np.int32)


@pytest.fixture(scope="module")
def fn():
    return sd.to_jax(sd.differentiable_program(_two_outputs(np)), device="numpy")


def _objective(f, ct):
    def scalar(a, b, idx):
        s, v = f(a, b, idx)
        return 1.5 * s + jnp.sum(v * ct)
    return scalar


def test_values_and_vjp_match_jax(fn):
    a, b, idx = _inputs()
    ref = _two_outputs(jnp)
    for got, want in zip(fn(a, b, idx), ref(a, b, idx)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    cts = (jnp.asarray(0.7), jnp.asarray(np.random.default_rng(8).standard_normal(6)))
    _, pull = jax.vjp(lambda a, b: fn(a, b, idx), a, b)
    _, ref_pull = jax.vjp(lambda a, b: ref(a, b, idx), a, b)
    for got, want in zip(pull(cts), ref_pull(cts)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_jit_of_grad_matches_jax(fn):
    a, b, idx = _inputs()
    ct = np.random.default_rng(9).standard_normal(6)
    got = jax.jit(jax.grad(_objective(fn, ct), argnums=(0, 1)))(a, b, idx)
    want = jax.grad(_objective(_two_outputs(jnp), ct), argnums=(0, 1))(a, b, idx)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


def test_grad_of_grad_matches_jax(fn):
    """Second order: JAX differentiates our VJP program through its own backward pass."""
    a, b, idx = _inputs()
    ct = np.random.default_rng(10).standard_normal(6)

    def second(f):
        def g(a, b):
            ga, gb = jax.grad(_objective(f, ct), argnums=(0, 1))(a, b, idx)
            return jnp.sum(ga * gb) + jnp.sum(ga ** 2)
        return jax.grad(g, argnums=(0, 1))(a, b)

    for got, want in zip(second(fn), second(_two_outputs(jnp))):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_vmap_runs_per_element(fn):
    a, b, idx = _inputs()
    batch = np.stack([a, 2 * a, -a])
    got = jax.vmap(lambda a: fn(a, b, idx)[0])(batch)
    want = jax.vmap(lambda a: _two_outputs(jnp)(a, b, idx)[0])(batch)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_arguments_outside_wrt_get_zero_cotangents():
    fn = sd.to_jax(sd.differentiable_program(_two_outputs(np)), wrt="a", device="numpy")
    a, b, idx = _inputs()
    ga, gb = jax.grad(lambda a, b: fn(a, b, idx)[0], argnums=(0, 1))(a, b)
    np.testing.assert_array_equal(gb, np.zeros_like(b))
    np.testing.assert_allclose(ga, jax.grad(lambda a: _two_outputs(jnp)(a, b, idx)[0])(a), rtol=1e-12)


def test_keyword_arguments():
    fn = sd.to_jax(lambda x, w: np.sum(x * w), device="numpy")
    x, w = np.ones(3), np.arange(3.0)
    np.testing.assert_allclose(jax.grad(lambda x: fn(w=w, x=x))(x), w)


@sd.differentiable_program
def _mlp(x: sd.f32[8, 5], w: sd.f32[5, 4], b: sd.f32[4]):
    return np.mean(np.tanh(x @ w + b) ** 2)


def test_cpu_device_float32_matches_jax_float64():
    """JAX hands pure_callback read-only arrays: the CPU device's uploads take them."""
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((8, 5), (5, 4), (4,)))
    fn = sd.to_jax(_mlp, device="cpu")
    value, grads = jax.jit(jax.value_and_grad(fn, argnums=(1, 2)))(x, w, b)
    ref = jax.value_and_grad(lambda x, w, b: jnp.mean(jnp.tanh(x @ w + b) ** 2), argnums=(1, 2))
    ref_value, ref_grads = ref(*(v.astype(np.float64) for v in (x, w, b)))
    assert value.dtype == np.float32 and grads[0].dtype == np.float32
    np.testing.assert_allclose(value, ref_value, rtol=1e-5)
    for g, r in zip(grads, ref_grads):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-6)
