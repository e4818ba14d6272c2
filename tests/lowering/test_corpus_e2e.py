"""The shared gradient corpus (tests/corpus.py), traced and differentiated by
symdiff, run on every Slang device and compared with JAX (float64)."""
import numpy as np
import pytest

import symdiff as sd
from corpus import CASES, assert_matches_jax, build_program


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_value_and_grad_matches_jax(case, device):
    program = build_program(sd, case)
    inputs = case.inputs()
    value, grads = program.value_and_grad(*inputs.values(), wrt=case.wrt, device=device)
    assert_matches_jax(case, value, grads, inputs)
