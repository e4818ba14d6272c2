"""The public API on the numpy interpreter, against JAX in float64."""
import numpy as np
import pytest

from symdiff import ir
import symdiff as sd
from corpus import CASES, Case, assert_matches_jax, build_program, jax_value_and_grad

DEVICE = "numpy"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_corpus_value_and_grad_matches_jax(case: Case):
    prog = build_program(sd, case)
    inputs = case.inputs()
    value, grads = prog.value_and_grad(*inputs.values(), wrt=case.wrt, device=DEVICE)
    assert_matches_jax(case, value, grads, inputs)


def _poly(x: sd.f32[6], w: sd.f32[6]):
    return np.sum(np.sin(x * w) * x)


poly = sd.differentiable_program(_poly)
poly_case = Case("poly", lambda xp, x, w: xp.sum(xp.sin(x * w) * x), {"x": (6,), "w": (6,)}, ["x", "w"])


def test_forward_call_matches_numpy():
    x, w = poly_case.inputs().values()
    np.testing.assert_allclose(poly(x, w, device=DEVICE), _poly(x, w), rtol=1e-5)


def test_grad_with_wrt_returns_only_requested():
    x, w = poly_case.inputs().values()
    grads = poly.grad(x, w, wrt=["w"], device=DEVICE)
    assert list(grads) == ["w"]
    _, ref = jax_value_and_grad(poly_case, {"x": x, "w": w})
    np.testing.assert_allclose(grads["w"], ref["w"], rtol=1e-4, atol=1e-5)


def test_vjp_of_non_scalar_output_matches_jax():
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    @sd.differentiable_program
    def f(a: sd.f32[4, 3], b: sd.f32[3]):
        return np.tanh(a * b) + a

    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    ct = rng.standard_normal((4, 3)).astype(np.float32)
    value, grads = f.vjp(a, b, cotangent=ct, device=DEVICE)
    ref_v, pullback = jax.vjp(jax.jit(lambda a, b: jnp.tanh(a * b) + a), a.astype(np.float64), b.astype(np.float64))
    ga, gb = pullback(ct.astype(np.float64))
    np.testing.assert_allclose(value, ref_v, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grads["a"], ga, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(grads["b"], gb, rtol=1e-4, atol=1e-5)


def test_value_and_grad_refuses_non_scalar_output():
    @sd.differentiable_program
    def f(a: sd.f32[4]):
        return a * 2.0

    with pytest.raises(sd.ProgramError, match="vjp"):
        f.value_and_grad(np.ones(4, np.float32), device=DEVICE)


def test_unknown_wrt_is_named():
    x, w = poly_case.inputs().values()
    with pytest.raises(sd.ProgramError, match="'nope'"):
        poly.grad(x, w, wrt=["nope"], device=DEVICE)


def test_hessian_vector_product_matches_jax():
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    x, w = poly_case.inputs().values()
    v = np.linspace(-1, 1, 6).astype(np.float32)
    gp = poly.grad_program(wrt=["x"])
    _, hv = gp.vjp(x, w, cotangent=v, wrt=["x"], device=DEVICE)
    f = lambda x: jnp.sum(jnp.sin(x * w.astype(np.float64)) * x)  # noqa: E731
    ref = jax.jvp(jax.jit(jax.grad(f)), (x.astype(np.float64),), (v.astype(np.float64),))[1]
    np.testing.assert_allclose(hv["x"], ref, rtol=1e-4, atol=1e-4)


def test_gradient_of_squared_gradient_norm_matches_jax():
    """L1 = sum(dL0/da**2 + dL0/db**2); compare dL1/da, dL1/db with JAX."""
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    @sd.differentiable_program
    def l0(a: sd.f32[5], b: sd.f32[5]):
        return np.sum(np.exp(a * b) + a * a * b)

    rng = np.random.default_rng(3)
    a, b = (rng.standard_normal(5).astype(np.float32) * 0.5 for _ in range(2))
    gp = l0.grad_program(wrt=["a", "b"])
    ga, gb = gp(a, b, device=DEVICE)
    _, g1 = gp.vjp(a, b, cotangent=(2 * ga, 2 * gb), device=DEVICE)

    def L0(a, b):
        return jnp.sum(jnp.exp(a * b) + a * a * b)

    def L1(a, b):
        da, db = jax.jit(jax.grad(L0, argnums=(0, 1)))(a, b)
        return jnp.sum(da ** 2 + db ** 2)

    ra, rb = jax.jit(jax.grad(L1, argnums=(0, 1)))(a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(g1["a"], ra, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(g1["b"], rb, rtol=1e-3, atol=1e-4)


def test_bad_return_value_names_the_users_return_line():
    """Checked after the user's function returned: the error used to name
    symdiff's own program.py."""
    @sd.differentiable_program
    def returns_dict(x: sd.f32[3]):
        return {"y": x}
    with pytest.raises(ir.TraceError, match="a dict cannot be returned") as info:
        returns_dict(np.ones(3, np.float32), device=DEVICE)
    assert f"test_program.py:{returns_dict.function.__code__.co_firstlineno + 2}:" in str(info.value)


def test_var_and_std_match_jax():
    @sd.differentiable_program
    def spread(x: sd.f64[4, 3]):
        return np.sum(x.std(axis=0) * np.arange(3.0)) + np.var(x, ddof=1) + np.std(x, axis=1, keepdims=True)[2, 0]

    def reference(xp, x):
        return (xp.sum(x.std(axis=0) * xp.arange(3.0)) + xp.var(x, ddof=1)
                + xp.std(x, axis=1, keepdims=True)[2, 0])
    case = Case("spread", reference, {"x": (4, 3)}, ["x"])
    inputs = case.inputs()
    value, grads = spread.value_and_grad(*inputs.values(), device=DEVICE)
    assert_matches_jax(case, value, grads, inputs)


SCALE = 2.0


def test_globals_are_captured_at_the_first_trace_per_specs():
    """As under jax.jit (documented in differentiable_program and the guide):
    a global read by the body is a constant of the traced graph."""
    global SCALE

    @sd.differentiable_program
    def scaled(x):
        return np.sum(x * SCALE)
    try:
        assert scaled(np.ones(3, np.float32), device=DEVICE) == 6.0
        SCALE = 5.0
        assert scaled(np.ones(3, np.float32), device=DEVICE) == 6.0    # same specs: the traced 2.0
        assert scaled(np.ones(4, np.float32), device=DEVICE) == 20.0   # new specs trace again
    finally:
        SCALE = 2.0


@pytest.mark.parametrize("device", ["numpy", "cpu", "vulkan"])
def test_trailing_defaults_keep_their_values_as_in_trace(device):
    """``xp=np`` and a float default are not arguments (ir.trace keeps them);
    the program listed them and refused the call as missing arguments."""
    import jax
    jax.config.update("jax_enable_x64", True)

    def body(x, xp=np, scale=3.0):
        return xp.sum(scale * x * x)
    x = np.array([1.0, -2.0, 0.5], np.float32)
    value, grads = sd.differentiable_program(body).value_and_grad(x, device=device)
    np.testing.assert_allclose(value, body(x.astype(np.float64)), rtol=1e-6)
    want = jax.jit(jax.grad(lambda v: body(v, jax.numpy)))(x.astype(np.float64))
    np.testing.assert_allclose(grads["x"], np.asarray(want), rtol=1e-6)


def _take(e: sd.f32[10], idx: sd.i32[3]):
    return np.sum(e[idx] ** 2)


@pytest.mark.parametrize("device", ["numpy", "cpu"])
@pytest.mark.parametrize("idx, text", [
    (np.array([1.7, 2.2, 3.9]), "holds float64 values; converting would truncate"),
    ([1.0, 2.0, 3.0], "holds float64 values"),
    (np.array([1, 2**32 + 2, 3], np.int64), "holds 4294967298, outside int32's range"),
    (np.array([1, -2**31 - 1, 3], np.int64), "holds -2147483649, outside int32's range"),
])
def test_index_arguments_are_never_converted_silently(device, idx, text):
    """A float array was truncated and an int64 past 2**31 wrapped (into range)."""
    e = np.arange(10, dtype=np.float32)
    f = sd.differentiable_program(_take, device=device)
    with pytest.raises(sd.ArgumentError, match=rf"argument 'idx' .*{text}"):
        f(e, idx)
    with pytest.raises(sd.ArgumentError, match="argument 'idx'"):
        f.value_and_grad(e, idx)
    np.testing.assert_allclose(f(e, [1, 2, 3]), 14.0)  # Python ints and int64 in range are fine
    np.testing.assert_allclose(f(e, np.array([1, 2, 3], np.uint8)), 14.0)


def _take_any(e, idx):
    return np.sum(e[idx] ** 2)


def test_later_calls_still_check_arguments_and_follow_settings(monkeypatch):
    """A call finds its graphs and executable once per argument kinds, shapes
    and options (``_Prepared``); later calls must still check index values,
    take new shapes of unannotated arguments and follow ``$SYMDIFF_DEVICE``.
    Gradients: d/de sum(e[idx]**2) is 2 e at idx."""
    f = sd.differentiable_program(_take_any)
    idx = np.array([1, 2, 3], np.int64)
    monkeypatch.setenv("SYMDIFF_DEVICE", "numpy")
    for n in (10, 10, 12):
        e = np.arange(n, dtype=np.float32) + 1
        value, grads = f.value_and_grad(e, idx)
        expected = np.zeros(n, np.float32)
        expected[idx] = 2 * e[idx]
        assert value == pytest.approx(np.sum(e[idx] ** 2)) and grads["e"].shape == (n,)
        np.testing.assert_array_equal(grads["e"], expected)
    with pytest.raises(sd.ArgumentError, match="outside int32's range"):  # same kinds and shapes as before
        f.value_and_grad(e, np.array([1, 2**32 + 2, 3], np.int64))
    monkeypatch.setenv("SYMDIFF_DEVICE", "cpu")
    assert f(e, idx) == pytest.approx(np.sum(e[idx] ** 2))
    assert {s["device"] for s in f.stats().values()} == {"numpy", "cpu"}


def test_spec_annotations_are_read_under_postponed_evaluation(tmp_path):
    """``from __future__ import annotations`` makes every annotation a string:
    the specs must still fix the argument's shape before any call."""
    import importlib.util
    source = tmp_path / "postponed.py"
    source.write_text("from __future__ import annotations\nimport numpy as np\nimport symdiff as sd\n\n"
                      "@sd.differentiable_program\ndef f(x: sd.f32[4]):\n    return np.sum(x * x)\n")
    spec = importlib.util.spec_from_file_location("postponed", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert tuple(module.f.graph.containers["x"].shape) == (4,)  # no call needed: the annotation says it
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(module.f.grad(x, device="numpy")["x"], 2 * x)
