"""Comparisons sympy cannot canonicalise stably (tests/comparison_cases.py) on
the Slang devices (float32): the printer writes ``ir.scalar_functions.comparison``
as the relational it stands for; values as numpy's, gradients as JAX float64's."""
import numpy as np
import pytest

import symdiff as sd
from comparison_cases import CASES, check


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_comparison_of_computed_values_on_device(case, device):
    check(sd, case, device, sd.f32, np.float32, rtol=1e-4)
