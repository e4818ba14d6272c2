"""lowering.collector: the garbage collector's thresholds while a program compiles."""
import gc

import numpy as np
import pytest

import symdiff as sd
from symdiff.lowering import collector


@pytest.fixture
def thresholds():
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*saved)


def test_raised_inside_and_restored_after_nested_blocks(thresholds):
    with collector.fewer_collections():
        assert gc.get_threshold() == (collector.COMPILE_THRESHOLD, 10, 10)
        with collector.fewer_collections():
            assert gc.get_threshold() == (collector.COMPILE_THRESHOLD, 10, 10)
        assert gc.get_threshold() == (collector.COMPILE_THRESHOLD, 10, 10)
    assert gc.get_threshold() == (700, 10, 10)


def test_restored_when_the_block_raises(thresholds):
    with pytest.raises(ValueError):
        with collector.fewer_collections():
            raise ValueError("a compile error")
    assert gc.get_threshold() == (700, 10, 10)


def test_a_collector_turned_off_by_threshold_stays_off(thresholds):
    gc.set_threshold(0, 10, 10)
    with collector.fewer_collections():
        assert gc.get_threshold() == (0, 10, 10)
    assert gc.get_threshold() == (0, 10, 10)


def test_thresholds_set_inside_by_someone_else_stay(thresholds):
    with collector.fewer_collections():
        gc.set_threshold(2000, 5, 5)
    assert gc.get_threshold() == (2000, 5, 5)


def test_a_first_call_compiles_with_fewer_collections_and_restores_them(thresholds, monkeypatch):
    seen = []
    real = sd.lowering.runtime.plan

    def plan(*args, **kwargs):
        seen.append(gc.get_threshold()[0])
        return real(*args, **kwargs)
    monkeypatch.setattr(sd.lowering.runtime, "plan", plan)
    monkeypatch.setenv("SYMDIFF_DISK_CACHE", "0")
    program = sd.differentiable_program(lambda x: np.sum(np.tanh(x) * x))
    x = np.linspace(-1.0, 1.0, 8).astype(np.float32)
    value, grads = program.value_and_grad(x, device="cpu")
    assert seen == [collector.COMPILE_THRESHOLD]
    assert gc.get_threshold() == (700, 10, 10)
    np.testing.assert_allclose(grads["x"], np.tanh(x) + x * (1 - np.tanh(x) ** 2), rtol=1e-5)
