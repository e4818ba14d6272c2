"""A Python or numpy bool scalar in arithmetic with a traced array counts as 0/1,
as in numpy (it raised sympy's "BooleanAtom not allowed" TypeError; found by
tests/fuzz seed 10107: ``(3.0 > 0) * x``)."""
import numpy as np
import pytest

import symdiff as sd

CASES = [
    (lambda x: True * x, 1.0),
    (lambda x: x + True, 1.0),
    (lambda x: x * np.bool_(False), 0.0),
    (lambda x: (3.0 > 0) * x - x * (1 < 0), 1.0),
]


@pytest.mark.parametrize("k", range(len(CASES)))
def test_bool_scalar_operands(k):
    body, slope = CASES[k]
    ns = {"np": np, "sd": sd, "body": body}
    exec("@sd.differentiable_program\ndef f(x: sd.f32[3]):\n    return np.sum(body(x))\n", ns)
    x = np.array([1.0, -2.0, 3.0], np.float32)
    value, grads = ns["f"].value_and_grad(x, device="numpy")
    assert value == pytest.approx(float(np.sum(body(x))))
    np.testing.assert_array_equal(grads["x"], np.full(3, slope, np.float32))
