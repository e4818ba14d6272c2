"""``accumulate={"w": "push"}``: per-sample gradients of broadcast inputs,
checked against ``jax.vmap(jax.grad(per-example loss))`` in float64 and
against the default (summed) gradient."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import symdiff as sd

jax.config.update("jax_enable_x64", True)

B, N, H = 6, 3, 4


def _mlp(x, y, w1, b1, w2, xp):
    """Sum over the batch of per-example squared errors of a one-hidden-layer MLP."""
    hidden = xp.tanh(x @ w1 + b1)
    return xp.sum((hidden @ w2 - y) ** 2)


def _program(dtype):
    spec = sd.f64 if dtype == np.float64 else sd.f32

    def mlp(x: spec[B, N], y: spec[B], w1: spec[N, H], b1: spec[H], w2: spec[H]):
        return _mlp(x, y, w1, b1, w2, np)
    return sd.differentiable_program(mlp)


PROGRAMS = {np.float64: _program(np.float64), np.float32: _program(np.float32)}
PARAMS = ["w1", "b1", "w2"]


def _inputs(dtype):
    rng = np.random.default_rng(7)
    shapes = {"x": (B, N), "y": (B,), "w1": (N, H), "b1": (H,), "w2": (H,)}
    return {k: rng.standard_normal(s).astype(dtype) for k, s in shapes.items()}


def _per_example_jax(inputs):
    def one(x, y, w1, b1, w2):  # one example: x (N,), y ()
        return _mlp(x[None], y[None], w1, b1, w2, jnp)
    f64 = {k: jnp.asarray(v, jnp.float64) for k, v in inputs.items()}
    grads = jax.vmap(jax.grad(one, argnums=(2, 3, 4)), in_axes=(0, 0, None, None, None))(
        f64["x"], f64["y"], f64["w1"], f64["b1"], f64["w2"])
    return dict(zip(PARAMS, (np.asarray(g) for g in grads)))


def test_per_sample_gradients_match_jax_vmap_grad(device):
    # float64 where the device computes tanh in float64 correctly (lavapipe does not: slangpy notes)
    dtype = np.float32 if device == "vulkan" else np.float64
    inputs = _inputs(dtype)
    program = PROGRAMS[dtype]
    _, pushed = program.value_and_grad(*inputs.values(), wrt=PARAMS, device=device,
                                       accumulate={p: "push" for p in PARAMS})
    expected = _per_example_jax(inputs)
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-12)
    for p in PARAMS:
        assert pushed[p].shape == (B,) + inputs[p].shape
        np.testing.assert_allclose(pushed[p], expected[p], **tol)


def test_per_sample_gradients_sum_to_the_default_gradient(device):
    dtype = np.float32 if device == "vulkan" else np.float64
    inputs = _inputs(dtype)
    program = PROGRAMS[dtype]
    value, summed = program.value_and_grad(*inputs.values(), wrt=PARAMS, device=device)
    pvalue, pushed = program.value_and_grad(*inputs.values(), wrt=PARAMS, device=device,
                                            accumulate={"w1": "push", "b1": "push"})
    assert pvalue == pytest.approx(value)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(pushed["w1"].sum(axis=0), summed["w1"], **tol)
    np.testing.assert_allclose(pushed["b1"].sum(axis=0), summed["b1"], **tol)
    np.testing.assert_allclose(pushed["w2"], summed["w2"], **tol)   # not pushed: the default


def test_push_with_an_explicit_broadcast_to_and_an_elementwise_scale():
    @sd.differentiable_program
    def scaled(x: sd.f64[B, N], s: sd.f64[N]):
        return np.sum(np.sin(x * np.broadcast_to(s, (B, N))))

    rng = np.random.default_rng(1)
    x, s = rng.standard_normal((B, N)), rng.standard_normal(N)
    pushed = scaled.grad(x, s, wrt=["s"], accumulate={"s": "push"}, device="numpy")["s"]
    np.testing.assert_allclose(pushed, x * np.cos(x * s), rtol=1e-12)   # d/ds_j sin(x_bj s_j), per b


def test_push_of_an_unbroadcast_input_is_refused_naming_the_line():
    @sd.differentiable_program
    def regularised(x: sd.f64[B, N], w: sd.f64[N]):
        return np.sum(x * w) + np.sum(w ** 2)

    with pytest.raises(sd.DifferentiationError, match=r"test_push_gradients.py:\d+: .*uses 'w' without broadcasting"):
        regularised.grad(np.ones((B, N)), np.ones(N), accumulate={"w": "push"}, device="numpy")
    with pytest.raises(sd.DifferentiationError, match="without broadcasting"):
        regularised.grad(np.ones((B, N)), np.ones(N), accumulate={"x": "push"}, device="numpy")


def test_unknown_mode_and_unknown_input_are_refused():
    program = PROGRAMS[np.float64]
    inputs = _inputs(np.float64)
    with pytest.raises(sd.DifferentiationError, match="'mean'.*the modes are 'sum', 'push'"):
        program.grad(*inputs.values(), wrt=PARAMS, accumulate={"w1": "mean"}, device="numpy")
    with pytest.raises(sd.DifferentiationError, match="'x', which is not among the inputs"):
        program.grad(*inputs.values(), wrt=PARAMS, accumulate={"x": "push"}, device="numpy")


def test_push_over_different_batches_is_refused():
    @sd.differentiable_program
    def two_batches(x: sd.f64[B, N], z: sd.f64[B + 1, N], w: sd.f64[N]):
        return np.sum(x * w) + np.sum(z * w)

    with pytest.raises(sd.DifferentiationError, match="same batch in every use"):
        two_batches.grad(np.ones((B, N)), np.ones((B + 1, N)), np.ones(N), wrt=["w"],
                         accumulate={"w": "push"}, device="numpy")


def test_push_through_a_custom_backward_is_refused():
    @sd.custom_vjp
    def scale(x, w):
        return x * w[None, :]

    scale.defvjp(lambda x, w: (scale(x, w), (x, w)),
                 lambda res, g: (g * res[1][None, :], np.sum(g * res[0], axis=0)))

    @sd.differentiable_program
    def f(x: sd.f64[B, N], w: sd.f64[N]):
        return np.sum(scale(x, w))

    assert np.allclose(f.grad(np.ones((B, N)), np.ones(N), wrt=["w"], device="numpy")["w"], B)
    with pytest.raises(sd.DifferentiationError, match="push is not supported through a custom backward"):
        f.grad(np.ones((B, N)), np.ones(N), wrt=["w"], accumulate={"w": "push"}, device="numpy")


def test_push_over_an_sd_map_range_that_starts_past_zero():
    @sd.differentiable_program
    def conv(x: sd.f64[8], w: sd.f64[3]):
        out = np.zeros(8)
        for i in sd.map[1:7]:
            out[i] = w[0] * x[i - 1] + w[1] * x[i] + w[2] * x[i + 1]
        return np.sum(np.sin(out))

    rng = np.random.default_rng(2)
    x, w = rng.standard_normal(8), rng.standard_normal(3)
    pushed = conv.grad(x, w, wrt=["w"], accumulate={"w": "push"}, device="numpy")["w"]
    taps = np.stack([x[0:6], x[1:7], x[2:8]], axis=1)      # iteration i = 1..6 is batch element i - 1
    np.testing.assert_allclose(pushed, np.cos(taps @ w)[:, None] * taps, rtol=1e-12)


def test_push_with_a_symbolic_batch_size():
    batch = sd.symbol("B")

    @sd.differentiable_program
    def f(x: sd.f64[batch, N], w: sd.f64[N]):
        return np.sum(np.tanh(x * w[None, :]))

    w = np.linspace(-1.0, 1.0, N)
    for b in (2, 5):   # one trace, sizes bound per call
        x = np.random.default_rng(b).standard_normal((b, N))
        pushed = f.grad(x, w, wrt=["w"], accumulate={"w": "push"}, device="numpy")["w"]
        np.testing.assert_allclose(pushed, x * (1 - np.tanh(x * w) ** 2), rtol=1e-12)
