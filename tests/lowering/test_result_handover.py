"""Device-array results are the buffers the kernels wrote, handed to the caller
(lowering.runtime ``_hand_over``): no copy per call, no allocation once the
caller drops earlier results, and never an earlier result changed by a later call."""
# (no ``from __future__ import annotations``: the programs' shape annotations close over local sizes)
import gc

import numpy as np
import pytest

import symdiff as sd

pytestmark = pytest.mark.usefixtures("frozen_heap")  # conftest: gc.collect() walks only these tests' objects


def loss(x: sd.f32[64], w: sd.f32[64], unused: sd.f32[64]):
    return np.sum(np.tanh(x * w) ** 2)


def scatter(x: sd.f32[64], idx: sd.i32[64]):
    out = np.zeros(8, dtype=np.float32)
    np.add.at(out, idx, x * x)
    return out


def _inputs(seed: int):
    r = np.random.default_rng(seed)
    return [r.standard_normal(64).astype(np.float32) for _ in range(3)]


def test_results_are_right_on_every_call_and_earlier_ones_stay(device):
    prog = sd.differentiable_program(loss)
    wrt = ["x", "w", "unused"]
    kept = []
    for seed in range(4):
        args = _inputs(seed)
        ref_value, ref_grads = prog.value_and_grad(*[a.astype(np.float64) for a in args], wrt=wrt, device="numpy")
        on_device = [sd.asarray(a, device=device) for a in args]
        value, grads = prog.value_and_grad(*on_device, wrt=wrt, device=device, device_arrays=True)
        kept.append((ref_value, ref_grads, value, grads))
        gc.collect()
    for ref_value, ref_grads, value, grads in kept:  # each call's arrays still hold that call's results
        np.testing.assert_allclose(float(np.asarray(value)), ref_value, rtol=1e-5)
        for name in wrt:
            np.testing.assert_allclose(np.asarray(grads[name]), ref_grads[name], rtol=1e-5, atol=1e-6)
    assert not np.asarray(kept[-1][3]["unused"]).any()


def test_dropped_results_are_reused_instead_of_allocated(device):
    prog = sd.differentiable_program(loss)
    args = [sd.asarray(a, device=device) for a in _inputs(0)]
    counts = []
    for _ in range(6):
        value, grads = prog.value_and_grad(*args, device=device, device_arrays=True)
        del value, grads
        gc.collect()
        counts.append(list(prog.stats().values())[-1]["buffers_allocated"])
    assert counts[-1] == counts[2], counts  # nothing allocated once spares exist


def test_an_accumulated_result_starts_from_zero_on_every_call(device):
    prog = sd.differentiable_program(scatter)
    idx = np.arange(64, dtype=np.int32) % 8
    expected = None
    for seed in range(3):
        x = _inputs(seed)[0]
        out = prog(sd.asarray(x, device=device), sd.asarray(idx, device=device), device=device, device_arrays=True)
        expected = np.zeros(8)
        np.add.at(expected, idx, x.astype(np.float64) ** 2)
        np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-5)
        del out
        gc.collect()


def test_a_dropped_result_costs_no_second_buffer(device):
    # The spare that replaces a handed-over result is taken only when the next call needs it: a
    # caller who drops each result before the next call never makes the executable allocate one.
    @sd.differentiable_program
    def f(x: sd.f32[1 << 19]):
        return np.sum(x * x)

    x = np.random.default_rng(2).standard_normal(1 << 19).astype(np.float32)
    first = f.value_and_grad(x, device=device, device_arrays=True)
    allocated = sum(s["buffers_allocated"] for s in f.stats().values())
    del first
    gc.collect()
    for _ in range(3):
        value, grads = f.value_and_grad(x, device=device, device_arrays=True)
        np.testing.assert_allclose(np.asarray(grads["x"]), 2 * x, rtol=1e-6)
        del value, grads
        gc.collect()
    assert sum(s["buffers_allocated"] for s in f.stats().values()) == allocated
