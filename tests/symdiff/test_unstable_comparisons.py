"""Comparisons sympy cannot canonicalise stably (tests/comparison_cases.py) are
traced and differentiated on the numpy device (float64): values as numpy's,
gradients as JAX's; they recursed inside sympy (fuzzer seeds 101315, 101997)."""
import numpy as np
import pytest

import symdiff as sd
from comparison_cases import CASES, check


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_comparison_of_computed_values_differentiates_like_jax(case):
    check(sd, case, "numpy", sd.f64, np.float64, rtol=1e-10)
