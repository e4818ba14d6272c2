"""add_backward_pass per memlet shape and op, against JAX in float64."""
import jax.numpy as jnp
import numpy as np
import pytest
import sympy

from symdiff import ir
from symdiff.ir.graph import size_symbol
from symdiff.backward import add_backward_pass
from symdiff_graphs import (Builder, a, assert_grads_close, b, i, j, jax_vjp, k, rng_inputs, vjp)

UNARY = [  # name, body, jax, sampling range
    ("exp", sympy.exp(a), jnp.exp, (-2, 2)),
    ("log", sympy.log(a), jnp.log, (0.2, 3)),
    ("sin", sympy.sin(a), jnp.sin, (-3, 3)),
    ("cos", sympy.cos(a), jnp.cos, (-3, 3)),
    ("tanh", sympy.tanh(a), jnp.tanh, (-2, 2)),
    ("sqrt", sympy.sqrt(a), jnp.sqrt, (0.2, 3)),
    ("abs", sympy.Abs(a), jnp.abs, (-2, 2)),
    ("cube", a ** 3, lambda x: x ** 3, (-2, 2)),
    ("reciprocal", 1 / a, lambda x: 1 / x, (0.5, 2)),
    ("pow_real", a ** 2.5, lambda x: x ** 2.5, (0.2, 2)),
    ("relu", sympy.Max(a, 0), lambda x: jnp.maximum(x, 0), (-2, 2)),
    ("clip_min", sympy.Min(a, 0.5), lambda x: jnp.minimum(x, 0.5), (-2, 2)),
    ("sigmoid", 1 / (1 + sympy.exp(-a)), lambda x: 1 / (1 + jnp.exp(-x)), (-3, 3)),
    ("atan", sympy.atan(a), jnp.arctan, (-3, 3)),
    ("where", sympy.Piecewise((a * a, a > 0), (-a, True)), lambda x: jnp.where(x > 0, x * x, -x), (-2, 2)),
]

BINARY = [
    ("add", a + b, lambda x, y: x + y, (-2, 2)),
    ("sub", a - b, lambda x, y: x - y, (-2, 2)),
    ("mul", a * b, lambda x, y: x * y, (-2, 2)),
    ("div", a / b, lambda x, y: x / y, (0.5, 2)),
    ("pow", a ** b, lambda x, y: x ** y, (0.5, 2)),
    ("maximum", sympy.Max(a, b), jnp.maximum, (-2, 2)),
    ("minimum", sympy.Min(a, b), jnp.minimum, (-2, 2)),
    ("hypot", sympy.sqrt(a * a + b * b), lambda x, y: jnp.sqrt(x * x + y * y), (0.5, 2)),
]


def unary_graph(expr, n: int = 7):
    bld = Builder()
    bld.container("x", (n,), "argument")
    bld.container("y", (n,), "result")
    bld.tasklet("f", [(i, 0, n)], expr, {"a": ("x", (i,))}, ("y", (i,)))
    return bld.g


def binary_graph(expr, n: int = 7):
    bld = Builder()
    bld.container("x", (n,), "argument")
    bld.container("w", (n,), "argument")
    bld.container("y", (n,), "result")
    bld.tasklet("f", [(i, 0, n)], expr, {"a": ("x", (i,)), "b": ("w", (i,))}, ("y", (i,)))
    return bld.g


@pytest.mark.parametrize("name,expr,fn,box", UNARY, ids=[u[0] for u in UNARY])
def test_unary_vjp_matches_jax(name, expr, fn, box):
    values = rng_inputs({"x": (7,)}, low=box[0], high=box[1])
    ct = {"y": np.random.default_rng(1).normal(size=7)}
    got = vjp(unary_graph(expr), values, ["x"], ["y"], ct)
    assert_grads_close(got, jax_vjp(lambda x: fn(x), values, ["x"], ct["y"]))


@pytest.mark.parametrize("name,expr,fn,box", BINARY, ids=[u[0] for u in BINARY])
def test_binary_vjp_matches_jax(name, expr, fn, box):
    values = rng_inputs({"x": (7,), "w": (7,)}, low=box[0], high=box[1])
    ct = {"y": np.random.default_rng(1).normal(size=7)}
    got = vjp(binary_graph(expr), values, ["x", "w"], ["y"], ct)
    assert_grads_close(got, jax_vjp(lambda x, w: fn(x, w), values, ["x", "w"], ct["y"]))


def test_non_smooth_points_follow_jax():
    x = np.array([0.0, 1.0, -1.0, 2.0])
    w = np.array([0.0, 1.0, 3.0, 2.0])  # ties at 0, 1 and 2
    for expr, fn in [(sympy.Max(a, b), jnp.maximum), (sympy.Min(a, b), jnp.minimum)]:
        got = vjp(binary_graph(expr, 4), {"x": x, "w": w}, ["x", "w"], ["y"])
        assert_grads_close(got, jax_vjp(fn, {"x": x, "w": w}, ["x", "w"]))
        np.testing.assert_array_equal(got["x"][[0, 1, 3]], 0.5)
    relu = vjp(unary_graph(sympy.Max(a, 0), 4), {"x": x}, ["x"], ["y"])
    assert_grads_close(relu, jax_vjp(lambda v: jnp.maximum(v, 0), {"x": x}, ["x"]))
    # abs'(0) = sign(0) = 0 as DESIGN.md specifies (JAX 0.10 itself returns 1 there)
    absolute = vjp(unary_graph(sympy.Abs(a), 4), {"x": x}, ["x"], ["y"])
    np.testing.assert_array_equal(absolute["x"], [0.0, 1.0, -1.0, 1.0])


def test_where_does_not_leak_nan_from_unselected_branch():
    x = np.array([-2.0, -0.5, 0.0, 0.25, 4.0])
    expected = np.where(x > 0, 0.5 / np.sqrt(np.abs(x) + (x == 0)), 0.0)
    # one tasklet: sympy's Piecewise derivative
    got = vjp(unary_graph(sympy.Piecewise((sympy.sqrt(a), a > 0), (0, True)), 5), {"x": x}, ["x"], ["y"])
    np.testing.assert_allclose(got["x"], expected)
    # split like a trace: s = sqrt(x) (nan below 0), y = where(x > 0, s, 0)
    bld = Builder()
    bld.container("x", (5,), "argument")
    bld.container("s", (5,))
    bld.container("y", (5,), "result")
    bld.tasklet("root", [(i, 0, 5)], sympy.sqrt(a), {"a": ("x", (i,))}, ("s", (i,)))
    bld.tasklet("select", [(i, 0, 5)], sympy.Piecewise((b, a > 0), (0, True)),
                {"a": ("x", (i,)), "b": ("s", (i,))}, ("y", (i,)))
    got = vjp(bld.g, {"x": x}, ["x"], ["y"])
    assert np.all(np.isfinite(got["x"]))
    np.testing.assert_allclose(got["x"], expected)


def test_where_on_bool_mask_sends_gradient_to_selected_branch():
    bld = Builder()
    bld.container("m", (4,), "argument", dtype="bool")
    bld.container("x", (4,), "argument")
    bld.container("w", (4,), "argument")
    bld.container("y", (4,), "result")
    mask = sympy.Symbol("m")
    bld.tasklet("sel", [(i, 0, 4)], sympy.Piecewise((a, mask), (b, True)),
                {"m": ("m", (i,)), "a": ("x", (i,)), "b": ("w", (i,))}, ("y", (i,)))
    m = np.array([True, False, True, False])
    got = vjp(bld.g, {"m": m, "x": np.ones(4), "w": np.ones(4)}, ["x", "w"], ["y"])
    np.testing.assert_array_equal(got["x"], m)
    np.testing.assert_array_equal(got["w"], ~m)


def reduction_graph(acc: str, axis: int, shape=(3, 4)):
    bld = Builder()
    bld.container("x", shape, "argument")
    bld.container("y", (shape[1 - axis],), "result")
    keep = j if axis == 0 else i
    bld.tasklet("reduce", [(i, 0, shape[0]), (j, 0, shape[1])], a, {"a": ("x", (i, j))}, ("y", (keep,)), acc)
    return bld.g


@pytest.mark.parametrize("acc,fn", [("sum", jnp.sum), ("max", jnp.max), ("min", jnp.min), ("prod", jnp.prod)])
@pytest.mark.parametrize("axis", [0, 1])
def test_reductions_match_jax(acc, fn, axis):
    values = rng_inputs({"x": (3, 4)}, low=0.5, high=2)
    ct = np.random.default_rng(2).normal(size=(4,) if axis == 0 else (3,))
    got = vjp(reduction_graph(acc, axis), values, ["x"], ["y"], {"y": ct})
    assert_grads_close(got, jax_vjp(lambda x: fn(x, axis=axis), values, ["x"], ct))


@pytest.mark.parametrize("acc,fn", [("max", jnp.max), ("min", jnp.min)])
def test_max_min_reductions_split_ties_evenly(acc, fn):
    x = np.array([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0], [-1.0, 5.0, -1.0, -1.0]])
    got = vjp(reduction_graph(acc, 1), {"x": x}, ["x"], ["y"])
    assert_grads_close(got, jax_vjp(lambda v: fn(v, axis=1), {"x": x}, ["x"]))
    assert got["x"].sum() == pytest.approx(3.0)


def test_prod_reduction_is_exact_with_zeros():
    x = np.array([[1.0, 2.0, 3.0, 4.0], [0.0, 2.0, 3.0, 4.0], [0.0, 2.0, 0.0, 4.0]])
    got = vjp(reduction_graph("prod", 1), {"x": x}, ["x"], ["y"])
    want = np.array([[24.0, 12.0, 8.0, 6.0], [24.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    np.testing.assert_array_equal(got["x"], want)
    assert_grads_close(got, jax_vjp(lambda v: jnp.prod(v, axis=1), {"x": x}, ["x"]))


def test_matmul_matches_jax():
    bld = Builder()
    bld.container("p", (3, 4), "argument")
    bld.container("q", (4, 2), "argument")
    bld.container("r", (3, 2), "result")
    bld.tasklet("mm", [(i, 0, 3), (j, 0, 2), (k, 0, 4)], a * b, {"a": ("p", (i, k)), "b": ("q", (k, j))},
                ("r", (i, j)), "sum")
    values = rng_inputs({"p": (3, 4), "q": (4, 2)})
    ct = np.random.default_rng(3).normal(size=(3, 2))
    got = vjp(bld.g, values, ["p", "q"], ["r"], {"r": ct})
    assert_grads_close(got, jax_vjp(lambda p, q: p @ q, values, ["p", "q"], ct))


def test_broadcasting_both_ways_matches_jax():
    # z[i, j] = m[i, j] * v[j] + u[i]: v and u broadcast (sums in reverse),
    # then s[j] = sum_i z[i, j] (a broadcast of the seed in reverse)
    bld = Builder()
    bld.container("m", (3, 4), "argument")
    bld.container("v", (4,), "argument")
    bld.container("u", (3,), "argument")
    bld.container("z", (3, 4))
    bld.container("s", (4,), "result")
    c = sympy.Symbol("c", real=True)
    bld.tasklet("bc", [(i, 0, 3), (j, 0, 4)], a * b + c,
                {"a": ("m", (i, j)), "b": ("v", (j,)), "c": ("u", (i,))}, ("z", (i, j)))
    bld.tasklet("colsum", [(i, 0, 3), (j, 0, 4)], a ** 2, {"a": ("z", (i, j))}, ("s", (j,)), "sum")
    values = rng_inputs({"m": (3, 4), "v": (4,), "u": (3,)})
    ct = np.random.default_rng(4).normal(size=4)
    got = vjp(bld.g, values, ["m", "v", "u"], ["s"], {"s": ct})
    want = jax_vjp(lambda m, v, u: jnp.sum((m * v + u[:, None]) ** 2, axis=0), values, ["m", "v", "u"], ct)
    assert_grads_close(got, want)


def test_gather_becomes_scatter_add():
    bld = Builder()
    bld.container("x", (5,), "argument")
    bld.container("idx", (6,), "argument", dtype="int32")
    bld.container("y", (6,), "result")
    n = sympy.Symbol("n", integer=True)
    bld.tasklet("gather", [(i, 0, 6)], sympy.sin(a), {"n": ("idx", (i,)), "a": ("x", (n,))}, ("y", (i,)))
    idx = np.array([0, 3, 3, 1, 3, 0], dtype=np.int32)
    values = {"x": rng_inputs({"x": (5,)})["x"], "idx": idx}
    ct = np.random.default_rng(5).normal(size=6)
    got = vjp(bld.g, values, ["x"], ["y"], {"y": ct})
    assert_grads_close(got, jax_vjp(lambda x, idx: jnp.sin(x[idx]), values, ["x"], ct))
    backward = [t for t in bld.g.tasklets() if t.backward] or None
    assert backward is None  # vjp differentiated a copy


def test_guarded_partial_updates_jacobi_matches_jax():
    """Two in-place Jacobi steps: each step's version is a guarded copy of the
    boundary plus a stencil tasklet for the interior (two plain writers)."""
    n, steps = 8, 2
    bld = Builder()
    bld.container("u", (n,), "argument")
    bld.container("s", (), "result")
    for step in range(steps):
        prev = bld.g.latest("u")
        new = bld.g.new_version("u")
        bld.g.add_tasklet(f"keep{step}", [(i, 0, n)], {"o": a}, {"a": (prev, (i,))}, {"o": (new, (i,))},
                          condition=sympy.Or(sympy.Lt(i, 1), sympy.Ge(i, n - 1)))
        c = sympy.Symbol("c", real=True)
        bld.g.add_tasklet(f"stencil{step}", [(i, 1, n - 1)], {"o": (a + 2 * b * b + c) / 4},
                          {"a": (prev, (i - 1,)), "b": (prev, (i,)), "c": (prev, (i + 1,))}, {"o": (new, (i,))})
    bld.tasklet("norm", [(i, 0, n)], a * a, {"a": ("u", (i,))}, ("s", ()), "sum")

    def ref(u):
        for _ in range(steps):
            u = u.at[1:-1].set((u[:-2] + 2 * u[1:-1] ** 2 + u[2:]) / 4)
        return jnp.sum(u * u)

    values = rng_inputs({"u": (n,)})
    assert_grads_close(vjp(bld.g, values, ["u"], ["s"]), jax_vjp(ref, values, ["u"]))


def test_multi_output_tasklet_shares_one_backward_tasklet():
    bld = Builder()
    bld.container("x", (3,), "argument")
    bld.container("w", (3,), "argument")
    bld.container("p", (3,), "result")
    bld.container("q", (3,), "result")
    g = bld.g
    g.add_tasklet("two", [(i, 0, 3)], {"p": a * b, "q": sympy.exp(a + b)},
                  {"a": (g.access("x", 0), (i,)), "b": (g.access("w", 0), (i,))},
                  {"p": (g.new_version("p"), (i,)), "q": (g.new_version("q"), (i,))})
    values = rng_inputs({"x": (3,), "w": (3,)})
    cts = {"p": np.array([1.0, -2.0, 0.5]), "q": np.array([0.3, 0.1, -1.0])}
    got = vjp(g, values, ["x", "w"], ["p", "q"], cts)
    want = jax_vjp(lambda x, w: jnp.concatenate([x * w, jnp.exp(x + w)]), values, ["x", "w"],
                   np.concatenate([cts["p"], cts["q"]]))
    assert_grads_close(got, want)


def test_scatter_add_forward_reads_gradient_through_the_index():
    bld = Builder()
    bld.container("x", (6,), "argument")
    bld.container("idx", (6,), "argument", dtype="int32")
    bld.container("y", (4,), "result")
    n = sympy.Symbol("n", integer=True)
    bld.tasklet("scatter", [(i, 0, 6)], a ** 2, {"n": ("idx", (i,)), "a": ("x", (i,))}, ("y", (n,)), "sum")
    idx = np.array([3, 0, 3, 1, 1, 3], dtype=np.int32)
    values = {"x": rng_inputs({"x": (6,)})["x"], "idx": idx}
    ct = np.random.default_rng(6).normal(size=4)
    got = vjp(bld.g, values, ["x"], ["y"], {"y": ct})
    want = jax_vjp(lambda x, idx: jnp.zeros(4).at[idx].add(x ** 2), values, ["x"], ct)
    assert_grads_close(got, want)


def test_symbolic_sizes_and_float32_max_ties():
    N = size_symbol("N")
    bld = Builder()
    bld.container("x", (N, 3), "argument", dtype="float32")
    bld.container("y", (N,), "result", dtype="float32")
    bld.tasklet("rowmax", [(i, 0, N), (j, 0, 3)], sympy.Max(a, 0), {"a": ("x", (i, j))}, ("y", (i,)), "max")
    g = bld.g.copy()
    grads = add_backward_pass(g, ["x"], ["y"])
    x = np.array([[0.5, 0.5, -1.0], [-1.0, -2.0, -3.0]], dtype=np.float32)
    out = ir.run(g, {"x": x, "seed_y": np.ones(2, np.float32)})
    assert out[grads["x"]].dtype == np.float32
    # row 0: tie between two maxima; row 1: max(., 0) = 0 everywhere, Heaviside(<0) = 0
    np.testing.assert_array_equal(out[grads["x"]], [[0.5, 0.5, 0.0], [0.0, 0.0, 0.0]])


def test_remainder_vjp_matches_jax():
    """Mod(x, y) (np.remainder, %) has d/dx = 1 and d/dy = -floor(x/y), as in JAX;
    sympy leaves its derivative unevaluated."""
    x = np.array([5.5, 5.5, -5.5, -5.5, 0.4, -0.4, 7.7])
    w = np.array([2.0, -2.0, 2.0, -2.0, 1.3, 1.3, -0.7])
    ct = {"y": np.random.default_rng(1).normal(size=7)}
    got = vjp(binary_graph(sympy.Mod(a, b)), {"x": x, "w": w}, ["x", "w"], ["y"], ct)
    assert_grads_close(got, jax_vjp(jnp.remainder, {"x": x, "w": w}, ["x", "w"], ct["y"]))
