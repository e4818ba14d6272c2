"""Recompute where read (lowering.rematerialise): a program whose named
producers are inlined into their readers computes what the interpreter
computes for the graph as written, with fewer buffers; a value read through
a gather index keeps its buffer."""
import numpy as np

import ir
import lowering
import symdiff as sd
from lowering.plan import plan
from lowering.rematerialise import candidates


def _layer_norm(x: sd.f32[8, 32], g: sd.f32[32]):
    mu = np.mean(x, axis=1, keepdims=True)
    c = x - mu
    y = c / np.sqrt(np.mean(c * c, axis=1, keepdims=True) + 1e-5) * g
    return np.sum(np.tanh(y) * y)


def _backward_graph():
    graph = ir.trace(_layer_norm).copy()
    sd.add_backward_pass(graph, inputs=["x", "g"], outputs=graph.results)
    return graph


RNG = np.random.default_rng(11)
INPUTS = {"x": RNG.standard_normal((8, 32)).astype(np.float32), "g": RNG.standard_normal(32).astype(np.float32)}


def test_every_candidate_recomputed_gives_the_interpreters_numbers(device):
    graph = _backward_graph()
    names = candidates(graph)
    assert names
    recomputed = graph.copy()
    recomputed.meta["rematerialise"] = names
    seeds = {s: np.ones(recomputed.containers[s].concrete_shape({}), np.float32) for s in graph.meta["seeds"].values()}
    want = ir.run(graph, {**INPUTS, **seeds})
    got = lowering.compile(recomputed, device=device)({**INPUTS, **seeds})
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=2e-4, atol=1e-5, err_msg=name)
    before = plan(graph, {}, device)
    after = plan(recomputed, {}, device)
    assert len(after.stored) < len(before.stored)
    assert not {t.meta["origin"] for t in after.graph.tasklets()} & set(names)  # inlined into readers, then gone


def test_a_value_read_through_a_gather_index_is_not_a_candidate():
    def gathered(a: sd.f32[16], idx: sd.i32[4]):
        t = np.tanh(a)
        return np.sum(t[idx] * 2.0)
    graph = ir.trace(gathered)
    tanh = next(t.name for t in graph.tasklets() if "tanh" in t.name)
    assert tanh not in candidates(graph)
