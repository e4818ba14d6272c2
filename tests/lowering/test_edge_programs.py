"""Edge programs on every device (the numpy interpreter and each Slang
backend), values against numpy and gradients against JAX in float64:
0-size slices, reductions and products (numpy's semantics: nothing happens,
sum 0, prod 1, mean nan, matmul zeros), the float remainder, and second
derivatives of np.prod."""
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sympy

from symdiff import ir
from symdiff import lowering
import symdiff as sd

jax.config.update("jax_enable_x64", True)

DEVICES = [pytest.param(d, marks=[pytest.mark.vulkan] if d == "vulkan" else [], id=d)
           for d in ("numpy", "cpu", "vulkan")]


@pytest.fixture(params=DEVICES)
def any_device(request) -> str:
    if request.param != "numpy" and request.param not in lowering.available_devices():
        pytest.skip(f"no {request.param} device here")
    return request.param


def empty_sum(x, xp=np):
    return xp.sum(x[:0]) + xp.sum(x * x)


def empty_mean(x, xp=np):
    return xp.mean(x[1:1]) + xp.sum(x)


def empty_prod(a, xp=np):
    return xp.sum(xp.prod(a[:0, :], axis=0) * a[0])


def empty_matmul(a, b, xp=np):
    return xp.sum(a[:, :0] @ b[:0, :] + a @ b)


def empty_update(c, v, xp=np):
    n = 0
    if xp is np:
        c[:n, 1] += v[:n] * 2.0
    else:
        c = c.at[:n, 1].add(v[:n] * 2.0)
    return xp.sum(c * c) + xp.sum(v)


def empty_store(x, xp=np):
    y = x * 1.0
    if xp is np:
        y[2:2] = 5.0
    else:
        y = y.at[2:2].set(5.0)
    return xp.sum(y * x)


def empty_var(x, xp=np):
    return xp.var(x[:0]) + xp.std(x)


def zero_size_arguments(a, b, w, xp=np):
    return xp.sum((a @ b) * w)


def empty_views(x, xp=np):
    """Empty pieces through concatenate, outer, reversed and strided slices."""
    return (xp.sum(xp.concatenate([x[:0], x]) ** 2) + xp.sum(xp.outer(x[:0], x)) + xp.sum(x[4:2])
            + xp.sum(x[::-1][6:]))


def remainder(x, y, xp=np):
    return xp.sum(xp.remainder(x, y) * x + (x % 1.5) * y)


CASES = {  # name: (function, argument shapes)
    "empty_sum": (empty_sum, [(5,)]),
    "empty_mean": (empty_mean, [(5,)]),
    "empty_prod": (empty_prod, [(3, 4)]),
    "empty_matmul": (empty_matmul, [(3, 4), (4, 2)]),
    "empty_update": (empty_update, [(4, 4), (4,)]),
    "empty_store": (empty_store, [(6,)]),
    "empty_var": (empty_var, [(5,)]),
    "zero_size_arguments": (zero_size_arguments, [(3, 0), (0, 2), (3, 2)]),
    "empty_views": (empty_views, [(6,)]),
    "remainder": (remainder, [(8,), (8,)]),
}


def _inputs(name: str, shapes) -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    arrays = [rng.uniform(-3, 3, s) for s in shapes]
    if name == "remainder":  # divisors of both signs, away from 0; quotients away from integers
        arrays[1] = np.array([2.0, -2.0, 0.7, -0.7, 1.3, -1.3, 2.9, -2.9])
        arrays[0] = np.array([5.5, 5.5, -3.1, -3.1, 0.4, -0.4, 7.7, -7.7])
    return arrays


def _program(fn, n: int) -> sd.DifferentiableProgram:
    """``fn`` as a program of ``n`` array arguments ``a0, a1, ...`` (its ``xp``
    parameter keeps numpy)."""
    args = ", ".join(f"a{k}" for k in range(n))
    namespace = {"fn": fn}
    exec(f"def {fn.__name__}({args}):\n    return fn({args})\n", namespace)
    return sd.differentiable_program(namespace[fn.__name__])


@pytest.mark.parametrize("name", sorted(CASES))
def test_value_and_grad_match_numpy_and_jax(name, any_device):
    fn, shapes = CASES[name]
    inputs = _inputs(name, shapes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy's and ours: mean/var of an empty slice
        want = fn(*[a.copy() for a in inputs])
        program = _program(fn, len(inputs))
        value, grads = program.value_and_grad(*[a.astype(np.float32) for a in inputs], device=any_device)
    jax_grads = jax.jit(jax.grad(lambda *a: fn(*a, xp=jnp), argnums=tuple(range(len(inputs)))))(*inputs)
    np.testing.assert_allclose(value, want, rtol=1e-5, atol=1e-5)
    for k, g in enumerate(jax_grads):
        assert grads[f"a{k}"].shape == inputs[k].shape
        np.testing.assert_allclose(grads[f"a{k}"], np.asarray(g), rtol=1e-5, atol=1e-5, err_msg=f"a{k}")


def test_zero_size_results(any_device):
    """0-size arrays returned next to ordinary ones: numpy's shapes and values."""
    def f(a: sd.f32[3, 4]):
        return np.exp(a[:0]), np.max(a[:0, :], axis=1), np.sum(a[:0], axis=0), a[:, 2:2] @ a[2:2, :]
    a = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    got = sd.differentiable_program(f)(a, device=any_device)
    want = (np.exp(a[:0]), np.max(a[:0, :], axis=1), np.sum(a[:0], axis=0), a[:, 2:2] @ a[2:2, :])
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w)


def test_second_order_prod_matches_jax(any_device):
    """Hessian-vector product of np.prod (the numpy device crashed in the
    lambdified second derivative)."""
    @sd.differentiable_program
    def p(x: sd.f32[5]):
        return np.prod(x * x)
    x = np.array([1.0, -2.0, 0.5, 1.5, -0.75])
    v = np.array([0.3, -1.0, 2.0, 0.5, 1.0])
    _, got = p.grad_program().vjp(x.astype(np.float32), cotangent=v.astype(np.float32), device=any_device)
    want = jax.jvp(jax.jit(jax.grad(lambda y: jnp.prod(y * y))), (x,), (v,))[1]  # the Hessian is symmetric
    np.testing.assert_allclose(got["x"], want, rtol=1e-5)


@pytest.mark.parametrize("accumulate", ["sum", "prod", "max", None])
def test_hand_built_empty_domain(accumulate, any_device):
    """A graph built by hand may hold an empty domain (the tracer emits none):
    no point runs, so the target keeps its fill (0, or the accumulation's
    identity), on every device as in ``ir.run``.  The Slang code generator
    divided by the 0 extent."""
    import sympy
    from symdiff.ir import DataflowGraph, index_symbol
    i, j, k = index_symbol("i"), index_symbol("j"), index_symbol("k")
    x = sympy.Symbol("x", real=True)
    g = DataflowGraph("empty")
    g.add_container("a", (3, 4), "float32", "argument")
    g.add_container("out", (3, 2), "float32", "result")
    g.add_tasklet("t", [(i, 0, 3), (j, 0, 2), (k, 0, 0)], {"o": x * x}, {"x": (g.access("a"), (i, k))},
                  {"o": (g.new_version("out"), (i, j), accumulate)})
    g.validate()
    a = np.ones((3, 4), np.float32)
    want = np.full((3, 2), ir.graph.ACCUMULATION_IDENTITY[accumulate], np.float32)
    np.testing.assert_array_equal(ir.run(g, {"a": a})["out"], want)
    if any_device != "numpy":
        np.testing.assert_array_equal(lowering.compile(g, device=any_device)({"a": a})["out"], want)


def test_abs_of_a_power_sympy_cannot_prove_real(any_device):
    """|b ** tanh(log2(c * d + 1))| in one sd.map body: sympy cannot prove
    log2's argument positive, so it writes the |.| with re() and im() (fuzzer
    seed 710066), which the Slang printer did not know; every value is real."""
    def term(xp, a, b, c, d):
        return xp.log1p(xp.abs((xp.abs(a * b) + 0.5) ** xp.tanh(xp.log2(c * d + 1.0))))

    def f(a: sd.f32[6], b: sd.f32[6], c: sd.f32[6], d: sd.f32[6]):
        out = np.zeros(1, dtype=np.float32)
        for i in sd.map[0:6]:
            out[0] += term(np, a[i], b[i], c[i], d[i])
        return out[0]
    rng = np.random.default_rng(5)
    inputs = [rng.uniform(0.2, 1.5, 6) for _ in range(4)]
    graph = ir.trace(f)
    assert any(e.has(sympy.re) for t in graph.tasklets() for e in t.body.values())  # the form that broke
    value, grads = sd.differentiable_program(f).value_and_grad(*[a.astype(np.float32) for a in inputs],
                                                               device=any_device)
    want = jax.jit(jax.value_and_grad(lambda *a: jnp.sum(term(jnp, *a)), argnums=(0, 1, 2, 3)))(*inputs)
    np.testing.assert_allclose(value, float(want[0]), rtol=1e-5)
    for name, g in zip("abcd", want[1]):
        np.testing.assert_allclose(grads[name], np.asarray(g), rtol=1e-4, atol=1e-6, err_msg=name)
