"""Tasklet partials: conventions at non-smooth points, NaN guards, the registry."""
import numpy as np
import pytest
import sympy

from symdiff.derivatives import derivative, guarded_product, may_be_nonfinite, tasklet_partials
from symdiff.errors import DifferentiationError
from symdiff.registry import register_derivative, unregister_derivative
from symdiff_graphs import Builder, a, b, i, rng_inputs, vjp

n = sympy.Symbol("n", integer=True)
m = sympy.Symbol("m")


def value(expr, **at):
    return float(sympy.lambdify(list(at), expr, "numpy")(*at.values()))


def test_max_tie_is_half_and_abs_at_zero_is_zero():
    assert value(derivative(sympy.Max(a, b), a), a=1.0, b=1.0) == 0.5
    assert value(derivative(sympy.Min(a, b), b), a=1.0, b=1.0) == 0.5
    assert value(derivative(sympy.Abs(a), a), a=0.0) == 0.0


def test_piecewise_differentiates_only_the_selected_branch():
    d = derivative(sympy.Piecewise((a ** 2, a > 0), (3 * a, True)), a)
    assert value(d, a=2.0) == 4.0 and value(d, a=-1.0) == 3.0


def test_integer_and_bool_connectors_are_never_differentiated():
    partials = tasklet_partials({"o": a * n + sympy.Piecewise((b, m), (0, True))}, {"a": a, "n": n, "m": m, "b": b})
    assert set(partials) == {("o", "a"), ("o", "b")}


def test_zero_partials_are_dropped():
    assert tasklet_partials({"o": sympy.floor(a) + b}, {"a": a, "b": b}) == {("o", "b"): 1}


def test_guard_makes_zero_cotangent_exact_for_nonfinite_partials():
    g = sympy.Symbol("g", real=True)
    partial = derivative(sympy.sqrt(a), a)
    assert may_be_nonfinite(partial) and not may_be_nonfinite(derivative(a ** 3 * sympy.tanh(a), a))
    fn = sympy.lambdify([g, a], guarded_product(g, partial), "numpy")
    with np.errstate(all="ignore"):
        out = fn(np.array([0.0, 0.0, 1.0]), np.array([-1.0, 0.0, 4.0]))
    np.testing.assert_array_equal(out, [0.0, 0.0, 0.25])
    assert guarded_product(g, 2 * a) == 2 * a * g  # polynomial partials stay unguarded


def test_unknown_function_names_the_registry():
    f = sympy.Function("mystery")
    with pytest.raises(DifferentiationError, match="mystery.*register_derivative"):
        derivative(f(a), a)


def test_registered_rule_replaces_sympy_derivative():
    """A straight-through estimator for floor: sympy (and the built-in rule)
    say 0, the registered rule says 1; the backward graph must follow it."""
    graph = Builder()
    graph.container("x", (4,), "argument")
    graph.container("y", (4,), "result")
    graph.tasklet("quantise", [(i, 0, 4)], sympy.floor(3 * a) * a, {"a": ("x", (i,))}, ("y", (i,)))
    x = rng_inputs({"x": (4,)}, low=0.1, high=0.9)
    before = vjp(graph.g, x, ["x"], ["y"])["x"]
    np.testing.assert_allclose(before, np.floor(3 * x["x"]))
    register_derivative(sympy.floor, lambda arg: (1,))
    try:
        after = vjp(graph.g, x, ["x"], ["y"])["x"]
    finally:
        unregister_derivative(sympy.floor)
    np.testing.assert_allclose(after, 3 * x["x"] + np.floor(3 * x["x"]))
    assert derivative(sympy.floor(a), a) == 0  # built-in rule restored


def test_registered_rule_for_undefined_function_and_chain_rule():
    softplus = sympy.Function("softplus")
    register_derivative(softplus, lambda u: (1 / (1 + sympy.exp(-u)),))
    try:
        d = derivative(softplus(a * a), a)
    finally:
        unregister_derivative(softplus)
    assert sympy.simplify(d - 2 * a / (1 + sympy.exp(-a * a))) == 0
