"""``Executable.record``: many calls recorded into one command encoder and submitted
once (how ``symdiff.loop_runtime`` runs a loop's iterations) give the results of the
same calls made one by one, reuse a few kept bindings, and upload small numpy
arguments in order with the calls around them."""
# (no ``from __future__ import annotations``: the programs' shape annotations close over local sizes)
import gc

import numpy as np

import symdiff as sd
from symdiff import lowering
from symdiff.lowering import backends


def _step(i: sd.i32, a: sd.f32[64], b: sd.f32[64]):
    """One iteration of a two-array state: a stencil, a product, the index ``i`` read as a value."""
    new_a = a.copy()
    new_a[1:-1] = 0.25 * (a[:-2] + 2 * a[1:-1] + a[2:]) + 0.01 * b[1:-1] * i
    return new_a, np.tanh(b) + a  # the results are copies: a new state, not the arguments


def _exe(device):
    graph = sd.trace(_step, sd.i32, sd.f32[64], sd.f32[64])
    return graph, lowering.compile(graph, device=device, repeated=True)


def test_recorded_calls_give_the_results_of_calls_made_one_by_one(device):
    graph, exe = _exe(device)
    out_a, out_b = graph.meta["result_names"]
    r = np.random.default_rng(0)
    a0, b0 = r.standard_normal(64).astype(np.float32), r.standard_normal(64).astype(np.float32)
    a, b = a0, b0
    for i in range(40):
        res = exe({"i": np.int32(i), "a": a, "b": b})
        a, b = res[out_a], res[out_b]
    enc = backends.of(device).device().create_command_encoder()
    ra, rb = a0, b0
    for i in range(40):
        res, enc = exe.record(enc, {"i": np.int32(i), "a": ra, "b": rb})
        ra, rb = res[out_a], res[out_b]
    backends.of(device).device().submit_command_buffer(enc.finish())
    assert isinstance(ra, lowering.DeviceArray)
    np.testing.assert_array_equal(np.asarray(ra), a)  # the same kernels on the same values: the same bits
    np.testing.assert_array_equal(np.asarray(rb), b)


def test_alternating_buffers_reuse_kept_bindings_and_spares(device):
    graph, exe = _exe(device)
    out_a, out_b = graph.meta["result_names"]
    state = [np.ones(64, np.float32), np.zeros(64, np.float32)]
    for _ in range(3):  # three runs of 50 recorded iterations, each submitted once
        enc = backends.of(device).device().create_command_encoder()
        for i in range(50):
            res, enc = exe.record(enc, {"i": np.int32(i), "a": state[0], "b": state[1]})
            state = [res[out_a], res[out_b]]
        backends.of(device).device().submit_command_buffer(enc.finish())
        state = [np.asarray(s) for s in state]
        gc.collect()
        if _ == 0:
            allocated = exe.stats()["buffers_allocated"]
    assert exe.stats()["buffers_allocated"] == allocated  # later runs take dropped states' buffers back
    (inst,) = exe._instances.values()
    launches = len(exe._launches(inst))
    assert len(inst.bound) <= 8 * launches  # a few buffer sets alternate: their bindings are made once


def test_a_repeated_program_compiles_at_full_optimisation(monkeypatch):
    """A loop body's few points per call would pick g++ -O0 (``cache.optimization``); it runs
    once per iteration, so ``repeated=True`` compiles it at ``maximal``."""
    from symdiff.lowering import cache
    seen = []
    level_for = cache.level_for

    def spying(kind, source, work):
        seen.append(work)
        return level_for(kind, source, work)
    monkeypatch.setattr(cache, "level_for", spying)
    graph = sd.trace(_step, sd.i32, sd.f32[64], sd.f32[64])
    lowering.compile(graph, device="cpu")
    lowering.compile(graph, device="cpu", repeated=True)
    assert seen[0] is not None  # the level follows one call's work
    assert seen[1] is None  # maximal
