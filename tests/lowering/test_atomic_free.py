"""Indirect accesses and atomic-free reverse passes on every device.

Gather/scatter programs (embedding bag, histograms through np.add.at and
sd.map, a gather inside sd.map) agree with JAX (float64) with and without
``deterministic=True``; stencil backward kernels and deterministic programs
contain no atomic operation on a parallel device, and on the CPU device (whose
colliding updates already run in one order) deterministic programs keep the
atomic form's kernels; deterministic gradients are bitwise reproducible on
Vulkan where the atomic ones are not."""
import re

import numpy as np
import pytest

from symdiff import ir
from symdiff import lowering
import symdiff as sd
from corpus import CASES, assert_matches_jax, build_program
from symdiff.lowering import backends, bounds_check
from symdiff.lowering.codegen import generate
from symdiff.lowering.deterministic import check_atomic_free, owner_computes
from symdiff.lowering.plan import plan

V, D, B, L, N, BINS = 12, 4, 5, 3, 40, 6
ALL_DEVICES = ["numpy"] + [pytest.param(d, marks=[pytest.mark.vulkan] if d == "vulkan" else [])
                           for d in ("cpu", "vulkan")]


def _bag(emb: sd.f32[V, D], idx: sd.i32[B, L]):
    return np.sum(np.tanh(emb[idx].sum(axis=1)) ** 2)


def _hist_add_at(v: sd.f32[N], idx: sd.i32[N]):
    out = np.zeros(BINS, dtype=np.float32)
    np.add.at(out, idx, v * v)
    return np.sum(np.sin(out))


def _hist_map(v: sd.f32[N], idx: sd.i32[N]):
    out = np.zeros(BINS, dtype=np.float32)
    for i in sd.map[0:N]:
        out[idx[i]] += v[i] * v[i]
    return np.sum(np.sin(out))


def _map_gather(emb: sd.f32[V, D], idx: sd.i32[B]):
    out = np.zeros((B, D), dtype=np.float32)
    for i, j in sd.map[0:B, 0:D]:
        out[i, j] = emb[idx[i], j] * emb[idx[i], j]
    return np.sum(np.tanh(out))


def _jax(name):
    import jax.numpy as jnp
    hist = lambda v, idx: jnp.sum(jnp.sin(jnp.zeros(BINS).at[idx].add(v * v)))  # noqa: E731
    return {"bag": lambda emb, idx: jnp.sum(jnp.tanh(emb[idx].sum(axis=1)) ** 2),
            "hist_add_at": hist, "hist_map": hist,
            "map_gather": lambda emb, idx: jnp.sum(jnp.tanh(emb[idx] ** 2))}[name]


PROGRAMS = {"bag": _bag, "hist_add_at": _hist_add_at, "hist_map": _hist_map, "map_gather": _map_gather}
_compiled: dict = {}


def program(name: str, deterministic: bool) -> sd.DifferentiableProgram:
    """One program per variant for the whole module: kernels compile once."""
    key = (name, deterministic)
    if key not in _compiled:
        _compiled[key] = sd.differentiable_program(PROGRAMS[name], deterministic=deterministic)
    return _compiled[key]


def inputs(name: str) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    if name.startswith("hist"):
        return rng.standard_normal(N).astype(np.float32), rng.integers(0, BINS, N).astype(np.int32)
    idx_shape = (B, L) if name == "bag" else (B,)
    return rng.standard_normal((V, D)).astype(np.float32), rng.integers(0, V, idx_shape).astype(np.int32)


def jax_grad(name: str, x: np.ndarray, idx: np.ndarray) -> np.ndarray:
    import jax
    jax.config.update("jax_enable_x64", True)
    return np.asarray(jax.jit(jax.grad(_jax(name)))(x.astype(np.float64), idx))


@pytest.mark.parametrize("deterministic", [False, True], ids=["atomic", "deterministic"])
@pytest.mark.parametrize("device", ALL_DEVICES)
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_indirect_programs_match_jax(name, device, deterministic):
    if device != "numpy" and device not in lowering.available_devices():
        pytest.skip(f"no {device} device here")
    x, idx = inputs(name)
    p = program(name, deterministic)
    grad = p.grad(x, idx, device=device)[p.arg_names[0]]
    ref = jax_grad(name, x, idx)
    assert np.linalg.norm(grad - ref) <= 1e-4 * max(1.0, np.linalg.norm(ref)), (name, device)
    if device == "numpy" or not deterministic:
        return
    if backends.of(device).orders_colliding_writes():  # no owner-computes loops where the order is fixed already
        assert p.slang_source(device=device) == program(name, False).slang_source(device=device)
    else:
        assert not _atomic_ops(p.slang_source(device=device))


def _atomic_ops(source: str) -> list[str]:
    """Atomics on results; the index check's flag (an error code, lowering.bounds_check) is not one."""
    source = re.sub(rf"void {bounds_check.HELPER_NAME}\(.*?\n}}", "", source, flags=re.S)
    return re.findall(r"\bInterlocked\w*\(|\batomic_(?:sum|max|min|prod)\(", source)


STENCILS = [c for c in CASES if c.name in ("jacobi_1d", "jacobi_2d", "map_stencil", "map_2d")]


@pytest.mark.parametrize("case", STENCILS, ids=[c.name for c in STENCILS])
def test_stencil_backward_kernels_are_atomic_free(case, device):
    p = build_program(sd, case)
    inputs = case.inputs()
    value, grads = p.value_and_grad(*inputs.values(), wrt=case.wrt, device=device)
    assert_matches_jax(case, value, grads, inputs)
    assert not _atomic_ops(p.slang_source(wrt=case.wrt, device=device))
    graph = p.backward_graph(case.wrt)
    gathers = [t for t in graph.tasklets() if t.meta.get("strategy") == "gather"]
    assert gathers and all(m.accumulate is None for t in gathers for _, m in graph.writes(t.name))


def test_atomic_scatter_is_reported_and_deterministic_one_is_not():
    """For a parallel target (no device needed to generate its text) the plain program scatters with an
    atomic; its deterministic rewrite has none, and the CPU device does not ask for the rewrite."""
    graph = program("hist_map", False).backward_graph()
    target = backends.vulkan.LAVAPIPE
    assert _atomic_ops(generate(plan(graph, {}, target), target).source)
    assert not _atomic_ops(generate(plan(owner_computes(graph), {}, target), target).source)
    assert not backends.of("vulkan").orders_colliding_writes() and backends.of("cpu").orders_colliding_writes()


def test_check_atomic_free_names_the_tasklet():
    g = sd.trace(_hist_map, sd.f32[N], sd.i32[N])
    with pytest.raises(lowering.LoweringError, match=r"map_accumulate .*test_atomic_free.py"):
        check_atomic_free(plan(g, {}))


@pytest.mark.vulkan
def test_deterministic_gradients_are_bitwise_reproducible_on_vulkan():
    if "vulkan" not in lowering.available_devices():
        pytest.skip("no vulkan device here")
    n, bins = 1 << 20, 2

    def scatter(v: sd.f32[n], idx: sd.i32[n]):
        out = np.zeros(bins, dtype=np.float32)
        np.add.at(out, idx, v)
        return np.sum(out * out)

    rng = np.random.default_rng(0)
    v = (rng.standard_normal(n) * np.exp(3 * rng.standard_normal(n))).astype(np.float32)
    idx = rng.integers(0, bins, n).astype(np.int32)
    runs = {}
    for det in (False, True):
        p = sd.differentiable_program(scatter, deterministic=det)
        runs[det] = {p.value_and_grad(v, idx, device="vulkan")[0].tobytes() for _ in range(4)}
    assert len(runs[True]) == 1
    if len(runs[False]) == 1:
        pytest.skip("the atomic version happened to be reproducible on this machine too")


@pytest.mark.parametrize("device", ALL_DEVICES)
def test_host_index_arguments_are_checked_by_default(device):
    p = sd.differentiable_program(_bag)
    emb, idx = inputs("bag")
    idx[0, 0] = -1
    with pytest.raises(ir.IndexOutOfRange, match=r"argument 'idx' holds -1 at idx\[0, 0\]"):
        p.grad(emb, idx, device=device)


def test_check_bounds_names_argument_and_index():
    p = sd.differentiable_program(_bag, check_bounds=True)
    emb, idx = inputs("bag")
    idx[2, 1] = V + 3
    with pytest.raises(ir.IndexOutOfRange, match=rf"argument 'idx' holds {V + 3} at idx\[2, 1\].*axis 0 of 'emb'"):
        p.grad(emb, idx, device="numpy")
