"""Literal zeros, infinities and NaNs in traced arithmetic on every Slang
device: numpy's values, JAX's gradients (the cases are tests/ieee_cases.py).
A Slang compiler may fold ``x / 0.0f`` (lavapipe gives 0), so no literal zero
divisor may reach the generated source."""
import numpy as np
import pytest

import symdiff as sd
from ieee_cases import CASES, N, check_map, integer_program
from nan_cases import check


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_ieee_constants_values_like_numpy_and_gradients_like_jax(case, device):
    check(sd, case, device)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_ieee_constants_in_a_map_body(device, dtype):
    check_map(sd, device, dtype)


def test_integer_division_by_zero_is_zero_as_numpy(device):
    with np.errstate(divide="ignore"):
        want = np.concatenate([N // 0, N % 0, N * 0])
    got = integer_program(sd)(N, device=device)
    assert got.dtype == want.dtype and np.array_equal(got, want)
