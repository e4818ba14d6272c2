"""The reverse pass of a maximum tests ``x == max(x)`` and divides by the count
of such ``x`` (JAX's tie split).  Both tests must read the very bits the
maximum reduced: a recomputed ``x`` rounds as its kernel associates it (and a
GPU compiler contracts FMAs per kernel), so no element need equal the maximum,
and the count of 0 makes every gradient ``0 / 0`` (issue 29: a Gaussian mixture's
logsumexp gave NaN gradients on lavapipe, right values on cpu and numpy).

Two independent checks:
* the plan of every target symdiff generates code for (present here or not)
  is read: every equality test against a stored maximum compares a plain load
  of what the maximum itself loaded (``lowering.inlining.exact_reads``);
* the program runs on every device present, in the GPU kernels' form on
  lavapipe and with everything recomputed that can be, against JAX in float64.
"""
# (no ``from __future__ import annotations``: the programs' shape annotations close over local sizes)
import math
import sys
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import pytest
import sympy

import symdiff as sd
from symdiff.lowering import backends
from symdiff.lowering.plan import plan

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.fuzz.check import gpu_form, recompute_everything  # noqa: E402

N, K, D = 40, 4, 3


def gmm(x: sd.f32[N, D], mu: sd.f32[K, D], logsig: sd.f32[K, D], logit: sd.f32[K]):
    d = (x[:, None, :] - mu[None, :, :]) / np.exp(logsig)[None]
    logp = -0.5 * np.sum(d ** 2, axis=-1) - np.sum(logsig, axis=-1) - 0.5 * x.shape[1] * math.log(2 * math.pi)
    logw = logit - np.max(logit)
    logw = logw - np.log(np.sum(np.exp(logw)))
    a = logp + logw
    m = np.max(a, axis=1, keepdims=True)
    return -np.mean(m[:, 0] + np.log(np.sum(np.exp(a - m), axis=1)))


def gmm_jax(jnp, x, mu, logsig, logit):
    d = (x[:, None, :] - mu[None, :, :]) / jnp.exp(logsig)[None]
    logp = -0.5 * jnp.sum(d ** 2, axis=-1) - jnp.sum(logsig, axis=-1) - 0.5 * x.shape[1] * math.log(2 * math.pi)
    logw = jax_log_softmax(jnp, logit)
    a = logp + logw
    m = jnp.max(a, axis=1, keepdims=True)
    return -jnp.mean(m[:, 0] + jnp.log(jnp.sum(jnp.exp(a - m), axis=1)))


def jax_log_softmax(jnp, v):
    v = v - jnp.max(v)
    return v - jnp.log(jnp.sum(jnp.exp(v)))


def inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    shapes = {"x": (N, D), "mu": (K, D), "logsig": (K, D), "logit": (K,)}
    return {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}


@pytest.fixture(scope="module")
def program():
    return sd.differentiable_program(gmm)


@pytest.fixture(scope="module")
def reference():
    """Value and gradients by JAX in float64, and JAX float32's own error (the bound's unit)."""
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    xs = inputs()
    f = jax.value_and_grad(lambda *a: gmm_jax(jnp, *a), argnums=(0, 1, 2, 3))
    v64, g64 = f(*(np.float64(xs[n]) for n in xs))
    v32, g32 = f(*(xs[n] for n in xs))
    ref = {"value": np.float64(v64), **{n: np.asarray(g) for n, g in zip(xs, g64)}}
    jax32 = {"value": np.float64(v32), **{n: np.asarray(g, np.float64) for n, g in zip(xs, g32)}}
    return ref, jax32


def assert_matches_jax(got: dict, ref: dict, jax32: dict) -> None:
    """Every element finite and within 8x JAX float32's worst error on the same
    inputs (at least 4 float32 ulps of the quantity's magnitude)."""
    for name, want in ref.items():
        have = np.asarray(got[name], np.float64)
        assert np.all(np.isfinite(have)), f"{name}: {np.size(have) - np.isfinite(have).sum()} non-finite"
        scale = max(float(np.max(np.abs(want))), 1e-30)
        jax_err = float(np.max(np.abs(jax32[name] - want)))
        bound = 8 * max(jax_err, 4 * np.finfo(np.float32).eps * scale)
        err = np.abs(have - want)
        worst = np.unravel_index(np.argmax(err), np.shape(err)) if np.ndim(err) else ()
        assert float(np.max(err)) <= bound, f"{name}{list(worst)}: |error| {float(np.max(err)):.3g} > {bound:.3g}"


def _run(program, device: str) -> dict:
    value, grads = program.value_and_grad(*inputs().values(), device=device)
    return {"value": value, **grads}


def test_numpy_device_matches_jax(program, reference):
    assert_matches_jax(_run(program, "numpy"), *reference)


@pytest.mark.parametrize("form", ["own", "gpu-form", "recompute"])
def test_slang_devices_match_jax(program, reference, device, form):
    """The target's own plan, a hardware GPU's plan (workgroup reductions,
    recomputed transcendentals) and the tightest memory budget's (everything
    recomputed where it is read)."""
    if form == "gpu-form" and device == "cpu":
        pytest.skip("the CPU device cannot run workgroup barriers")
    with {"own": nullcontext, "gpu-form": gpu_form, "recompute": recompute_everything}[form]():
        assert_matches_jax(_run(program, device), *reference)


def _maximum_reads(graph, accesses) -> set:
    """The versions the value of every max/min writer of ``accesses`` loads."""
    loads = set()
    for access in accesses:
        for writer, w in graph.writers(access):
            t = graph.node(writer)
            reads = {m.connector: a for a, m in graph.reads(writer)}
            by_symbol = {sym: c for c, sym in t.inputs.items()}
            loads |= {reads[by_symbol[s]] for s in t.body[w.connector].free_symbols if s in by_symbol}
    return loads


@pytest.mark.parametrize("target", [backends.cpu.TARGET, backends.vulkan.TARGET, backends.vulkan.LAVAPIPE, backends.cuda.TARGET],
                         ids=lambda t: t.name + ("-software" if t is backends.vulkan.LAVAPIPE else ""))
@pytest.mark.parametrize("gpu_choices", [False, True], ids=["own", "gpu-form"])
def test_tie_tests_load_what_the_maximum_reduced(program, target, gpu_choices):
    """In every planned graph, each equality test against a stored maximum
    compares one plain load with another, from a version the maximum's own
    value loaded: no kernel recomputes the tested value."""
    from dataclasses import replace
    if gpu_choices:
        target = replace(target, workgroup_reductions=True, recompute_transcendentals=True)
    graph = plan(program.backward_graph(), {}, target).graph
    extrema = {a.id for a in graph.access_nodes() if graph.accumulation(a.id) in ("max", "min")}
    tests = 0
    for t in graph.tasklets():
        reads = {m.connector: (a, m.index) for a, m in graph.reads(t.name)}
        read_extrema = {c for c, (a, _) in reads.items() if a in extrema}
        if not read_extrema:
            continue
        by_symbol = {sym: c for c, sym in t.inputs.items()}
        for body in t.body.values():
            for test in body.atoms(sympy.Eq):
                tested = {by_symbol[s] for s in test.free_symbols if s in by_symbol}
                against = tested & read_extrema
                if not against:
                    continue
                tests += 1
                # ordering(x, result) == 0: two symbols, nothing computed on either side
                assert all(isinstance(a, sympy.Symbol) for a in test.lhs.args), (t.name, test)
                loaded = {reads[c][0] for c in tested - against}
                assert loaded <= _maximum_reads(graph, {reads[c][0] for c in against}), (t.name, test, loaded)
    assert tests >= 4, f"only {tests} tie tests found: the check saw nothing to check"
