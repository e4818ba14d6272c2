"""Cooperative reductions and rows (lowering.workgroups): a workgroup's lanes share
a point's loops and combine their partial results in a fixed tree.

Every program is checked against the numpy device (the IR interpreter in
float64) on each GPU target present (lavapipe here, CUDA where a GPU is), and
the generated text of every target is read for where the form is chosen: the
CPU device keeps its per-thread loops.
"""
# (no ``from __future__ import annotations``: the programs' shape annotations close over local sizes)
import contextlib

import numpy as np
import pytest

from dataclasses import replace

from symdiff import lowering
import slang_compiler
import symdiff as sd
from symdiff.lowering import backends
from symdiff.lowering.codegen import generate
from symdiff.lowering.plan import plan
from symdiff.lowering.rowfusion import RowKernel

COOPERATIVE = "a workgroup of 256 threads"
ALONG = "1 a workgroup of 256 threads"      # a workgroup per point, sharing the point's loop
ACROSS = "32 a workgroup of 256 threads"    # 32 neighbouring points a workgroup, 8 lanes each


def program(fn):
    return sd.differentiable_program(fn)


def logsumexp_rows(R: int, C: int):
    def f(x: sd.f32[R, C]):
        m = np.max(x, axis=1, keepdims=True)
        return np.sum(np.log(np.sum(np.exp(x - m), axis=1)) + m[:, 0])
    return program(f)


def layer_norm(R: int, C: int):
    def f(x: sd.f32[R, C], g: sd.f32[C], b: sd.f32[C]):
        mu = np.mean(x, axis=1, keepdims=True)
        v = np.mean((x - mu) ** 2, axis=1, keepdims=True)
        return np.sum(np.tanh((x - mu) / np.sqrt(v + 1e-5) * g + b))
    return program(f)


def long_sum(n: int):
    def f(x: sd.f32[n]):
        return np.sum(np.sin(x) * x)
    return program(f)


def masked_products(R: int, C: int):
    """prod and min reductions along rows, a conditional (masked) sum, and column sums."""
    def f(x: sd.f32[R, C]):
        p = np.prod(1.0 + 0.01 * np.tanh(x), axis=1)
        lo = np.min(x, axis=1)
        pos = np.sum(np.where(x > 0.5, x * x, 0.0), axis=1)
        col = np.sum(x * x, axis=0)
        return np.sum(p * lo) + np.sum(pos) + np.sum(np.sqrt(col))
    return program(f)


def column_reductions(R: int, C: int):
    """Sums and maxima down long columns of many columns: workgroups across points."""
    def f(x: sd.f32[R, C]):
        return np.sum(np.sqrt(np.sum(x * x, axis=0) + 1.0)) + np.sum(np.max(x, axis=0) * np.arange(C) / C)
    return program(f)


def float64_rows(R: int, C: int):
    def f(x: sd.f64[R, C]):
        return np.sum(np.sum(x * x, axis=1) ** 2)
    return program(f)


CASES = {  # name -> (program, argument shapes): lengths not multiples of 256, and shorter than a workgroup
    "logsumexp 37x1000": (logsumexp_rows(37, 1000), [(37, 1000)]),
    "logsumexp 5x100": (logsumexp_rows(5, 100), [(5, 100)]),
    "layer norm 24x700": (layer_norm(24, 700), [(24, 700), (700,), (700,)]),
    "sum 100003": (long_sum(100_003), [(100_003,)]),
    "prod/min/masked/columns 30x517": (masked_products(30, 517), [(30, 517)]),
    "float64 rows 9x300": (float64_rows(9, 300), [(9, 300)]),
    "columns 70x2100": (column_reductions(70, 2100), [(70, 2100)]),  # 2100 = 65 workgroups of 32 + 20
}


def inputs(shapes, dtype, seed=0):
    r = np.random.default_rng(seed)
    return [r.standard_normal(s).astype(dtype) for s in shapes]


def with_workgroups() -> contextlib.AbstractContextManager:
    """Run the GPU form on lavapipe too (its own target keeps a thread per
    reduction and stores transcendental values, for speed: lowering.targets),
    so that CI checks it."""
    return backends.targets_changed(lambda target: replace(target, workgroup_reductions=True,
                                                          recompute_transcendentals=True))


@pytest.fixture(params=[pytest.param("vulkan", marks=pytest.mark.vulkan), "cuda"])
def gpu(request):
    """Each Vulkan or CUDA device present (lavapipe here, CUDA on a GPU machine), in the GPU form."""
    if request.param not in lowering.available_devices():
        pytest.skip(f"no {request.param} device here")
    with with_workgroups():
        yield request.param


@pytest.mark.parametrize("case", sorted(CASES))
def test_cooperative_kernels_match_the_interpreter(case, gpu):
    prog, shapes = CASES[case]
    float64 = "float64" in case
    args = inputs(shapes, np.float64 if float64 else np.float32)
    ref_value, ref_grads = prog.value_and_grad(*[a.astype(np.float64) for a in args], device="numpy")
    value, grads = prog.value_and_grad(*args, device=gpu)
    tol = 1e-12 if float64 else 2e-5
    assert abs(value - ref_value) <= tol * max(abs(ref_value), 1.0), (value, ref_value)
    for name, ref in ref_grads.items():
        scale = max(float(np.max(np.abs(ref))), 1.0)
        np.testing.assert_allclose(grads[name], ref, rtol=0, atol=tol * scale * 10, err_msg=name)
    assert COOPERATIVE in prog.slang_source(device=gpu)
    # the fixed tree gives the same bits on every run
    again = prog.value_and_grad(*args, device=gpu)
    assert again[0] == value and all(np.array_equal(again[1][n], grads[n]) for n in grads)


def _module(case: str, target: str):
    prog, _ = CASES[case]
    return generate(plan(prog.backward_graph(), {}, target), target)


@pytest.mark.parametrize("case", sorted(CASES))
def test_only_targets_with_workgroups_get_cooperative_kernels(case):
    for target in ("vulkan", "cuda"):
        assert COOPERATIVE in _module(case, target).source, target
    cpu = _module(case, "cpu").source
    assert COOPERATIVE not in cpu and "groupshared" not in cpu and "Barrier" not in cpu


def test_rows_run_by_a_workgroup_may_be_longer_than_a_threads():
    """Softmax rows of 1000 are one row kernel on GPU targets, separate kernels on the CPU device."""
    prog, _ = CASES["logsumexp 37x1000"]
    graph = prog.backward_graph()
    assert any(isinstance(k, RowKernel) for k in plan(graph, {}, "vulkan").kernels)
    assert not any(isinstance(k, RowKernel) for k in plan(graph, {}, "cpu").kernels)
    assert backends.cuda.TARGET.max_row > backends.cpu.TARGET.max_row


def _heads(fn) -> list[str]:
    """The first comment line of each kernel of ``fn``'s forward pass on CUDA."""
    module = generate(plan(program(fn).graph, {}, "cuda"), "cuda")
    return [part.splitlines()[0] for part in module.source.split("// kernel ")[1:]]


def test_each_reduction_gets_the_layout_that_suits_its_memory_order():
    """Short loops keep a thread per point; long rows get a workgroup each;
    long columns of many columns get 32 columns a workgroup."""
    def short(x: sd.f32[4096, 40]):
        return np.sum(np.sum(x, axis=1) ** 2)

    def rows(z: sd.f32[3000, 300]):
        return np.sum(np.sum(z, axis=1) ** 2)

    def columns(y: sd.f32[300, 3000]):
        return np.sum(np.sum(y, axis=0) ** 2)
    for fn, box, form in ((short, "[4096]", "4096 thread(s)"), (rows, "[3000]", ALONG), (columns, "[3000]", ACROSS)):
        heads = [h for h in _heads(fn) if f"over {box}" in h]
        assert heads and all(form in h for h in heads), (fn.__name__, heads)


def test_lanes_store_a_points_values_once():
    """Every store outside a loop shared by the lanes is lane 0's."""
    source = _module("layer norm 24x700", "vulkan").source
    checked = 0
    for kernel in source.split("// kernel ")[1:]:
        if COOPERATIVE not in kernel.splitlines()[0]:
            continue
        depth, shared_loop = 0, []
        lines = kernel.splitlines()
        for n, line in enumerate(lines):
            if line.strip().startswith("for (int r = lane;"):
                shared_loop.append(depth)
            depth += line.count("{") - line.count("}")
            if shared_loop and depth <= shared_loop[-1] and "}" in line:
                shared_loop.pop()
            if "] = " in line and "_v" in line.split("[")[0] and not shared_loop and "workgroup_" not in line:
                assert "lane == 0" in lines[n - 1], (n, line)
                checked += 1
    assert checked >= 3  # the row statistics and the gradients of g and b at least


@pytest.mark.skipif(not slang_compiler.available(), reason="no Slang compiler library in slangpy's wheel")
@pytest.mark.parametrize("case", ["layer norm 24x700", "prod/min/masked/columns 30x517"])
def test_cooperative_kernels_compile_to_cuda_source(case):
    module = _module(case, "cuda")
    cuda = slang_compiler.compile_source(module.source, "cuda", module.entry_points(False))
    assert any("__syncthreads()" in text for text in cuda.values())
    assert any("__shared__" in text for text in cuda.values())


def softplus_logsumexp(n: int):
    def f(x: sd.f32[n]):
        m = np.max(x)
        return np.mean(np.log1p(np.exp(x))) + m + np.log(np.sum(np.exp(x - m)))
    return program(f)


def test_gpu_plans_recompute_elementwise_values_instead_of_storing_them(gpu):
    """On a GPU target every elementwise value cheap to recompute (a few dozen
    flops on one varying element: ``exp(x - m)``, ``g / n``, the softplus's
    derivative) is recomputed where it is read, also where a kernel would have
    kept it in a register: softplus + logsumexp then passes over its vector
    in reductions and one gradient kernel, storing no vector but the gradient
    (it kept four elementwise kernels storing 1M-element intermediates, 11
    kernels, issue 11).  Each long reduction's second stage runs in its first's
    dispatch (lowering.last_workgroup).  Checked against the interpreter on
    lavapipe in the GPU form."""
    n = 50_000
    prog = softplus_logsumexp(n)
    p = plan(prog.backward_graph(), {}, backends.of(gpu).target())
    full = [k for k in p.kernels if k.box == (n,)]
    assert len(full) == 1 and full[0].steps[0].tasklet.name == "gather_grad_x", [k.name for k in p.kernels]
    vectors = {a.split("#")[0] for a in p.stored if p.graph.containers[p.graph.node(a).container].shape == (n,)}
    assert vectors == {"x", "grad_x"}
    assert len(p.kernels) <= 4  # three single-pass reductions and the gradient (issue 11's target)
    (x,) = inputs([(n,)], np.float32, seed=3)
    x *= 4.0
    value, grads = prog.value_and_grad(x, device=gpu)
    ref_value, ref_grads = prog.value_and_grad(x.astype(np.float64), device="numpy")
    assert abs(value - ref_value) <= 1e-5 * abs(ref_value)
    np.testing.assert_allclose(grads["x"], ref_grads["x"], rtol=1e-4, atol=1e-9)
    again = prog.value_and_grad(x, device=gpu)
    assert again[0] == value and np.array_equal(again[1]["x"], grads["x"])


def test_cpu_plans_keep_transcendental_values_in_registers():
    """The CPU device's vectorised exp costs more than a stored value: its plan keeps them."""
    p = plan(softplus_logsumexp(50_000).backward_graph(), {}, "cpu")
    assert any(len(k.steps) > 1 and k.box == (50_000,) for k in p.kernels)


@pytest.mark.parametrize("case", ["logsumexp 37x1000", "sum 100003", "float64 rows 9x300", "prod/min/masked/columns 30x517"])
def test_wave_steps_give_the_groupshared_trees_bits(case, gpu):
    """The tree's steps within a wave run as wave shuffles where the target has
    them (lavapipe: waves of 8), in the same order as the groupshared tree:
    the same bits as without them, on every run."""
    prog, shapes = CASES[case]
    args = inputs(shapes, np.float64 if "float64" in case else np.float32, seed=1)
    assert "WaveReadLaneAt" in prog.slang_source(device=gpu)
    with_waves = prog.value_and_grad(*args, device=gpu)
    with backends.targets_changed(lambda target: replace(target, wave_operations=False)):
        sd.clear_caches()  # generated again, for the target without waves
        plain = sd.differentiable_program(prog.function)
        assert "WaveReadLaneAt" not in plain.slang_source(device=gpu)
        without = plain.value_and_grad(*args, device=gpu)
    assert with_waves[0] == without[0]
    for name in without[1]:
        assert np.array_equal(with_waves[1][name], without[1][name]), name


def test_only_targets_with_waves_use_them():
    for target, waves in (("vulkan", True), ("cuda", True), ("cpu", False)):
        assert ("WaveReadLaneAt" in _module("layer norm 24x700", target).source) == waves, target
    # 32 points a workgroup: a point's lanes are 32 threads apart, in different waves
    source = _module("columns 70x2100", "vulkan").source
    for kernel in source.split("// kernel ")[1:]:
        if ACROSS in kernel.splitlines()[0]:
            assert "WaveReadLaneAt" not in kernel


def test_long_reductions_finish_in_their_last_workgroup(gpu):
    """A long sum's second stage runs in the first stage's dispatch, in the
    workgroup that finishes last (lowering.last_workgroup): one kernel and one
    dispatch per long reduction, the same bits on every run (the chunks are
    summed in a fixed order whichever workgroup is last), and the counter is
    cleared for the next call."""
    prog, shapes = CASES["sum 100003"]
    p = plan(prog.backward_graph(), {}, backends.of(gpu).target())
    finished = [k for k in p.kernels if k.finish is not None]
    assert finished and all(k.finish.box == () and k.counter in p.fills for k in finished)
    assert all(k.box != () for k in p.kernels)  # no one-point kernel left of its own
    source = prog.slang_source(device=gpu)
    assert "InterlockedAdd" in source and "DeviceMemoryBarrier" in source
    assert _module("sum 100003", "cpu").source.count("InterlockedAdd") == 0
    args = inputs(shapes, np.float32, seed=2)
    ref_value, ref_grads = prog.value_and_grad(*[a.astype(np.float64) for a in args], device="numpy")
    runs = [prog.value_and_grad(*args, device=gpu) for _ in range(3)]
    for value, grads in runs:
        assert value == runs[0][0] and np.array_equal(grads["x"], runs[0][1]["x"])
    assert abs(runs[0][0] - ref_value) <= 1e-6 * abs(ref_value)
    np.testing.assert_allclose(runs[0][1]["x"], ref_grads["x"], rtol=1e-5, atol=1e-7)


@pytest.mark.skipif(not slang_compiler.available(), reason="no Slang compiler library in slangpy's wheel")
def test_single_pass_and_wave_forms_compile_to_cuda_source():
    """The last-workgroup finish (a device fence, an atomic counter) and the wave
    steps of the tree have a CUDA form (nvrtc's input; no GPU here to run it)."""
    module = _module("sum 100003", "cuda")
    cuda = "\n".join(slang_compiler.compile_source(module.source, "cuda",
                                                   module.entry_points(False)).values())
    assert "__threadfence()" in cuda and "atomicAdd" in cuda and "__shfl" in cuda
