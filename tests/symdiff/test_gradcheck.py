"""check_graph_gradients: passes on correct derivatives, and on a wrong one
names the input, the element, both values and the tasklet at fault."""
import numpy as np
import pytest
import sympy

from symdiff.gradcheck import GradientCheckError, check_graph_gradients
from symdiff.registry import register_derivative, unregister_derivative
from symdiff_graphs import Builder, a, b, i, j, rng_inputs


def graph(expr):
    bld = Builder()
    bld.container("x", (3, 2), "argument")
    bld.container("w", (2,), "argument")
    bld.container("h", (3, 2))
    bld.container("s", (), "result")
    bld.g.add_tasklet("scale", [(i, 0, 3), (j, 0, 2)], {"o": a * b},
                      {"a": (bld.g.access("x", 0), (i, j)), "b": (bld.g.access("w", 0), (j,))},
                      {"o": (bld.g.new_version("h"), (i, j))}, source="model.py:3")
    bld.tasklet("squash", [(i, 0, 3), (j, 0, 2)], expr, {"a": ("h", (i, j))}, ("s", ()), "sum")
    return bld.g


def test_correct_gradients_pass_and_are_returned():
    values = rng_inputs({"x": (3, 2), "w": (2,)})
    grads = check_graph_gradients(graph(sympy.tanh(a) ** 2), values)
    assert set(grads) == {"x", "w"} and grads["x"].shape == (3, 2)


def test_wrong_registered_derivative_is_named():
    g = graph(sympy.exp(a) + sympy.floor(a))  # floor' = 0 away from integers
    register_derivative(sympy.floor, lambda u: (3,))  # a deliberately wrong rule
    try:
        with pytest.raises(GradientCheckError) as err:
            check_graph_gradients(g, rng_inputs({"x": (3, 2), "w": (2,)}, low=0.2, high=0.9), wrt=["x"])
    finally:
        unregister_derivative(sympy.floor)
    message = str(err.value)
    assert "input 'x'" in message and "element (" in message
    assert "analytic" in message and "numeric" in message
    assert "tasklet 'squash'" in message and "d o/d a" in message
    assert "'scale'" not in message  # the correct tasklet is not blamed
