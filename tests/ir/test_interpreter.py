"""The numpy interpreter on hand-built graphs, checked against independently
written numpy: it is the reference semantics every later stage is tested
against, so each IR shape (map, broadcast, reduction, matmul, guarded update,
gather/scatter, 0-d, symbolic sizes) gets its own oracle here."""
import numpy as np
import pytest
import sympy

from symdiff import ir
from symdiff.ir import DataflowGraph, GraphError, connector_symbol, index_symbol, size_symbol

N, M = size_symbol("N"), size_symbol("M")
i, j, k = index_symbol("i"), index_symbol("j"), index_symbol("k")
x, y = sympy.Symbol("x", real=True), sympy.Symbol("y", real=True)
n = connector_symbol("n", "int32")
rng = np.random.default_rng(0)

REDUCE = {"sum": np.sum, "max": np.max, "min": np.min, "prod": np.prod}
UFUNC = {"sum": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply}


def rand(*shape, dtype=np.float32):
    return rng.uniform(0.5, 1.5, shape).astype(dtype)


def map_graph(in_shape, out_shape, domain, body, read_index, write_index, accumulate=None,
              condition=sympy.true) -> DataflowGraph:
    """``out[write_index] (accumulate)= body(a[read_index])`` over ``domain``."""
    g = DataflowGraph("map")
    g.add_container("a", in_shape, "float32", "argument")
    g.add_container("out", out_shape, "float32", "result")
    g.add_tasklet("t", domain, {"o": body}, {"x": (g.access("a"), read_index)},
                  {"o": (g.new_version("out"), write_index, accumulate)}, condition=condition)
    return g.validate()


def test_elementwise_two_inputs():
    g = DataflowGraph()
    g.add_container("a", (3, 4), "float32", "argument")
    g.add_container("b", (3, 4), "float32", "argument")
    g.add_container("c", (3, 4), "float32", "result")
    g.add_tasklet("t", [(i, 0, 3), (j, 0, 4)], {"o": sympy.sin(x) * 2 + y / x},
                  {"x": (g.access("a"), (i, j)), "y": (g.access("b"), (i, j))},
                  {"o": (g.new_version("c"), (i, j))})
    a, b = rand(3, 4), rand(3, 4)
    out = ir.run(g.validate(), {"a": a, "b": b})["c"]
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, np.sin(a) * 2 + b / a, rtol=1e-6)


def test_index_symbols_as_values_and_several_outputs():
    g = DataflowGraph()
    g.add_container("a", (5,), "float32", "argument")
    g.add_container("p", (5,), "float32", "result")
    g.add_container("q", (5,), "float32", "result")
    g.add_tasklet("t", [(i, 0, 5)], {"p": x * i, "q": x + i},
                  {"x": (g.access("a"), (i,))}, {"p": (g.new_version("p"), (i,)), "q": (g.new_version("q"), (i,))})
    a = rand(5)
    out = ir.run(g.validate(), {"a": a})
    np.testing.assert_allclose(out["p"], a * np.arange(5), rtol=1e-6)
    np.testing.assert_allclose(out["q"], a + np.arange(5), rtol=1e-6)


def test_broadcast_reads():
    g = DataflowGraph()
    g.add_container("a", (3, 1), "float32", "argument")
    g.add_container("b", (4,), "float32", "argument")
    g.add_container("c", (2, 3, 4), "float32", "result")
    g.add_tasklet("t", [(k, 0, 2), (i, 0, 3), (j, 0, 4)], {"o": x - y},
                  {"x": (g.access("a"), (i, 0)), "y": (g.access("b"), (j,))},
                  {"o": (g.new_version("c"), (k, i, j))})
    a, b = rand(3, 1), rand(4)
    out = ir.run(g.validate(), {"a": a, "b": b})["c"]
    np.testing.assert_allclose(out, np.broadcast_to(a - b, (2, 3, 4)), rtol=1e-6)


@pytest.mark.parametrize("op", list(REDUCE))
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_reduction_over_each_axis(op, axis):
    shape = (3, 4, 5)
    syms = (i, j, k)
    keep = tuple(s for d, s in enumerate(syms) if d != axis)
    g = map_graph(shape, tuple(e for d, e in enumerate(shape) if d != axis),
                  [(s, 0, e) for s, e in zip(syms, shape)], x, syms, keep, op)
    a = rand(*shape)
    np.testing.assert_allclose(ir.run(g, {"a": a})["out"], REDUCE[op](a, axis=axis), rtol=1e-5)


@pytest.mark.parametrize("op", list(REDUCE))
def test_full_reduction_into_0d(op):
    g = map_graph((4, 6), (), [(i, 0, 4), (j, 0, 6)], x, (i, j), (), op)
    a = rand(4, 6)
    out = ir.run(g, {"a": a})["out"]
    assert out.shape == ()
    np.testing.assert_allclose(out, REDUCE[op](a), rtol=1e-5)


@pytest.mark.parametrize("op", list(REDUCE))
def test_reduction_with_non_affine_index(op):
    # out[i // 2] op= a[i]: colliding targets, the ufunc.at path
    g = map_graph((8,), (4,), [(i, 0, 8)], x, (i,), (sympy.floor(i / 2),), op)
    a = rand(8)
    np.testing.assert_allclose(ir.run(g, {"a": a})["out"], REDUCE[op](a.reshape(4, 2), axis=1), rtol=1e-6)


@pytest.mark.parametrize("op", list(REDUCE))
def test_guarded_reduction(op):
    # a condition flattens the domain, so this takes the masked path
    g = map_graph((4, 6), (4,), [(i, 0, 4), (j, 0, 6)], x, (i, j), (i,), op, condition=sympy.Ge(j, i))
    a = rand(4, 6)
    expected = [REDUCE[op](a[r, r:]) for r in range(4)]
    np.testing.assert_allclose(ir.run(g, {"a": a})["out"], expected, rtol=1e-6)


@pytest.mark.parametrize("op", list(REDUCE))
def test_guarded_reduction_into_0d(op):
    g = map_graph((6,), (), [(i, 0, 6)], x, (i,), (), op, condition=sympy.Ge(i, 2))
    a = rand(6)
    np.testing.assert_allclose(ir.run(g, {"a": a})["out"], REDUCE[op](a[2:]), rtol=1e-6)


def test_guarded_plain_write_into_0d():
    g = map_graph((6,), (), [(i, 0, 6)], x, (i,), (), None, condition=sympy.Eq(i, 3))
    a = rand(6)
    assert ir.run(g, {"a": a})["out"] == a[3]


def test_plain_write_into_0d_from_one_point_domain():
    g = map_graph((6,), (), [(i, 2, 3)], 2 * x, (i,), ())
    a = rand(6)
    assert ir.run(g, {"a": a})["out"] == 2 * a[2]


def test_reduction_into_transposed_target():
    g = map_graph((3, 4, 5), (5, 3), [(i, 0, 3), (j, 0, 4), (k, 0, 5)], x, (i, j, k), (k, i), "sum")
    a = rand(3, 4, 5)
    np.testing.assert_allclose(ir.run(g, {"a": a})["out"], a.sum(axis=1).T, rtol=1e-5)


def test_reduction_with_offset_target():
    g = map_graph((3, 4), (6,), [(i, 0, 3), (j, 0, 4)], x, (i, j), (i + 2,), "sum")
    a = rand(3, 4)
    expected = np.zeros(6, np.float32)
    expected[2:5] = a.sum(axis=1)
    np.testing.assert_allclose(ir.run(g, {"a": a})["out"], expected, rtol=1e-6)


@pytest.mark.parametrize("shape_a, shape_b", [((5, 3), (3, 4)), ((1, 7), (7, 1)), ((4, 4), (4, 4))])
def test_matmul(shape_a, shape_b):
    (p, q), (_, r) = shape_a, shape_b
    g = DataflowGraph("matmul")
    g.add_container("a", shape_a, "float32", "argument")
    g.add_container("b", shape_b, "float32", "argument")
    g.add_container("c", (p, r), "float32", "result")
    g.add_tasklet("mm", [(i, 0, p), (j, 0, r), (k, 0, q)], {"o": x * y},
                  {"x": (g.access("a"), (i, k)), "y": (g.access("b"), (k, j))},
                  {"o": (g.new_version("c"), (i, j), "sum")})
    a, b = rand(*shape_a), rand(*shape_b)
    np.testing.assert_allclose(ir.run(g.validate(), {"a": a, "b": b})["c"], a @ b, rtol=1e-5)


def jacobi_graph(steps: int) -> DataflowGraph:
    """``u[1:-1] = (u[:-2] + u[2:]) / 2`` repeated: each step is a guarded copy
    of the boundary plus an update of the interior, into a new version."""
    g = DataflowGraph("jacobi")
    g.add_container("u", (N,), "float32", "argument")
    g.add_container("v", (N,), "float32", "result")
    prev = g.access("u")
    for _ in range(steps):
        nxt = g.new_version("v")
        g.add_tasklet("keep", [(i, 0, N)], {"o": x}, {"x": (prev, (i,))}, {"o": (nxt, (i,))},
                      condition=sympy.Or(sympy.Eq(i, 0), sympy.Eq(i, N - 1)))
        g.add_tasklet("interior", [(i, 1, N - 1)], {"o": (x + y) / 2},
                      {"x": (prev, (i - 1,)), "y": (prev, (i + 1,))}, {"o": (nxt, (i,))})
        prev = nxt
    return g.validate()


def test_guarded_partial_updates_make_new_versions():
    u = rand(9)
    out = ir.run(jacobi_graph(3), {"u": u}, keep=True)
    expected = u.copy()
    for step in range(3):
        expected[1:-1] = (expected[:-2] + expected[2:]) / 2
        np.testing.assert_allclose(out[f"v#{step}"], expected, rtol=1e-6)
    np.testing.assert_allclose(out["v"], expected, rtol=1e-6)
    np.testing.assert_array_equal(out["u#0"], u)   # the caller's data is never modified in place


def test_gather_through_int_connector():
    g = DataflowGraph()
    g.add_container("a", (6, 3), "float32", "argument")
    g.add_container("idx", (4,), "int32", "argument")
    g.add_container("out", (4, 3), "float32", "result")
    g.add_tasklet("gather", [(i, 0, 4), (j, 0, 3)], {"o": 3 * x},
                  {"x": (g.access("a"), (n, j)), "n": (g.access("idx"), (i,))},
                  {"o": (g.new_version("out"), (i, j))})
    a, idx = rand(6, 3), np.array([5, 0, 0, 2], np.int32)
    np.testing.assert_allclose(ir.run(g.validate(), {"a": a, "idx": idx})["out"], 3 * a[idx], rtol=1e-6)


@pytest.mark.parametrize("op", list(REDUCE))
def test_scatter_accumulate(op):
    # out[idx[i] + j] op= a[i, j]: colliding, data-dependent targets
    g = DataflowGraph()
    g.add_container("a", (4, 3), "float32", "argument")
    g.add_container("idx", (4,), "int32", "argument")
    g.add_container("out", (6,), "float32", "result")
    g.add_tasklet("scatter", [(i, 0, 4), (j, 0, 3)], {"o": x},
                  {"x": (g.access("a"), (i, j)), "n": (g.access("idx"), (i,))},
                  {"o": (g.new_version("out"), (n + j,), op)})
    a, idx = rand(4, 3), np.array([0, 3, 0, 1], np.int32)
    expected = np.full(6, {"sum": 0, "max": -np.inf, "min": np.inf, "prod": 1}[op], np.float32)
    UFUNC[op].at(expected, (idx[:, None] + np.arange(3)).ravel(), a.ravel())
    np.testing.assert_allclose(ir.run(g.validate(), {"a": a, "idx": idx})["out"], expected, rtol=1e-6)


def test_zero_d_containers():
    g = DataflowGraph()
    g.add_container("s", (), "float32", "argument")
    g.add_container("a", (5,), "float32", "argument")
    g.add_container("scaled", (5,), "float32", "result")
    g.add_container("twice", (), "float32", "result")
    g.add_tasklet("scale", [(i, 0, 5)], {"o": x * y}, {"x": (g.access("a"), (i,)), "y": (g.access("s"), ())},
                  {"o": (g.new_version("scaled"), (i,))})
    g.add_tasklet("double", [], {"o": 2 * y}, {"y": (g.access("s"), ())}, {"o": (g.new_version("twice"), ())})
    a = rand(5)
    out = ir.run(g.validate(), {"s": np.float32(1.5), "a": a})
    np.testing.assert_allclose(out["scaled"], 1.5 * a, rtol=1e-6)
    assert out["twice"].shape == () and out["twice"] == 3.0


def test_unwritten_version_reads_as_zeros():
    g = DataflowGraph()
    g.add_container("z", (3,), "float32")
    g.add_container("out", (3,), "float32", "result")
    g.add_tasklet("t", [(i, 0, 3)], {"o": x + 1}, {"x": (g.access("z"), (i,))}, {"o": (g.new_version("out"), (i,))})
    np.testing.assert_array_equal(ir.run(g.validate(), {})["out"], np.ones(3))


def test_max_into_int_container_starts_from_int_min():
    g = DataflowGraph()
    g.add_container("a", (3, 4), "int32", "argument")
    g.add_container("out", (3,), "int32", "result")
    v = connector_symbol("v", "int32")
    g.add_tasklet("t", [(i, 0, 3), (j, 0, 4)], {"o": v}, {"v": (g.access("a"), (i, j))},
                  {"o": (g.new_version("out"), (i,), "max")})
    a = rng.integers(-100, -50, (3, 4)).astype(np.int32)
    out = ir.run(g.validate(), {"a": a})["out"]
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, a.max(axis=1))


def test_sizes_bound_from_argument_shapes():
    g = map_graph((N, M), (M,), [(i, 0, N), (j, 0, M)], x * x, (i, j), (j,), "sum")
    a = rand(3, 7)
    assert ir.bind_sizes(g, {"a": a}) == {"N": 3, "M": 7}
    np.testing.assert_allclose(ir.run(g, {"a": a})["out"], (a * a).sum(axis=0), rtol=1e-5)
    b = rand(5, 2)   # the same graph re-binds for other sizes
    np.testing.assert_allclose(ir.run(g, {"a": b})["out"], (b * b).sum(axis=0), rtol=1e-5)


def test_conflicting_sizes_rejected():
    g = DataflowGraph()
    g.add_container("a", (N,), "float32", "argument")
    g.add_container("b", (N,), "float32", "argument")
    with pytest.raises(GraphError, match="size N is 3 .* 'b' has 4"):
        ir.bind_sizes(g, {"a": rand(3), "b": rand(4)})
    with pytest.raises(GraphError, match="expected 1 dimensions"):
        ir.bind_sizes(g, {"a": rand(3, 1)})


def test_float64_mode():
    g = map_graph((3,), (3,), [(i, 0, 3)], (x + sympy.Float(1e-9)) - x, (i,), (i,))
    a = np.ones(3, np.float32)
    assert ir.run(g, {"a": a})["out"].dtype == np.float32
    out = ir.run(g, {"a": a}, float_dtype="float64")["out"]
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, 1e-9, rtol=1e-6)


def test_out_of_range_read_names_tasklet_and_access():
    g = map_graph((4,), (4,), [(i, 0, 4)], x, (i,), (i,))
    g.nx.remove_node("t")   # rebuild with an index validate() would reject, to test run()'s own check
    g.add_tasklet("shift", [(i, 0, 4)], {"o": x}, {"x": (g.access("a"), (i + 1,))},
                  {"o": (g.access("out", 1), (i,))}, source="prog.py:7")
    with pytest.raises(IndexError, match=r"tasklet shift \(prog.py:7\): index 4 out of range for axis 0 of a"):
        ir.run(g, {"a": rand(4)})


def test_out_of_range_gather_index():
    g = DataflowGraph()
    g.add_container("a", (3,), "float32", "argument")
    g.add_container("idx", (2,), "int32", "argument")
    g.add_container("out", (2,), "float32", "result")
    g.add_tasklet("gather", [(i, 0, 2)], {"o": x}, {"x": (g.access("a"), (n,)), "n": (g.access("idx"), (i,))},
                  {"o": (g.new_version("out"), (i,))})
    with pytest.raises(IndexError, match="tasklet gather: index -1 out of range"):
        ir.run(g.validate(), {"a": rand(3), "idx": np.array([0, -1], np.int32)})


def test_missing_argument():
    g = map_graph((4,), (4,), [(i, 0, 4)], x, (i,), (i,))
    with pytest.raises(GraphError, match=r"missing arguments \['a'\]"):
        ir.run(g, {})


def test_empty_domain_writes_nothing():
    g = map_graph((4,), (4,), [(i, 2, 2)], x, (i,), (i,), "max")
    np.testing.assert_array_equal(ir.run(g, {"a": rand(4)})["out"], np.full(4, -np.inf))


def test_million_elements():
    size = 1_000_000
    g = DataflowGraph("big")
    g.add_container("a", (N,), "float32", "argument")
    g.add_container("b", (N,), "float32")
    g.add_container("s", (), "float32", "result")
    g.add_tasklet("map", [(i, 0, N)], {"o": sympy.tanh(x) * 0.5}, {"x": (g.access("a"), (i,))},
                  {"o": (g.new_version("b"), (i,))})
    g.add_tasklet("sum", [(i, 0, N)], {"o": x * x}, {"x": (g.access("b"), (i,))},
                  {"o": (g.new_version("s"), (), "sum")})
    a = rng.standard_normal(size).astype(np.float32)
    out = ir.run(g.validate(), {"a": a}, float_dtype="float64")["s"]
    np.testing.assert_allclose(out, np.sum((np.tanh(a.astype(np.float64)) * 0.5) ** 2), rtol=1e-9)


def test_boolean_if_then_else_shared_by_two_outputs():
    """sympy writes some boolean selections as ``ITE`` (second derivatives of
    np.prod do).  Shared by two outputs, lambdify's cse makes the ITE its own
    variable, printed as a float ``select`` with a nan default, which numpy
    then refuses as a condition."""
    cond = sympy.ITE(sympy.Eq(x, 0), sympy.false, sympy.Eq(x, 1))
    g = DataflowGraph()
    g.add_container("a", (4,), "float32", "argument")
    g.add_container("p", (4,), "float32", "result")
    g.add_container("q", (4,), "float32", "result")
    g.add_tasklet("t", [(i, 0, 4)], {"p": sympy.Piecewise((5, cond), (x, True)),
                                     "q": sympy.Piecewise((x, cond), (0, True))},
                  {"x": (g.access("a"), (i,))}, {"p": (g.new_version("p"), (i,)), "q": (g.new_version("q"), (i,))})
    a = np.array([0, 1, 2, 1], np.float32)
    out = ir.run(g.validate(), {"a": a})
    np.testing.assert_array_equal(out["p"], np.where(a == 1, 5, a))
    np.testing.assert_array_equal(out["q"], np.where(a == 1, a, 0))


@pytest.mark.parametrize("accumulate", ["sum", "prod", None])
def test_empty_reduction_axis_writes_nothing(accumulate):
    """A matmul-shaped domain whose contracted axis is empty: no point runs, so
    the target keeps its initial value (numpy: a (3, 0) @ (0, 2) product is zeros)."""
    g = map_graph((3, 0), (3, 2), [(i, 0, 3), (j, 0, 2), (k, 0, 0)], x, (i, k), (i, j), accumulate)
    expected = np.full((3, 2), ir.graph.ACCUMULATION_IDENTITY[accumulate], np.float32)
    np.testing.assert_array_equal(ir.run(g, {"a": np.ones((3, 0), np.float32)})["out"], expected)


def test_size_symbol_bound_to_zero_rejected():
    """Size symbols are positive (sympy simplifies with that: N/N = 1), so a
    0-size argument for a symbolic dim would run a wrongly simplified graph."""
    g = DataflowGraph()
    g.add_container("a", (3, N), "float32", "argument")
    with pytest.raises(GraphError, match=r"'a' has size 0 .* size symbol N .*sd.f32\[0\]"):
        ir.bind_sizes(g, {"a": rand(3, 0)})


@pytest.mark.parametrize("shape, order", [((2, 3, 4), (2, 0, 1)), ((3, 5, 2), (1, 2, 0)), ((4, 3, 7), (2, 1, 0))])
def test_reshapes_of_transposed_reshapes_read_exact_elements(shape, order):
    """An index that floors a sum holding another floor (a reshape of a transposed
    reshape) is evaluated in integers: as a float, ``floor(1/3 + 20/3)`` is 6 and
    element 21 of the chain below read element 14 (found by compile_module's tests)."""
    import symdiff as sd

    n = int(np.prod(shape))
    def chain(x):
        return np.swapaxes(np.transpose(x.reshape(shape), order), 0, 1).reshape(-1, shape[-1]).reshape(-1) * 1.0
    x = np.arange(float(n)).reshape(-1, shape[-1])
    program = sd.differentiable_program(chain)
    np.testing.assert_array_equal(program(x, device="numpy"), chain(x))
