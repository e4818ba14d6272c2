"""``s[0] += v`` inside an sd.map adds v once per iteration also when v does not
depend on the loop indices (it was traced as a plain update and added once, on
every device: ``for i in sd.map[0:4]: s[0] += 2.0 * x[0]`` gave 2 x[0], not 8 x[0];
found by tests/fuzz seed 10225)."""
import numpy as np
import pytest

import symdiff as sd


@sd.differentiable_program
def _constant(x: sd.f32[3]):
    s = np.zeros(1)
    for i, j in sd.map[0:3, 0:4]:
        s[0] += 2.0
    return s[0] + np.sum(x)


@sd.differentiable_program
def _invariant(x: sd.f32[3]):
    s = np.zeros(1)
    for i in sd.map[0:4]:
        s[0] += 2.0 * x[0]
        s[0] -= x[1]
    return s[0]


@pytest.mark.parametrize("device", ["numpy", "cpu"])
def test_invariant_accumulation_counts_every_iteration(device):
    x = np.array([1.5, -0.5, 2.0], np.float32)
    value, grads = _constant.value_and_grad(x, device=device)
    assert value == pytest.approx(24.0 + x.sum())
    np.testing.assert_allclose(grads["x"], np.ones(3))
    value, grads = _invariant.value_and_grad(x, device=device)
    assert value == pytest.approx(4 * (2.0 * x[0] - x[1]))
    np.testing.assert_allclose(grads["x"], [8.0, -4.0, 0.0])
