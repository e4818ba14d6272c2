"""NaN semantics on the numpy device (the reference interpreter): numpy's
values and JAX's gradients (issue 10, bug 7; the cases are tests/nan_cases.py,
which tests/lowering runs on the Slang devices)."""
import pytest

import symdiff as sd
from nan_cases import CASES, check


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_nan_values_like_numpy_and_gradients_like_jax(case):
    check(sd, case, "numpy")
