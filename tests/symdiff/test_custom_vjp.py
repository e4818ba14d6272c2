"""``sd.custom_vjp``: user backward rules for subgraphs, checked as Thunder's
guide checks VJP rules: against central differences and against JAX's
gradient of the same function (float64), on numpy, cpu and vulkan."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import symdiff as sd

jax.config.update("jax_enable_x64", True)


def _dtype(device):
    return np.float32 if device == "vulkan" else np.float64   # lavapipe's double exp is wrong (slangpy notes)


def _tol(dtype):
    return dict(rtol=2e-4, atol=2e-5) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-12)


# -- a numerically stable softmax whose backward does not differentiate through the max
@sd.custom_vjp
def softmax(x):
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return e / np.sum(e, axis=-1, keepdims=True)


def softmax_fwd(x):
    y = softmax(x)   # inside its own forward the function is the primal
    return y, y


def softmax_bwd(y, g):
    return (y * (g - np.sum(g * y, axis=-1, keepdims=True)),)


softmax.defvjp(softmax_fwd, softmax_bwd)


# -- relu whose derivative at 0 is 0 (the automatic one of np.maximum(x, 0) splits a tie: 1/2)
@sd.custom_vjp
def relu(x):
    return np.maximum(x, 0.0)


relu.defvjp(lambda x: (relu(x), x), lambda x, g: (np.where(x > 0, g, 0.0),))


def _programs(dtype):
    spec = sd.f64 if dtype == np.float64 else sd.f32

    def attention_like(x: spec[3, 5], w: spec[5, 5], t: spec[3, 5]):
        return np.sum(softmax(np.tanh(x @ w)) * t)

    def relu_layer(x: spec[4, 3], w: spec[3, 2]):
        return np.sum(relu(x @ w) ** 2) + np.sum(relu(x))

    return {"softmax": sd.differentiable_program(attention_like), "relu": sd.differentiable_program(relu_layer)}


PROGRAMS = {np.float64: _programs(np.float64), np.float32: _programs(np.float32)}


def _jax_softmax_loss(x, w, t):
    return jnp.sum(jax.nn.softmax(jnp.tanh(x @ w), axis=-1) * t)


def _jax_relu_loss(x, w):
    return jnp.sum(jax.nn.relu(x @ w) ** 2) + jnp.sum(jax.nn.relu(x))   # jax.nn.relu: derivative 0 at 0


def _inputs(shapes, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


def test_stable_softmax_backward_matches_jax(device):
    dtype = _dtype(device)
    args = _inputs([(3, 5), (5, 5), (3, 5)], dtype)
    value, grads = PROGRAMS[dtype]["softmax"].value_and_grad(*args, device=device)
    f64 = [a.astype(np.float64) for a in args]
    ref_value, ref = jax.jit(jax.value_and_grad(_jax_softmax_loss, argnums=(0, 1, 2)))(*f64)
    assert value == pytest.approx(float(ref_value), rel=1e-5)
    for name, r in zip("xwt", ref):
        np.testing.assert_allclose(grads[name], np.asarray(r), **_tol(dtype))


def test_relu_backward_matches_jax_relu_also_at_zero(device):
    dtype = _dtype(device)
    x, w = _inputs([(4, 3), (3, 2)], dtype, seed=1)
    x[0, 0] = x[2, 1] = 0.0   # relu(x) at exactly 0: the custom rule says 0 (np.maximum's would say 1/2)
    grads = PROGRAMS[dtype]["relu"].grad(x, w, device=device)
    ref = jax.jit(jax.grad(_jax_relu_loss, argnums=(0, 1)))(x.astype(np.float64), w.astype(np.float64))
    for name, r in zip("xw", ref):
        np.testing.assert_allclose(grads[name], np.asarray(r), **_tol(dtype))


def test_custom_rules_agree_with_central_differences():
    x, w, t = _inputs([(3, 5), (5, 5), (3, 5)], np.float64, seed=2)
    sd.gradcheck(PROGRAMS[np.float64]["softmax"], x, w, t)
    x, w = _inputs([(4, 3), (3, 2)], np.float64, seed=3)   # no exact zeros: differences are valid
    sd.gradcheck(PROGRAMS[np.float64]["relu"], x, w)


def test_forward_nodes_are_tagged_and_the_user_backward_replaces_them():
    program = PROGRAMS[np.float64]["softmax"]
    program(*_inputs([(3, 5), (5, 5), (3, 5)], np.float64))
    forward = program.graph
    tagged = [t for t in forward.tasklets() if t.meta.get("custom_vjp") == "softmax"]
    assert {t.meta["custom_vjp_call"] for t in tagged} == {"softmax#0"}
    assert any("max" in t.name for t in tagged)
    backward = program.backward_graph()
    derived = {t.meta.get("forward_tasklet") for t in backward.tasklets() if t.backward}
    assert not derived & {t.name for t in tagged}   # nothing differentiated through the softmax's max
    assert any(t.backward and t.meta.get("custom_vjp") == "softmax" for t in backward.tasklets())


def test_a_view_argument_gets_its_cotangent_at_the_right_elements():
    @sd.custom_vjp
    def square(x):
        return x * x

    square.defvjp(lambda x: (square(x), x), lambda x, g: (2.0 * x * g,))

    @sd.differentiable_program
    def f(a: sd.f64[6]):
        return np.sum(square(a[1:4])) + np.sum(square(a[::2]))

    a = np.arange(6, dtype=np.float64) + 1.0
    expected = 2 * a * ((np.arange(6) >= 1) & (np.arange(6) < 4)) + 2 * a * (np.arange(6) % 2 == 0)
    np.testing.assert_allclose(f.grad(a, device="numpy")["a"], expected)


def _bad(fwd, bwd):
    @sd.custom_vjp
    def op(x):
        return x * 2.0

    op.defvjp(fwd, bwd)

    @sd.differentiable_program
    def f(x: sd.f64[3]):
        return np.sum(op(x))
    return f


def test_backward_with_the_wrong_count_is_refused():
    f = _bad(lambda x: (x * 2.0, ()), lambda res, g: (g, g))
    with pytest.raises(sd.CustomVJPError, match=r"must return a tuple of 1 cotangent.*a tuple of 2"):
        f.grad(np.ones(3), device="numpy")
    f = _bad(lambda x: (x * 2.0, ()), lambda res, g: g * 2.0)
    with pytest.raises(sd.CustomVJPError, match="must return a tuple of 1 cotangent.*TracedArray"):
        f.grad(np.ones(3), device="numpy")


def test_backward_with_the_wrong_shape_is_refused_naming_the_call_line():
    f = _bad(lambda x: (x * 2.0, ()), lambda res, g: (np.sum(g),))
    with pytest.raises(sd.CustomVJPError, match=r"test_custom_vjp.py:\d+: op: cotangent 0 .* has shape \(\), "
                                                r"but argument 0 of op has shape \(3,\)"):
        f.grad(np.ones(3), device="numpy")


def test_forward_must_return_a_pair_and_not_capture_traced_values():
    f = _bad(lambda x: x * 2.0, lambda res, g: (g,))
    with pytest.raises(sd.CustomVJPError, match=r"must return \(output, residuals\)"):
        f(np.ones(3), device="numpy")

    @sd.differentiable_program
    def captures(x: sd.f64[3], y: sd.f64[3]):
        @sd.custom_vjp
        def scaled(v):
            return v * y

        scaled.defvjp(lambda v: (v * y, ()), lambda res, g: (g,))
        return np.sum(scaled(x))

    with pytest.raises(sd.CustomVJPError, match="reads 'y', which is not one of its arguments"):
        captures(np.ones(3), np.ones(3), device="numpy")


def test_outside_a_trace_it_is_the_plain_function():
    x = np.array([[1.0, 2.0, 3.0]])
    np.testing.assert_allclose(softmax(x), np.exp(x) / np.exp(x).sum())


def test_hessian_vector_product_through_a_custom_backward_matches_jax():
    @sd.differentiable_program
    def f(x: sd.f64[2, 4], t: sd.f64[2, 4]):
        return np.sum(softmax(np.sin(x)) * t)

    x, t, v = np.random.default_rng(4).standard_normal((3, 2, 4))
    _, hv = f.grad_program(wrt=["x"]).vjp(x, t, cotangent=v, wrt=["x"], device="numpy")
    ref = jax.vjp(jax.jit(jax.grad(lambda x: jnp.sum(jax.nn.softmax(jnp.sin(x), axis=-1) * t))), x)[1](v)[0]
    np.testing.assert_allclose(hv["x"], np.asarray(ref), rtol=1e-10, atol=1e-12)


def test_second_order_through_an_internal_residual_is_refused():
    @sd.custom_vjp
    def softplus(x):
        return np.log1p(np.exp(x))

    def fwd(x):
        e = np.exp(x)
        return np.log1p(e), e          # e: computed inside, not an output

    softplus.defvjp(fwd, lambda e, g: (g * e / (1.0 + e),))

    @sd.differentiable_program
    def f(x: sd.f64[3]):
        return np.sum(softplus(x))

    x = np.array([-1.0, 0.5, 2.0])
    np.testing.assert_allclose(f.grad(x, device="numpy")["x"], 1 / (1 + np.exp(-x)), rtol=1e-12)
    with pytest.raises(sd.DifferentiationError, match="residual .* which the forward computes internally"):
        f.grad_program().vjp(x, cotangent=np.ones(3), device="numpy")


def test_graph_view_groups_a_call_into_one_named_box():
    from symdiff.ir.view import GraphView
    program = PROGRAMS[np.float64]["softmax"]
    program(*_inputs([(3, 5), (5, 5), (3, 5)], np.float64))
    for graph, label in ((program.graph, "softmax#0 (custom_vjp)"),
                         (program.backward_graph(), "softmax#0 (custom_vjp), backward")):
        (lines,) = GraphView(graph).groupings()[:1]
        (gid,) = [g for g, text in lines.labels.items() if text == label]
        tagged = {t.name for t in graph.tasklets() if t.meta.get("custom_vjp_call") == "softmax#0"
                  and t.backward == label.endswith("backward")}
        assert tagged <= set(lines.members[gid])


def test_vjp_of_a_program_returning_the_custom_output_itself():
    """The output container is renamed to the program's result after the call
    is recorded; the record finds it through the tagged tasklet's edge."""
    @sd.differentiable_program
    def f(x: sd.f64[2, 4]):
        return softmax(x)

    x, ct = np.random.default_rng(6).standard_normal((2, 2, 4))
    value, grads = f.vjp(x, cotangent=ct, device="numpy")
    ref_value, vjp = jax.vjp(jax.jit(lambda x: jax.nn.softmax(x, axis=-1)), x)
    np.testing.assert_allclose(value, np.asarray(ref_value), rtol=1e-12)
    np.testing.assert_allclose(grads["x"], np.asarray(vjp(ct)[0]), rtol=1e-10, atol=1e-14)


def test_two_outputs_one_of_them_unused_downstream():
    @sd.custom_vjp
    def sincos(x, scale):
        return np.sin(x) * scale, np.cos(x) * scale

    def fwd(x, scale):
        return sincos(x, scale), (x, scale)

    def bwd(res, cts):
        x, scale = res
        g_sin, g_cos = cts
        return (scale * (g_sin * np.cos(x) - g_cos * np.sin(x)),
                np.sum(g_sin * np.sin(x) + g_cos * np.cos(x), keepdims=True))

    sincos.defvjp(fwd, bwd)

    @sd.differentiable_program
    def both(x: sd.f64[4], scale: sd.f64[1]):
        s, c = sincos(x, scale)
        return np.sum(s * c)

    @sd.differentiable_program
    def first_only(x: sd.f64[4], scale: sd.f64[1]):
        s, _ = sincos(x, scale)   # the cosine's cotangent is zero
        return np.sum(s ** 2)

    x, scale = np.array([0.3, -1.2, 2.0, 0.0]), np.array([1.5])
    for program, ref in ((both, lambda x, a: jnp.sum(jnp.sin(x) * a * jnp.cos(x) * a)),
                         (first_only, lambda x, a: jnp.sum((jnp.sin(x) * a) ** 2))):
        grads = program.grad(x, scale, device="numpy")
        expected = jax.jit(jax.grad(ref, argnums=(0, 1)))(x, scale)
        np.testing.assert_allclose(grads["x"], np.asarray(expected[0]), rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(grads["scale"], np.asarray(expected[1]), rtol=1e-12)


def test_explain_lists_the_custom_backward_at_the_call():
    program = PROGRAMS[np.float64]["softmax"]
    program(*_inputs([(3, 5), (5, 5), (3, 5)], np.float64))
    explanation = program.explain(device="numpy")
    views = [v for v in explanation.tasklets if v.custom_vjp == "softmax#0"]
    tagged = [t for t in program.graph.tasklets() if t.meta.get("custom_vjp_call") == "softmax#0"]
    assert [v.name for v in views] == [t.name for t in tagged]
    custom = {t.name for t in program.backward_graph().tasklets() if t.backward
              and t.meta.get("custom_vjp_call") == "softmax#0"}
    assert {b.name for b in views[0].backward} == custom            # all listed at the first tasklet
    assert all(not v.backward for v in views[1:])
    text = str(explanation)
    assert text.count("by the custom backward of softmax#0") == len(views) - 1
    assert "not on a path" not in text


def test_two_calls_adding_into_one_weights_gradient():
    """Both calls' rules add into the shared weight's gradient at the same elements: the
    reverse pass gathers them (symdiff.transpose), which had no forward-values note to
    give a gather of custom rules' tasklets and raised StopIteration."""
    @sd.custom_vjp
    def project(x, w):
        return x @ w

    project.defvjp(lambda x, w: (x @ w, (x, w)), lambda res, g: (2 * g @ res[1].T, 2 * res[0].T @ g))

    def f(a: sd.f64[4, 5], b: sd.f64[4, 5], w: sd.f64[5, 6]):
        return np.sum(project(a, w)) + np.sum(project(b, w))
    a, b = np.random.default_rng(0).standard_normal((2, 4, 5))
    grads = sd.differentiable_program(f).grad(a, b, np.ones((5, 6)), device="numpy")
    np.testing.assert_allclose(grads["w"], np.repeat(2 * (a + b).sum(axis=0)[:, None], 6, axis=1))  # twice the truth
