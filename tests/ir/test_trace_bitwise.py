"""& | ^ ~ on traced values: numpy's bitwise ufuncs, which on booleans are the
logical operations.  A numpy bool on the left (np.bool_(True) & v) reached
np.bitwise_and, which was refused (fuzzer seed 40507); on integers, & was
traced as a logical and (2 & 3 gave True, numpy gives 2): now refused."""
import numpy as np
import pytest

import symdiff as sd
from symdiff.ir.tracer import UnsupportedOperationError


def masks(x):
    out = np.zeros(4, dtype=np.float32)
    for i in sd.map[0:4]:
        out[i] = np.where(np.bool_(True) & (x[i] > 0), x[i], 0.0)
    m = np.bool_(False) | (x < 0.5)
    k = (x > -0.5) ^ np.bool_(True)
    return np.sum(out) + np.sum(np.where(~m, x, 2.0 * x)) + np.sum(np.where(k, 3.0 * x, x))


def masks_numpy(x):
    m, k = x < 0.5, (x > -0.5) ^ True
    return np.sum(np.where(x > 0, x, 0.0)) + np.sum(np.where(~m, x, 2.0 * x)) + np.sum(np.where(k, 3.0 * x, x))


def test_boolean_operators_match_numpy_also_with_a_numpy_bool_on_the_left():
    def program(x: sd.f32[4]):
        return masks(x)

    x = np.array([-1.0, 0.2, 0.7, 2.0], np.float32)
    value = sd.differentiable_program(program)(x, device="numpy")
    np.testing.assert_allclose(value, masks_numpy(x.astype(np.float64)), rtol=1e-6)


def test_bitwise_on_integers_is_refused_naming_the_line():
    def ints(x: sd.f32[4], n: sd.i32[4]):
        return np.sum(x * (n & 3))

    with pytest.raises(UnsupportedOperationError, match=r"test_trace_bitwise.py:\d+: numpy.bitwise_and"):
        sd.differentiable_program(ints)(np.ones(4, np.float32), np.arange(4, dtype=np.int32), device="numpy")
