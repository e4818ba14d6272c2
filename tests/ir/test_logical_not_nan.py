"""``~`` of a comparison is True where an operand is NaN, as in numpy (sympy's
``Not`` turns ``x < y`` into ``x >= y``, False there: silently wrong masks)."""
# (no ``from __future__ import annotations``: the programs' shape annotations close over local sizes)
import numpy as np
import pytest

import symdiff as sd

NAN = float("nan")
X = np.array([NAN, 1.0, 0.25, NAN, 2.0, 0.5], dtype=np.float32)
Y = np.array([1.0, NAN, 0.5, NAN, 2.0, 3.0], dtype=np.float32)


def masks(x, y):
    return np.stack([~(x < y), ~(x <= 0.5), ~((x > y) & (y > 0.0)), ~((x == y) | (x != x)),
                     np.logical_not(x >= y), ~~(x < y)]).astype(np.float32)


def masks_program(x: sd.f32[6], y: sd.f32[6]):
    return masks(x, y)


def mapped(x: sd.f32[6], y: sd.f32[6]):
    out = np.zeros((6,), dtype=np.float32)
    for i in sd.map[0:6]:
        out[i] = np.where(~(x[i] < y[i]), 1.0, 0.0) + 2.0 * np.where(~(x[i] * y[i] > 1.0), 1.0, 0.0)
    return out


def mapped_numpy(x, y):
    return np.where(~(x < y), 1.0, 0.0) + 2.0 * np.where(~(x * y > 1.0), 1.0, 0.0)


@pytest.mark.parametrize("device", ["numpy", "cpu", pytest.param("vulkan", marks=pytest.mark.vulkan)])
def test_negated_comparisons_hold_at_nan(device):
    if device not in sd.available_devices():
        pytest.skip(f"no {device} device here")
    with np.errstate(invalid="ignore"):
        expected_masks, expected_mapped = masks(X, Y), mapped_numpy(X, Y)
    got = sd.differentiable_program(masks_program)(X, Y, device=device)
    np.testing.assert_array_equal(np.asarray(got), expected_masks)
    got = sd.differentiable_program(mapped)(X, Y, device=device)
    np.testing.assert_array_equal(np.asarray(got), expected_mapped)
