"""Numeric constants such as log(10) print as Slang, not as C's math macros
(M_LN10 is undefined in Slang: the gradient of log10 did not compile; found by
tests/fuzz seed 101)."""
import numpy as np
import pytest
import sympy

import symdiff as sd
from symdiff.lowering.printer import print_expr


@pytest.mark.parametrize("scalar", ["float", "double"])
def test_no_c_math_macros(scalar):
    x = sympy.Symbol("x")
    for expr in (1 / (x * sympy.log(10)), x * sympy.log(2), sympy.sqrt(2) * x, x / sympy.pi, sympy.E * x):
        assert "M_" not in print_expr(expr, scalar), expr


def test_log10_log2_gradients_on_device(device):
    @sd.differentiable_program
    def f(x: sd.f32[4]):
        return np.sum(np.log10(x * x + 1.0) + np.log2(x * x + 2.0))

    x = np.arange(4, dtype=np.float32) - 1.5
    _, g = f.value_and_grad(x, device=device)
    want = 2 * x / ((x * x + 1) * np.log(10)) + 2 * x / ((x * x + 2) * np.log(2))
    np.testing.assert_allclose(g["x"], want, rtol=1e-5, atol=1e-6)
