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
