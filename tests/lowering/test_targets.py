"""Colliding updates take the form their target needs, on every target symdiff
generates code for, whether or not its device exists here (issue 18: CUDA got
unsynchronised read-modify-writes, and no test could see it without a GPU).

Three independent checks:
* ``collisions`` enumerates every point of every kernel of a plan and finds
  any element that two threads of one kernel write without an atomic: the
  planner's own exclusivity reasoning is not trusted.
* The generated Slang of each target (``lowering.targets``) is read for the
  form of each atomic update: the CPU device's plain update, a hardware
  atomic add, or a compare-and-swap loop; never a ``__target_switch`` that
  leaves the choice to Slang's capability names.
* Where slangpy's wheel carries the Slang compiler library, the CUDA module
  is compiled to CUDA source (``slang_compiler``): it must compile, and its
  float max/min must not be an ``atomicMax`` that nvrtc has no float form of.
Stress tests on the devices present then make a missing atomic visible:
1M updates into 16 bins against numpy's ``ufunc.at``.
"""
# (no ``from __future__ import annotations``: the programs' shape annotations close over local sizes)
import re

import numpy as np
import pytest
import sympy

from symdiff import lowering
import slang_compiler
import symdiff as sd
from symdiff.ir.graph import DataflowGraph
from symdiff.lowering import backends, targets
from symdiff.lowering.codegen import buffer_name, generate
from symdiff.lowering.deterministic import owner_computes
from symdiff.ir.index_analysis import uses_connectors
from symdiff.lowering.plan import plan
from symdiff.lowering.plan_types import LoweringError, Plan
from lowering_graphs import G, chain, histogram, i, strided_sum
from test_cpu_program_entry import fills_between_kernels


def conv2d(N: int, H: int, W: int, Ci: int, Co: int, K: int):
    """The convolution of issue 18: overlapping patches, loops over output positions."""
    def conv(x: sd.f32[N, H, W, Ci], w: sd.f32[K, K, Ci, Co]):
        Ho, Wo = H - K + 1, W - K + 1
        out = np.zeros((N, Ho, Wo, Co), dtype=np.float32)
        for r in range(Ho):
            for c in range(Wo):
                patch = x[:, r:r + K, c:c + K, :]
                out[:, r, c, :] = np.sum(patch[..., None] * w[None], axis=(1, 2, 3))
        return np.sum(out * out)
    return sd.differentiable_program(conv)


def smooth():
    """A stencil whose reverse pass adds three shifted contributions into one gradient."""
    def f(a: sd.f32[64]):
        out = np.zeros_like(a)
        for i in sd.map[1:63]:
            out[i] = a[i - 1] + 2 * a[i] + a[i + 1]
        return np.sum(out * out)
    return sd.differentiable_program(f)


def scatter_add():
    """Gradient of a gather with repeated indices: a scatter-add."""
    def f(t: sd.f32[8], idx: sd.i32[64]):
        return np.sum(np.tanh(t[idx]))
    return sd.differentiable_program(f)


PROGRAMS = {
    "conv2d_overlapping": lambda: conv2d(2, 6, 6, 2, 3, 2).backward_graph(wrt=["x", "w"]),
    "conv2d_issue_small": lambda: conv2d(1, 4, 4, 1, 1, 2).backward_graph(wrt=["x", "w"]),
    "stencil_reverse": lambda: smooth().backward_graph(),
    "gather_reverse": lambda: scatter_add().backward_graph(wrt=["t"]),
    "histogram_sum": lambda: histogram("sum", n=300)[0],
    "histogram_max": lambda: histogram("max", n=300)[0],
    "histogram_min": lambda: histogram("min", n=300)[0],
    "strided_sum": lambda: strided_sum(300)[0],
    "max_min_prod_between_kernels": lambda: fills_between_kernels(n=300)[0],  # issue 10 bug 9's CUDA failures
}


def _points(ranges) -> tuple[list, np.ndarray]:
    shape = [int(e) - int(b) for _, b, e in ranges]
    grid = np.indices(shape).reshape(len(ranges), -1) if ranges else np.zeros((0, 1), int)
    return [grid[n] + int(b) for n, (_, b, _) in enumerate(ranges)], grid


def collisions(p: Plan) -> list[str]:
    """Non-atomic writes by which two threads of one kernel write one element."""
    g: DataflowGraph = p.graph
    found = []
    for kernel in p.kernels:
        writes: dict[str, list[np.ndarray]] = {}
        for step in kernel.steps:
            t = step.tasklet
            for w in step.writes:
                if w.mode == "atomic":
                    continue
                if uses_connectors(w.memlet.index, t):
                    found.append(f"{kernel.name}: {t.name} writes {w.access} at an index read at run time, "
                                 "without an atomic")
                    continue
                ranges = step.parallel + (step.loop if w.memlet.accumulate is None else ())
                values, grid = _points(ranges)
                syms = [s for s, _, _ in ranges]
                thread = np.ravel_multi_index(grid[:len(step.parallel)], kernel.box) if step.parallel else \
                    np.zeros(grid.shape[1], int)
                index = [np.broadcast_to(np.asarray(v), thread.shape)
                         for v in sympy.lambdify(syms, list(w.memlet.index) or [0], "numpy")(*values)]
                keep = np.broadcast_to(np.asarray(sympy.lambdify(syms, t.condition, "numpy")(*values)), thread.shape)
                writes.setdefault(w.access, []).append(np.stack(index + [thread])[:, keep])
        for access, parts in writes.items():
            rows = np.unique(np.concatenate(parts, axis=1).T, axis=0)  # distinct (element, thread)
            elements, counts = np.unique(rows[:, :-1], axis=0, return_counts=True)
            if (counts > 1).any():
                found.append(f"{kernel.name}: {counts.max()} threads write {access} at "
                             f"{tuple(elements[counts.argmax()])} without an atomic")
    return found


def atomic_helper(source: str, op: str, storage: str = "float") -> str:
    start = source.index(f"void atomic_{op}(RWStructuredBuffer<{storage}> buf")
    return source[start:source.index("\n}", start)]


@pytest.fixture(scope="module", params=sorted(PROGRAMS))
def planned(request) -> tuple[str, Plan]:
    return request.param, plan(PROGRAMS[request.param](), {})


def test_no_two_threads_write_one_element_without_an_atomic(planned):
    name, p = planned
    assert collisions(p) == []
    if name.startswith(("conv2d", "histogram", "gather", "strided", "max_min")):  # these collide by construction
        assert any(w.mode == "atomic" for k in p.kernels for s in k.steps for w in s.writes)


@pytest.mark.parametrize("target", sorted(targets.TARGETS))
def test_each_target_gets_its_own_form_of_colliding_updates(planned, target, monkeypatch):
    _, p = planned
    monkeypatch.setattr(backends.slangpy_base.SlangpyBackend, "device",
                        lambda backend: pytest.fail("generation created a device"))
    source = generate(p, target).source  # the kind is enough: CUDA's text is checked without a GPU
    t = targets.TARGETS[target]
    assert "__target_switch" not in source
    atomic = [(s, w) for k in p.kernels for s in k.steps for w in s.writes if w.mode == "atomic"]
    for _, w in atomic:
        op = w.memlet.accumulate
        assert f"atomic_{op}({buffer_name(w.access)}, " in source
        body = atomic_helper(source, op)
        if t.sequential:
            assert "Interlocked" not in body
        elif op == "sum":
            assert "InterlockedAdd(buf[i], v);" in body
        else:  # no float atomic max/min on CUDA, and NaN-dropping ones elsewhere
            assert "InterlockedCompareExchangeFloatBitwise" in body and "InterlockedM" not in body


@pytest.mark.skipif(not slang_compiler.available(), reason="no Slang compiler library in slangpy's wheel")
def test_cuda_modules_compile_to_cuda_source(planned):
    _, p = planned
    module = generate(p, "cuda")
    cuda = slang_compiler.compile_source(module.source, "cuda", module.entry_points(False))
    text = "\n".join(cuda.values())
    ops = {w.memlet.accumulate for k in p.kernels for s in k.steps for w in s.writes if w.mode == "atomic"}
    if "sum" in ops:
        assert "atomicAdd((&" in text
    if ops & {"max", "min", "prod"}:
        assert "atomicCAS" in text
    assert "atomicMax((&" not in text and "atomicMin((&" not in text  # nvrtc: no float overloads


def test_the_planner_keeps_owner_computes_where_threads_own_their_elements():
    """The reverse of a stencil sums per thread (no atomics) after the deterministic rewrite."""
    p = plan(owner_computes(smooth().backward_graph()), {})
    assert collisions(p) == []
    assert not [w for k in p.kernels for s in k.steps for w in s.writes if w.mode == "atomic"]


@pytest.mark.parametrize("shape", [(2, 6, 6, 2, 3, 2), (1, 4, 4, 1, 1, 2)])  # issue 18's table
def test_overlapping_conv2d_gradients_match_jax(shape, device):
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)  # as tests/corpus.py
    jnp = jax.numpy
    N, H, W, Ci, Co, K = shape
    rng = np.random.default_rng(0)
    x = rng.normal(size=(N, H, W, Ci)).astype(np.float32)
    w = rng.normal(size=(K, K, Ci, Co)).astype(np.float32)
    _, grads = conv2d(*shape).value_and_grad(x, w, device=device)

    def reference(x, w):
        out = jnp.stack([jnp.stack([jnp.einsum("nhwc,hwcd->nd", x[:, r:r + K, c:c + K, :], w)
                                    for c in range(W - K + 1)], 1) for r in range(H - K + 1)], 1)
        return jnp.sum(out * out)
    want = jax.jit(jax.grad(reference, argnums=(0, 1)))(x.astype(np.float64), w.astype(np.float64))
    for name, ref in zip(("x", "w"), want):
        err = np.linalg.norm(grads[name] - np.asarray(ref)) / np.linalg.norm(np.asarray(ref))
        assert err < 1e-5, (name, err)


STRESS_N, STRESS_BINS = 1 << 20, 16
REFERENCE = {"sum": np.add, "max": np.maximum, "min": np.minimum}


@pytest.mark.parametrize("op", ["sum", "max", "min"])
def test_a_million_colliding_updates_into_16_bins(op, device):
    """Enough threads and collisions that a plain read-modify-write loses
    updates on a concurrent device (lavapipe runs both cores)."""
    graph, _ = histogram(op, n=STRESS_N, bins=STRESS_BINS)
    rng = np.random.default_rng(7)
    idx = rng.integers(0, STRESS_BINS, STRESS_N).astype(np.int32)
    # sums of ones are exact in any order; max/min of distinct values are exact
    w = np.ones(STRESS_N, np.float32) if op == "sum" else rng.permutation(STRESS_N).astype(np.float32)
    want = np.full(STRESS_BINS, {"sum": 0.0, "max": -np.inf, "min": np.inf}[op], np.float32)
    REFERENCE[op].at(want, idx, w)
    got = lowering.compile(graph, device=device)({"idx": idx, "w": w})["h"]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("target", sorted(targets.TARGETS))
def test_maths_helpers_are_the_targets_own(target):
    """The CPU device's polynomials only where the target asks for them (they
    were chosen by a ``__target_switch`` before)."""
    graph, _ = chain(64, ops=10)
    source = generate(plan(graph, {}), target).source
    assert ("cpu_exp(" in source) == targets.TARGETS[target].polynomial_math
    assert "float exp_f32(float x)" in source


@pytest.mark.parametrize("target", ["vulkan", "cuda"])
def test_colliding_float64_max_is_refused_where_threads_run_together(target):
    b = G("hist64", "float64").c("idx", (64,), "argument", "int32").c("w", (64,), "argument").c("h", (4,), "result")
    b.t("scatter", [(i, 0, 64)], b.s("w", "w"), {"w": ("w", (i,)), "q": ("idx", (i,))},
        ("h", (b.s("q", "idx"),)), "max", source="hist.py:3")
    p = plan(b.g, {})
    with pytest.raises(LoweringError, match=r"scatter \(hist.py:3\).*float64.*max"):
        generate(p, target)
    assert "buf[i] = maximum(buf[i], v);" in generate(p, "cpu").source


def test_long_loops_stay_loops_where_the_target_keeps_them():
    """lavapipe unrolls constant-trip loops at its first dispatch (15 s for a small
    MLP's first call): a row's, a reduction's and a matmul's loops carry
    ``[loop]`` there and nowhere else, and a register tile's loops stay unrollable."""
    def f(x: sd.f32[64, 32], w: sd.f32[32, 10]):
        z = x @ w
        return np.sum(np.log(np.sum(np.exp(z - np.max(z, axis=1, keepdims=True)), axis=1)))
    program = sd.differentiable_program(f)
    graph = program.backward_graph(["x", "w"])
    for target in (backends.cpu.TARGET, backends.vulkan.TARGET, backends.cuda.TARGET, backends.vulkan.LAVAPIPE):
        source = generate(plan(graph, {}), target).source
        kept = [line.strip() for line in source.splitlines() if "[loop] for" in line]
        if target.keep_loops:
            assert any("mm_r" in line for line in kept) and any("int r = " in line for line in kept), kept
        else:
            assert not kept
        # unrolled by Slang (register tiles) or by the backend compiler (GPU group tiles: [unroll])
        assert re.search(r"\[(ForceUnroll|unroll)\] for \(int mm_u", source), target.name
        assert "[loop] [ForceUnroll]" not in source and "[loop] [unroll]" not in source
