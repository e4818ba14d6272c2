"""How ``symdiff.loop_runtime`` runs a loop's iterations on a device: recorded into one
command encoder through ``Executable.record`` (submitted every ``RECORDED_CALLS`` calls and
before any host read), or call by call where index checks must be read after each call.
Gradients against ``jax.lax.fori_loop`` (float64) through binomial checkpointing, where the
reverse pass records advances and adjoints from stored states."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import symdiff as sd
from symdiff import loop_runtime
from symdiff.lowering import runtime

jax.config.update("jax_enable_x64", True)


def _step(i, state):
    """A nonlinear step that reads its index, so the reverse pass needs the states and ``i``."""
    u, v = state
    u = u + 0.05 * np.tanh(v) * (1 + 0.01 * i)
    v = v - 0.05 * u * u
    return u, v


def _step_jax(i, state):
    u, v = state
    u = u + 0.05 * jnp.tanh(v) * (1 + 0.01 * i)
    return u, v - 0.05 * u * u


def _program(steps, checkpoints, spec):
    @sd.differentiable_program
    def f(u: spec[16], v: spec[16]):
        u, v = sd.fori_loop(0, steps, _step, (u, v), checkpoints=checkpoints)
        return np.sum(u * v)
    return f


@pytest.fixture
def counted(monkeypatch):
    """How many calls ``Executable.record`` and ``Executable.__call__`` ran."""
    count = {"record": 0, "call": 0}
    record, call = runtime.Executable.record, runtime.Executable.__call__

    def counting_record(self, *args, **kwargs):
        count["record"] += 1
        return record(self, *args, **kwargs)

    def counting_call(self, *args, **kwargs):
        count["call"] += 1
        return call(self, *args, **kwargs)
    monkeypatch.setattr(runtime.Executable, "record", counting_record)
    monkeypatch.setattr(runtime.Executable, "__call__", counting_call)
    return count


@pytest.mark.parametrize("checkpoints", [None, 3])
def test_recorded_iterations_match_jax(slang_device, counted, monkeypatch, checkpoints):
    monkeypatch.setattr(loop_runtime, "RECORDED_CALLS", 7)  # several submissions per run
    single = slang_device == "vulkan"  # float64 tanh is wrong on lavapipe
    tol = dict(rtol=2e-4, atol=2e-5) if single else dict(rtol=1e-10, atol=1e-12)
    steps = 40
    r = np.random.default_rng(1)
    u, v = r.uniform(-1, 1, 16), r.uniform(-1, 1, 16)
    program = _program(steps, checkpoints, sd.f32 if single else sd.f64)
    dtype = np.float32 if single else np.float64
    value, grads = program.value_and_grad(u.astype(dtype), v.astype(dtype), device=slang_device)

    def loss(u, v):
        u, v = jax.lax.fori_loop(0, steps, _step_jax, (u, v))
        return jnp.sum(u * v)
    want_value, (gu, gv) = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))(u, v)
    np.testing.assert_allclose(value, want_value, rtol=tol["rtol"])
    np.testing.assert_allclose(grads["u"], gu, **tol)
    np.testing.assert_allclose(grads["v"], gv, **tol)
    # forward, plus the reverse pass's adjoints and (binomial checkpointing) recomputed advances
    assert counted["record"] >= 2 * steps
    assert counted["call"] <= 8  # the program's own stages, not the iterations


def _gather_step(i, state):
    x, idx = state
    return x + 0.5 * x[idx], idx + 1  # idx walks out of x after a few iterations


def test_a_body_with_checked_indices_runs_call_by_call_and_raises(slang_device, counted):
    @sd.differentiable_program
    def f(x: sd.f32[8], idx: sd.i32[8]):
        x, idx = sd.fori_loop(0, 6, _gather_step, (x, idx))
        return np.sum(x)
    x = np.arange(8, dtype=np.float32)
    with pytest.raises(sd.IndexOutOfRange):
        f(x, np.arange(8, dtype=np.int32), device=slang_device)
    assert counted["record"] == 0
    np.testing.assert_allclose(f(x, np.zeros(8, np.int32), device=slang_device),
                               f(x, np.zeros(8, np.int32), device="numpy"), rtol=1e-6)


def test_the_state_going_in_is_uploaded_once(slang_device, monkeypatch):
    """Binomial checkpointing recomputes from the stored state going in many times; that state
    is held in a device buffer, so no recorded call uploads it again (an encoder's uploads stay
    in slangpy's upload heap until it is submitted)."""
    uploads = []
    record = runtime.Executable.record

    def counting(self, enc, inputs, sizes=None):
        uploads.extend(k for k, v in inputs.items() if k[0] == "s" and k[1:].isdigit() and isinstance(v, np.ndarray))
        return record(self, enc, inputs, sizes)
    monkeypatch.setattr(runtime.Executable, "record", counting)
    u = np.linspace(-1, 1, 16, dtype=np.float32)
    _program(30, 2, sd.f32).value_and_grad(u, u[::-1].copy(), device=slang_device)
    assert len(uploads) <= 2  # the forward's first call (both state elements), nothing in the reverse
