"""Which states a loop's reverse pass stores (symdiff.checkpoint_schedule through Loop.schedule):
chosen from the state's size and CHECKPOINT_BYTES, from ``checkpoints=``, or from the program's
memory_budget; the gradient is the same as JAX's float64 for every choice, and the body runs as
many times as the schedule says (the forward run plus the optimum's recomputations)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import symdiff as sd
from symdiff import checkpoint_schedule as cs
from test_checkpoint_schedule import optimum
from test_fori_loop import (NEWTON_C, NEWTON_X0, jacobi_2d_jax, jacobi_2d_step, newton_program, newton_with_jax,
                            skip_on_lavapipe)

jax.config.update("jax_enable_x64", True)


def cubic_step(t, state):
    """jacobi-2d with a cubic term: its reverse step reads the state (jacobi's alone does not)."""
    A, B = jacobi_2d_step(t, state)
    return A - 0.05 * A * A * A, B


def cubic_jax(A, B, steps):
    def step(t, state):
        A, B = state
        B = B.at[1:-1, 1:-1].set(0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1] + A[:-2, 1:-1]))
        A = A.at[1:-1, 1:-1].set(0.2 * (B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1] + B[:-2, 1:-1]))
        return A - 0.05 * A * A * A, B
    A, B = jax.lax.fori_loop(0, steps, step, (A, B))
    return jnp.sum(A * A * B)


def test_default_schedule_follows_the_state_size(monkeypatch):
    @sd.differentiable_program
    def f(a: sd.f64[100]):
        return np.sum(sd.fori_loop(0, 400, lambda i, s: s * 0.5, a))

    (loop,) = sd.loops.loops_of(f.graph)
    assert loop.state_bytes() == 800
    assert loop.schedule(400).kind == "store every state"            # 400 states of 800 bytes fit
    monkeypatch.setattr(sd.loops, "CHECKPOINT_BYTES", 60 * 800)
    assert (loop.schedule(400).kind, loop.schedule(400).slots) == ("binomial", 60)
    monkeypatch.setattr(sd.loops, "CHECKPOINT_BYTES", 100)
    assert loop.schedule(400).slots == 1                             # the state going in, at least


@pytest.mark.parametrize("slots", [1, 2, 3, 4, 10])
def test_checkpoints_give_jaxs_gradient_and_the_optimal_recomputation_count(slots, device):
    @sd.differentiable_program
    def jacobi_2d(A: sd.f64[6, 5], B: sd.f64[6, 5]):
        A, B = sd.fori_loop(0, 10, cubic_step, (A, B), checkpoints=slots)
        return np.sum(A * A * B)

    skip_on_lavapipe(device, "float64 stencils; the schedule is the same on every device (numpy and cpu run it)")
    rng = np.random.default_rng(1)
    A, B = rng.uniform(-1, 1, (6, 5)), rng.uniform(-1, 1, (6, 5))
    value, grads = jacobi_2d.value_and_grad(A, B, device=device)
    want, (gA, gB) = jax.jit(jax.value_and_grad(cubic_jax, argnums=(0, 1)), static_argnums=2)(A, B, 10)
    np.testing.assert_allclose(value, want, rtol=1e-12)
    np.testing.assert_allclose(grads["A"], gA, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(grads["B"], gB, rtol=1e-10, atol=1e-12)
    (stats,) = jacobi_2d.stats().values()
    schedule = cs.binomial(10, slots)
    # revolve's optimum counts every advance; the forward run made those up to the last stored state
    assert stats["loops"]["loop0"]["calls"] == 10 + optimum(10, slots - 1) - max(schedule.stored)


def test_while_loop_with_few_checkpoints_matches_jax():
    cube_root = newton_program(checkpoints=2)
    x0, c = NEWTON_X0, NEWTON_C
    with_jax, _ = newton_with_jax()

    value, grads = cube_root.value_and_grad(x0, c, device="numpy")
    want, (gx, gc) = jax.jit(jax.value_and_grad(with_jax, argnums=(0, 1)))(x0, c)
    np.testing.assert_allclose(value, want, rtol=1e-12)
    np.testing.assert_allclose(grads["c"], gc, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(grads["x0"], gx, atol=1e-9)
    assert "2 state slots" in str(cube_root.explain(device="numpy"))


def _jacobi_program(budget):
    @sd.differentiable_program(memory_budget=budget)
    def jacobi_2d(A: sd.f64[32, 32], B: sd.f64[32, 32]):
        A, B = sd.fori_loop(0, 60, cubic_step, (A, B))    # 16 KiB a state: 60 take 960 KiB
        return np.sum(A * A * B)
    return jacobi_2d


def test_memory_budget_chooses_the_states_stored(slang_device):
    rng = np.random.default_rng(2)
    A, B = rng.uniform(-1, 1, (32, 32)), rng.uniform(-1, 1, (32, 32))
    want, (gA, gB) = jax.jit(jax.value_and_grad(cubic_jax, argnums=(0, 1)), static_argnums=2)(A, B, 60)
    calls = {}
    for budget in (4 * 2 ** 20, 200 * 2 ** 10):
        program = _jacobi_program(budget)
        value, grads = program.value_and_grad(A, B, device=slang_device)
        np.testing.assert_allclose(value, want, rtol=1e-12)
        np.testing.assert_allclose(grads["A"], gA, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(grads["B"], gB, rtol=1e-10, atol=1e-12)
        text = str(program.explain(device=slang_device))
        assert "test_loop_checkpoints.py:" in text and "memory_budget leaves" in text
        (stats,) = program.stats().values()
        calls[budget] = stats["loops"]["loop0"]["calls"], text
        loop = stats["loops"]["loop0"]
        assert loop["held_state_bytes"] + loop["peak_bytes"] + loop["reverse_step_peak_bytes"] \
            + program.memory_plan().peak_bytes <= budget
    assert calls[4 * 2 ** 20][0] == 60 and "every state stored" in calls[4 * 2 ** 20][1]
    slots = int(calls[200 * 2 ** 10][1].split(" state slots")[0].rsplit(" ", 1)[1])
    assert 1 <= slots < 200 * 2 ** 10 // (2 * 32 * 32 * 8)           # the stage's buffers take their share
    assert calls[200 * 2 ** 10][0] == 60 + cs.binomial(60, slots).recomputed()
    assert stats["loops"]["loop0"]["held_state_bytes"] == slots * 2 * 32 * 32 * 8
    assert "binomial checkpointing" in calls[200 * 2 ** 10][1]


def test_a_budget_without_room_for_one_state_is_refused_naming_the_loop(slang_device):
    A = np.ones((32, 32))
    roomy = _jacobi_program(4 * 2 ** 20)
    roomy.value_and_grad(A, A, device=slang_device)
    stage = roomy.memory_plan().peak_bytes
    with pytest.raises(sd.MemoryBudgetError, match=r"test_loop_checkpoints.py:\d+: the reverse pass of loop0"):
        _jacobi_program(stage + 1000).value_and_grad(A, A, device=slang_device)


def test_explain_shows_the_default_choice():
    @sd.differentiable_program
    def f(a: sd.f64[8]):
        return np.sum(sd.fori_loop(0, 5, lambda i, s: s * 0.5 + s * s, a))

    text = str(f.explain(device="numpy"))
    assert "loop0 (test_loop_checkpoints.py:" in text and "64-byte state" in text
    assert "CHECKPOINT_BYTES" in text and "every state stored" in text


def test_checkpoints_and_checkpoint_every_together_are_refused():
    def program(a):
        return np.sum(sd.fori_loop(0, 3, lambda i, s: s * 2, a, checkpoints=2, checkpoint_every=2))

    with pytest.raises(sd.ir.TraceError, match=r"test_loop_checkpoints.py:\d+.*not both"):
        sd.trace(program, sd.f64[4])
    with pytest.raises(sd.ir.TraceError, match=r"checkpoints must be a positive int"):
        sd.trace(lambda a: sd.fori_loop(0, 3, lambda i, s: s, a, checkpoints=0), sd.f64[4])


def test_a_linear_step_stores_no_state_and_recomputes_nothing(slang_device):
    """jacobi's reverse step reads only the cotangent (a constant Jacobian), as JAX finds too:
    whatever the budget, nothing is stored or recomputed."""
    @sd.differentiable_program(memory_budget=200 * 2 ** 10)
    def jacobi_2d(A: sd.f64[32, 32], B: sd.f64[32, 32]):
        A, B = sd.fori_loop(0, 60, jacobi_2d_step, (A, B))
        return np.sum(A * A * B)

    rng = np.random.default_rng(3)
    A, B = rng.uniform(-1, 1, (32, 32)), rng.uniform(-1, 1, (32, 32))
    value, grads = jacobi_2d.value_and_grad(A, B, device=slang_device)
    want, (gA, gB) = jax.jit(jax.value_and_grad(jacobi_2d_jax, argnums=(0, 1)), static_argnums=2)(A, B, 60)
    np.testing.assert_allclose(grads["A"], gA, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(grads["B"], gB, rtol=1e-10, atol=1e-12)
    (stats,) = jacobi_2d.stats().values()
    assert stats["loops"]["loop0"]["calls"] == 60
    assert stats["loops"]["loop0"]["held_state_bytes"] == 2 * 32 * 32 * 8
    assert "does not read the state" in str(jacobi_2d.explain(device=slang_device))
