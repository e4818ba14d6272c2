"""Library nodes in the IR: one node per whole-array operation, whole-container
memlets, validation, the text and graph views, the interpreter, errors at
trace time and at run time, and the public registration (sd.library_node)."""
from __future__ import annotations

import re

import numpy as np
import pytest

import symdiff as sd
from symdiff import ir
from symdiff.ir.graph import GraphError
from symdiff.ir.library import LibraryNode, library_nodes, lookup
from symdiff.ir.tracer.errors import ShapeMismatchError


def solve_graph():
    return ir.trace(lambda a, b: np.linalg.solve(a, b) * 2, sd.f64[3, 3], sd.f64[3, 2])


def test_one_node_with_whole_container_memlets():
    g = solve_graph()
    (node,) = library_nodes(g)
    assert node.op == "linalg.solve" and node.source and "test_library_nodes.py" in node.source
    reads, writes = g.reads(node.name), g.writes(node.name)
    assert [g.node(a).container for a, _ in reads] == ["a", "b"]
    assert all(m.index == () for _, m in reads + writes)
    assert g.containers[writes[0][1].container].shape == (3, 2)
    g.validate()


def test_views_and_ints_are_copied_into_whole_float_containers():
    g = ir.trace(lambda a, b: np.linalg.solve(a.T, b[:, 0:1]), sd.f64[3, 3], sd.f64[3, 4])
    (node,) = library_nodes(g)
    assert {g.node(a).container for a, _ in g.reads(node.name)}.isdisjoint({"a", "b"})
    a, b = np.random.default_rng(0).normal(size=(3, 3)) + 3 * np.eye(3), np.ones((3, 4))
    np.testing.assert_allclose(ir.run(g, {"a": a, "b": b})[g.results[0]], np.linalg.solve(a.T, b[:, :1]))


def test_text_and_graph_views_show_one_box():
    g = solve_graph()
    text = str(g)
    assert re.search(r"library solve\w*: solve#0 = linalg.solve\(a#0, b#0\)  # test_library_nodes.py", text)
    svg = g.to_svg(engine="builtin")
    assert "linalg.solve" in svg and "(a, b) -&gt; (solve)" in svg


def test_validate_refuses_shapes_the_op_does_not_give():
    g = solve_graph()
    (node,) = library_nodes(g)
    out = g.writes(node.name)[0][1].container
    g.containers[out].shape = (sd.symbol("N"), 2)
    with pytest.raises(GraphError, match=r"library node 'solve\w*' \(linalg.solve\): output"):
        g.validate()


def test_validate_refuses_an_unknown_op():
    g = solve_graph()
    library_nodes(g)[0].op = "nobody.registered"
    with pytest.raises(GraphError, match="no library operation named 'nobody.registered'"):
        g.validate()


@pytest.mark.parametrize("fn, specs, message", [
    (lambda a: np.linalg.inv(a), (sd.f64[3, 4],), "last two axes must be equal"),
    (lambda a, b: np.linalg.solve(a, b), (sd.f64[3, 3], sd.f64[4, 2]), "b needs 3 rows"),
    (lambda a: np.linalg.cholesky(a), (sd.f64[3],), "needs a matrix"),
])
def test_shape_errors_name_the_line(fn, specs, message):
    with pytest.raises(ShapeMismatchError, match=message) as err:
        ir.trace(fn, *specs)
    assert "test_library_nodes.py" in str(err.value)


def test_singular_matrix_raises_linalgerror_from_the_call():
    f = sd.differentiable_program(lambda a: np.linalg.inv(a))
    with pytest.raises(np.linalg.LinAlgError):
        f(np.ones((3, 3)), device="numpy")
    solve = sd.differentiable_program(lambda a, b: np.linalg.solve(a, b))
    with pytest.raises(np.linalg.LinAlgError):
        solve(np.zeros((2, 2)), np.ones((2, 1)), device="numpy")


def test_cholesky_of_an_indefinite_matrix_raises_linalgerror():
    f = sd.differentiable_program(lambda a: np.linalg.cholesky(a))
    with pytest.raises(np.linalg.LinAlgError):
        f(np.diag([1.0, -1.0]), device="numpy")


def test_det_of_a_singular_matrix_is_zero_as_numpy():
    f = sd.differentiable_program(lambda a: (np.linalg.det(a), np.linalg.slogdet(a)[1]))
    det, logabs = f(np.ones((3, 3)), device="numpy")
    assert det == 0 and logabs == -np.inf


def test_float32_stays_float32():
    g = ir.trace(lambda a: np.linalg.inv(a), sd.f32[2, 2])
    assert g.containers[g.results[0]].dtype == "float32"
    a = np.array([[2.0, 1.0], [0.0, 4.0]], np.float32)
    np.testing.assert_allclose(ir.run(g, {"a": a})[g.results[0]], np.linalg.inv(a), rtol=1e-6)


def test_sd_linalg_runs_on_plain_arrays():
    a = np.array([[2.0, 0.0], [1.0, 3.0]])
    np.testing.assert_allclose(sd.linalg.solve_triangular(a, np.ones(2), lower=True), np.linalg.solve(a, np.ones(2)))
    np.testing.assert_allclose(sd.linalg.solve_triangular(a, np.ones((2, 1)), lower=True, trans="T"),
                               np.linalg.solve(a.T, np.ones((2, 1))))


def test_solve_triangular_reads_one_triangle():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(4, 4)) + 4 * np.eye(4), rng.normal(size=(4, 2))
    f = sd.differentiable_program(lambda a, b: sd.linalg.solve_triangular(a, b, lower=True))
    np.testing.assert_allclose(f(a, b, device="numpy"), np.linalg.solve(np.tril(a), b), rtol=1e-12)
    _, grads = f.vjp(a, b, cotangent=np.ones((4, 2)), device="numpy")
    assert np.all(np.triu(grads["a"], 1) == 0)
    sd.gradcheck(lambda a, b: np.sum(sd.linalg.solve_triangular(a, b, lower=False, unit_diagonal=True) ** 2), a, b)


def softplus_numpy(x):
    return np.logaddexp(0.0, x)


def softplus_vjp(params, inputs, outputs, cotangents):
    (x,), (g,) = inputs, cotangents
    return [None if g is None else g / (1 + np.exp(-x))]


def softplus_jvp(params, inputs, outputs, tangents):
    (x,), (t,) = inputs, tangents
    return [None if t is None else t / (1 + np.exp(-x))]


def test_user_registered_library_node():
    softplus = sd.library_node("test.softplus", shape=lambda x: x, numpy=softplus_numpy, vjp=softplus_vjp,
                               jvp=softplus_jvp, replace=True)

    @sd.differentiable_program
    def f(x: sd.f64[5]):
        return np.sum(softplus(x) ** 2)

    x = np.linspace(-2, 2, 5)
    assert isinstance(library_nodes(f.graph)[0], LibraryNode)
    np.testing.assert_allclose(f(x, device="numpy"), np.sum(np.logaddexp(0, x) ** 2))
    sd.gradcheck(f, x)
    _, tangent = f.jvp(x, tangents={"x": np.ones(5)}, device="numpy")
    np.testing.assert_allclose(tangent, np.sum(2 * np.logaddexp(0, x) / (1 + np.exp(-x))))
    np.testing.assert_allclose(softplus(x), np.logaddexp(0, x))   # plain arrays: numpy
    assert lookup("test.softplus").vjp is softplus_vjp


def test_a_name_is_registered_once():
    sd.library_node("test.once", shape=lambda x: x, numpy=lambda x: x, replace=True)
    with pytest.raises(ValueError, match="already registered"):
        sd.library_node("test.once", shape=lambda x: x, numpy=lambda x: x)


def test_a_missing_rule_is_named():
    op = sd.library_node("test.no_rules", shape=lambda x: x, numpy=lambda x: x * 2, replace=True)
    f = sd.differentiable_program(lambda x: np.sum(op(x)))
    with pytest.raises(sd.DifferentiationError, match="test.no_rules has no backward"):
        f.grad(np.ones(3), device="numpy")


def test_the_interactive_view_details_a_library_node():
    g = ir.trace(lambda a, b: np.linalg.solve(a, b), sd.f64[2, 2], sd.f64[2, 1])
    (node,) = library_nodes(g)
    details = g.view().node_details(node.name)
    assert details["title"].endswith("linalg.solve")
    assert ["call", "(a, b) -> (out)"] in details["rows"]   # the result container is named out
    assert "text/html" in g._repr_mimebundle_()
