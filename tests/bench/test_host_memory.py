"""bench.host_memory: one row per call, the call's peak never below what it left behind."""
import sys

import pytest

from bench import host_memory


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self")
def test_child_measures_each_call():
    rows = host_memory.child("numpy", 4096, 2)
    assert [r["call"] for r in rows] == [0, 1]
    for r in rows:
        assert r["peak"] >= r["after"] and isinstance(r["seconds"], float)  # a time is recorded; speed is bench's
    assert isinstance(rows[-1]["dropped"], float)  # what stays once everything is dropped: reported, not bounded



@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self")
def test_a_memory_budget_reaches_the_program():
    """--memory-budget plans the CPU device's buffers under it (its own plan
    stores tanh(x) * x next to the gradient: 2x x's bytes)."""
    budgeted, = host_memory.child("cpu", 4096, 1, budget=1.5)
    assert 0 < budgeted["planned"] <= 1.5
