"""The interpreter's blocked runs (``ir.blocks``): the same numbers as one pass over each
domain, and host memory near the result's size for an elementwise chain."""
import tracemalloc

import numpy as np
import pytest

import symdiff as sd
from symdiff import ir
from symdiff.ir import blocks
from corpus import CASES, assert_matches_jax, build_program


@pytest.fixture
def tiny_blocks(monkeypatch):
    # 5 points per block: every run of the corpus splits into ragged blocks of rows
    monkeypatch.setattr(blocks, "BLOCK_POINTS", 5)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_corpus_in_tiny_blocks_matches_jax(case, tiny_blocks):
    program = build_program(sd, case)
    inputs = case.inputs()
    value, grads = program.value_and_grad(*inputs.values(), wrt=case.wrt, device="numpy")
    assert_matches_jax(case, value, grads, inputs)


def test_blocked_run_equals_one_pass(monkeypatch):
    # shifted reads, a row sum, a column sum and a max: runs end where a block would need
    # another block's values
    @sd.differentiable_program
    def f(a: sd.f64[9, 7]):
        b = np.tanh(a) * a
        rows = np.sum(b, axis=1)
        cols = np.max(b[1:, :] - b[:-1, :], axis=0)
        return np.sum(rows * rows) + np.sum(np.exp(cols)) + np.mean(b * b)

    a = np.random.default_rng(3).standard_normal((9, 7))
    value, grads = f.value_and_grad(a, device="numpy")
    monkeypatch.setattr(blocks, "BLOCK_POINTS", 10)
    blocked_value, blocked_grads = f.value_and_grad(a, device="numpy")
    np.testing.assert_allclose(blocked_value, value, rtol=1e-14)
    np.testing.assert_allclose(blocked_grads["a"], grads["a"], rtol=1e-13, atol=1e-15)


def test_elementwise_chain_holds_about_its_gradient(monkeypatch):
    # One pass per tasklet held tanh, the product, the broadcast seed and two gradient terms at
    # full size, plus numpy's temporaries: 7x the input at the peak.  In 32 blocks the
    # temporaries (about 7 blocks' worth) are small against the gradient.
    monkeypatch.setattr(blocks, "BLOCK_POINTS", 1 << 16)
    @sd.differentiable_program
    def f(x: sd.f32[1 << 21]):
        return np.mean(np.tanh(x) * x)

    x = np.random.default_rng(0).random(1 << 21, dtype=np.float32)
    graph = f.backward_graph()
    feed = {"x": x, **{a: np.ones((), np.float32) for a in graph.arguments if a != "x"}}
    tracemalloc.start()
    try:
        out = ir.run(graph, feed)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert out["grad_x"].shape == x.shape
    assert peak < 1.5 * x.nbytes, f"peak {peak / x.nbytes:.2f}x the input"
