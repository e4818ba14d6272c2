"""Sibling reductions (lowering.sibling_reductions): reductions over one
domain reading the same data run as one tasklet, one loop; reductions joined
by a path, or reading nothing in common, stay apart.  Gradients vs JAX in
float64."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from symdiff import ir
from symdiff import lowering
import symdiff as sd
from symdiff.lowering import backends
from symdiff.lowering.plan import plan

jax.config.update("jax_enable_x64", True)

N = 64  # 4096 pairs: lowering.rematerialise.EXPANSION_MIN_ELEMENTS


def _pairs(xp, x, y, m):
    """Every body's potential against every other's (n-body without z)."""
    r = xp.sqrt((x[:, None] - x[None, :]) ** 2 + (y[:, None] - y[None, :]) ** 2 + 0.1)
    return xp.sum(m[:, None] * m[None, :] / r)


def _dependent(xp, x, y, m):
    """Two sums over the same rows, the second reading the first's result."""
    s = xp.sum(x[:, None] * y[None, :], axis=1)
    return xp.sum(xp.sum(m[None, :] * s[:, None] * y[None, :], axis=1))


def _program(body):
    def program(x: sd.f32[N], y: sd.f32[N], m: sd.f32[N]):
        return body(np, x, y, m)
    return sd.differentiable_program(program)


RNG = np.random.default_rng(5)
ARGS = (RNG.standard_normal(N).astype(np.float32), RNG.standard_normal(N).astype(np.float32),
        RNG.uniform(0.5, 1.5, N).astype(np.float32))


def _check(program, body, device):
    value, grads = program.value_and_grad(*ARGS, device=device)
    want_value, want = jax.jit(jax.value_and_grad(lambda *a: body(jnp, *a), argnums=(0, 1, 2)))(
        *(a.astype(np.float64) for a in ARGS))
    np.testing.assert_allclose(value, want_value, rtol=1e-5)
    for name, g in zip("xym", want):
        np.testing.assert_allclose(grads[name], g, rtol=1e-4, atol=1e-4 * np.abs(g).max())


def _reductions(graph, target):
    """Per reducing tasklet of the plan, how many values it sums."""
    p = plan(graph, {}, target)
    return [len(p.graph.writes(s.tasklet.name)) for k in p.kernels for s in k.all_steps
            if s.loop and all(w.memlet.accumulate for w in s.writes)]


@pytest.mark.parametrize("target", [backends.cpu.TARGET, backends.vulkan.LAVAPIPE, backends.vulkan.TARGET], ids=["cpu", "lavapipe", "gpu"])
def test_the_gradients_of_pair_sums_are_one_loop_per_side(target):
    """n-body's reverse pass sums, per body, the terms of its x, y and m
    gradients over the other bodies, all built on one distance: one tasklet
    summing three values, once along rows and once along columns."""
    program = _program(_pairs)
    graph = program.backward_graph()
    sums = _reductions(graph, target)
    assert sums.count(3) == 2, sums


def test_pair_sums_gradients_match_jax(device):
    """And the kernel's comment names the sums its loop holds."""
    program = _program(_pairs)
    _check(program, _pairs, device)
    assert "summing also" in program.slang_source(device=device)


def test_a_sum_reading_another_stays_apart(device):
    """The second sum reads the first's result: merged, it would run before
    its input exists.  Neither row of reductions merges across that path."""
    program = _program(_dependent)
    graph = program.backward_graph()
    p = plan(graph, {}, lowering.backends.of(device).target())
    for k in p.kernels:
        for s in k.all_steps:
            reads = {a for a, _ in p.graph.reads(s.tasklet.name)}
            writes = {a for a, _ in p.graph.writes(s.tasklet.name)}
            assert not reads & writes
    _check(program, _dependent, device)


def test_sums_reading_nothing_in_common_stay_apart():
    """Two sums over the same domain of different arrays share no load and no term."""
    def program(a: sd.f32[N, N], b: sd.f32[N, N]):
        return np.sum(np.sum(a, axis=1) * np.sum(b, axis=1))
    graph = ir.trace(program)
    assert max(_reductions(graph, backends.cpu.TARGET)) == 1
