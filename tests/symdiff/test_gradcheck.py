"""check_graph_gradients: passes on correct derivatives, and on a wrong one
names the input, the element, both values and the tasklet at fault."""
import numpy as np
import pytest
import sympy

import symdiff as sd
from symdiff import backward, ir
from symdiff.gradcheck import GradientCheckError, check_graph_gradients, directions_agree
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


# ------------------------------------------------------------------ the fast path (sd.gradcheck)
# sd.gradcheck takes the fast path: three random directional derivatives, and the
# element-by-element check only where a direction disagrees.  Each test below breaks the
# derivative one way and needs GradientCheckError: had the fast path accepted, nothing raised.

def _smooth(x: sd.f64[40], w: sd.f64[40]):
    return np.sum(np.tanh(x) * w) + np.sum(x * x) * 0.5


def _inputs():
    rng = np.random.default_rng(5)
    return rng.uniform(-1.0, 1.0, 40), rng.uniform(-1.0, 1.0, 40)


def test_the_fast_path_accepts_correct_gradients(monkeypatch):
    """...and without the element-by-element fallback (2 runs per element)."""
    runs = []
    real_run = ir.run
    monkeypatch.setattr(ir, "run", lambda *a, **k: runs.append(1) or real_run(*a, **k))
    sd.gradcheck(_smooth, *_inputs())
    assert len(runs) <= 1 + 2 * 12, f"{len(runs)} interpreter runs: the fast path fell back"


def test_the_fast_path_rejects_a_wrong_derivative_rule():
    register_derivative(sympy.tanh, lambda u: (1 - sympy.tanh(u) ** 2 + sympy.Rational(1, 1000),))
    try:
        with pytest.raises(GradientCheckError, match="input 'x'"):
            sd.gradcheck(sd.differentiable_program(_smooth), *_inputs())
    finally:
        unregister_derivative(sympy.tanh)


def test_the_fast_path_rejects_a_wrong_partial(monkeypatch):
    """One partial of one multiplication 0.1% off (rtol is 1e-4)."""
    real = backward.tasklet_partials

    def off(body, inputs):
        partials = real(body, inputs)
        return {k: d * sympy.Float(1.001) if isinstance(body[k[0]], sympy.Mul) and k[1] == "x1" else d
                for k, d in partials.items()}
    monkeypatch.setattr(backward, "tasklet_partials", off)
    with pytest.raises(GradientCheckError):
        sd.gradcheck(sd.differentiable_program(_smooth), *_inputs())


def test_the_fast_path_rejects_a_lost_accumulation(monkeypatch):
    """Contributions written instead of summed: ``w`` is read by every row of ``x @ w``."""
    monkeypatch.setattr(backward._ReversePass, "_mode", lambda self, access, index, domain: None)

    def matvec(x: sd.f64[6, 5], w: sd.f64[5]):
        return np.sum(np.sin(x @ w))
    rng = np.random.default_rng(6)
    with pytest.raises(GradientCheckError, match="input 'w'"):
        sd.gradcheck(sd.differentiable_program(matvec), rng.normal(size=(6, 5)), rng.normal(size=5), wrt=["w"])


def test_the_fast_path_tolerance_does_not_grow_with_the_input():
    """20000 elements, one wrong by 1e-4: the old tolerance (atol * sum|v| + rtol *
    sum|g v|, per-element bounds summed) was ~1e2 times that; what the difference quotient's
    rounding and truncation explain is far below it."""
    n = 20000
    rng = np.random.default_rng(7)
    c = rng.uniform(-1.0, 1.0, n)

    def objective(point):
        terms = c * np.sin(point["x"])
        return float(np.sum(terms)), float(np.sum(np.abs(terms)))
    values = {"x": rng.uniform(-1.0, 1.0, n)}
    right = c * np.cos(values["x"])
    assert directions_agree(objective, values, "x", right, np.random.default_rng(0))
    wrong = right.copy()
    wrong[n // 2] += 1e-4
    assert not directions_agree(objective, values, "x", wrong, np.random.default_rng(0))
    v = np.random.default_rng(0).normal(size=n)
    assert 1e-5 * np.abs(v).sum() + 1e-4 * np.abs(right * v).sum() > 100 * 1e-4   # the old bound
