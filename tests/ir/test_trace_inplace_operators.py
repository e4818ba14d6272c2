"""Every in-place operator numpy arrays have updates a traced array in place.

Without a traced ``__imatmul__`` (or ``__imod__``, ``__ifloordiv__``), Python falls
back to ``x = x @ y``, which rebinds the name: an update through a view of another
array (``plane = A[r]; plane @= C``) was lost silently.  Checked against numpy.
"""
import numpy as np
import pytest

from symdiff import ir
from symdiff.ir.specs import f64


def _through_view(op):
    def f(A, C):
        X = A[0]
        if op == "@=":
            X @= C
        elif op == "%=":
            X %= 0.3
        elif op == "//=":
            X //= 0.25
        return np.sum(A * A)
    return f


@pytest.mark.parametrize("op", ["@=", "%=", "//="])
def test_inplace_operator_through_a_view_updates_the_base(op):
    rng = np.random.default_rng(0)
    A = rng.uniform(0.1, 1.0, (2, 2, 2))
    C = rng.uniform(-1.0, 1.0, (2, 2))
    f = _through_view(op)
    g = ir.trace(f, f64[2, 2, 2], f64[2, 2])
    out = ir.run(g, {"A": A, "C": C})
    assert np.isclose(float(out["out"]), f(A.copy(), C), rtol=1e-12)


def test_logical_inplace_operator_through_a_view_updates_the_base():
    def f(x):
        m = x > 0
        v = m[1:]
        v &= x[:3] < 0.5
        return np.sum(np.where(m, x, 0.0))
    x = np.array([0.2, 0.7, 0.3, -1.0])
    g = ir.trace(f, f64[4])
    assert np.isclose(float(ir.run(g, {"x": x})["out"]), f(x.copy()), rtol=1e-12)
