"""NaN semantics on every Slang device: numpy's values and JAX's gradients
(issue 10, bug 7; the cases are tests/nan_cases.py), and NaN through the
accumulations: a max/min reduction's combine and a colliding max/min update."""
import numpy as np
import pytest

from symdiff import lowering
import symdiff as sd
from lowering_graphs import histogram
from nan_cases import CASES, check


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_nan_values_like_numpy_and_gradients_like_jax(case, device):
    check(sd, case, device)


@pytest.mark.parametrize("op", ["max", "min"])
def test_colliding_max_min_updates_keep_nan(op, device):
    graph, inputs = histogram(op, n=4096, bins=8)
    w = inputs["w"].copy()
    w[[5, 700, 3000]] = np.nan
    want = np.full(8, -np.inf if op == "max" else np.inf, np.float32)
    with np.errstate(invalid="ignore"):
        {"max": np.maximum, "min": np.minimum}[op].at(want, inputs["idx"], w)
    got = lowering.compile(graph, device=device)({"idx": inputs["idx"], "w": w})["h"]
    np.testing.assert_array_equal(got, want)  # NaN where a NaN was scattered, as np.maximum.at
