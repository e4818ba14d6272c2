"""Kernel planning: fusion, reduction strategy, write modes (no device needed)."""
import numpy as np

import sympy

from symdiff import ir
from symdiff.lowering.plan import plan
from symdiff.lowering.targets import TUNING
from lowering_graphs import CORPUS, G, chain, histogram, i, j, partial_update, reduction
from symdiff.backward import add_backward_pass


def modes(p):
    return {w.memlet.container: w.mode for kern in p.kernels for s in kern.steps for w in s.writes}


def test_elementwise_chain_forward_and_backward_fuse_into_one_kernel():
    g, _ = chain(1000, ops=10)
    add_backward_pass(g, ["x"], ["y"])
    p = plan(g, {})
    assert len(g.tasklets()) == 20
    assert len(p.kernels) <= 2
    # intermediates stay in registers: only the argument, seed, result and gradient have buffers
    assert {a.split("#")[0] for a in p.stored} == {"x", "seed_y", "y", "grad_x"}


def test_reduction_of_modest_extent_is_a_loop_inside_the_thread():
    g, _ = reduction("sum", (64, 100), 1)
    (kernel,) = plan(g, {}).kernels
    (step,) = kernel.steps
    assert kernel.box == (64,) and [s for s, _, _ in step.loop] == [j]
    assert modes(plan(g, {})) == {"out": "store"}  # sole writer covering the output: no fill, no atomics


def test_large_full_reduction_is_split_in_two_stages():
    g, _ = reduction("max", (300, 1000), None)
    p = plan(g, {})
    first, second = p.kernels
    assert first.threads >= 64  # many threads share the 300k elements
    assert second.threads == 1 and second.steps[0].loop
    assert max(np.prod([int(e) - int(b) for _, b, e in s.loop]) for k in p.kernels for s in k.steps) \
        < 300 * 1000 // 32


def test_long_rows_with_few_outputs_are_split_too():
    g, _ = reduction("sum", (3, 100000), 1)
    assert len(plan(g, {}).kernels) == 2
    g, _ = reduction("sum", (5000, TUNING.split_reduction_min), 1)
    assert len(plan(g, {}).kernels) == 1  # enough parallel rows already


def test_scatter_with_collisions_is_atomic_and_filled():
    g, _ = histogram("sum")
    p = plan(g, {})
    assert modes(p) == {"h": "atomic"}
    assert p.fills == {"h#0": 0.0}


def test_guarded_writers_of_one_version_store_after_a_fill():
    g, _ = partial_update()
    p = plan(g, {})
    assert modes(p) == {"u": "store", "out": "store"}
    assert "u#0" in p.fills and "out#0" not in p.fills
    # the reader of the twice-written version waits for both writers
    kernel_of = {s.tasklet.name: n for n, k in enumerate(p.kernels) for s in k.steps}
    assert kernel_of["double"] > max(kernel_of["keep_edges"], kernel_of["update"])


def test_shifted_read_is_not_forwarded_in_a_register():
    b = G("shift").c("x", (10,), "argument").c("y", (10,), "transient").c("z", (9,), "result")
    # sin: not free to recompute (lowering.rematerialise), so y is passed on, never in a register
    b.t("first", [(i, 0, 10)], sympy.sin(b.s("x", "x")), {"x": ("x", (i,))}, ("y", (i,)))
    b.t("second", [(i, 0, 9)], b.s("y", "y"), {"y": ("y", (i + 1,))}, ("z", (i,)))
    p = plan(b.g, {})
    assert len(p.kernels) == 2 and "y#0" in p.stored


def test_accumulations_into_one_version_from_two_tasklets_do_not_share_a_kernel():
    b = G("two").c("x", (10,), "argument").c("s", (10,), "result")
    b.t("left", [(i, 0, 10)], b.s("x", "x"), {"x": ("x", (i,))}, ("s", (i,)), "sum")
    b.t("right", [(i, 0, 10)], 2 * b.s("x", "x"), {"x": ("x", (i,))}, ("s", (i,)), "sum", same_version=True)
    p = plan(b.g, {})
    assert len(p.kernels) == 2 and set(modes(p).values()) == {"combine"}


def test_every_corpus_graph_plans():
    for make in CORPUS.values():
        g, inputs = make()
        assert plan(g, ir.bind_sizes(g, inputs)).kernels


def test_matmul_backward_writes_are_split_into_reductions_without_atomics():
    from lowering_graphs import matmul
    g, _ = matmul(64, 32, 16)
    add_backward_pass(g, ["a", "w"], ["c"])
    p = plan(g, {})
    assert "atomic" not in {w.mode for kern in p.kernels for s in kern.steps for w in s.writes}
    loops = {s.tasklet.name: [int(e) - int(b) for _, b, e in s.loop] for kern in p.kernels for s in kern.steps}
    assert sorted(v for v in loops.values() if v) == [[16], [32], [64]]  # da over j, c over k, dw over i


def test_seed_steps_run_in_the_next_one_point_kernel():
    """A reverse pass's one-point seed steps (``placement_order`` puts them
    first) join the next one-point kernel, a reduction's second stage, instead
    of a kernel of their own; the numbers are the interpreter's."""
    import symdiff as sd
    from symdiff import lowering

    def f(x: sd.f32[20000]):
        return np.sum(x * x) * 2.0 + np.max(x)
    prog = sd.differentiable_program(f)
    graph = prog.backward_graph()
    # two two-stage reductions and the gradient; on GPU targets each second stage
    # runs in its first's dispatch (lowering.last_workgroup)
    for target, count in (("cpu", 5), ("vulkan", 3)):
        kernels = plan(graph, {}, target).kernels
        one_point = [k for k in kernels + [k.finish for k in kernels if k.finish] if k.box == ()]
        seeds = [k for k in one_point if all(not s.loop for s in k.steps)]
        assert not seeds, [k.name for k in kernels]
        assert len(kernels) == count, [k.name for k in kernels]
    x = np.random.default_rng(5).standard_normal(20000).astype(np.float32)
    want_value, want = prog.value_and_grad(x.astype(np.float64), device="numpy")
    for device in [d for d in ("cpu", "vulkan") if d in lowering.available_devices()]:
        value, grads = prog.value_and_grad(x, device=device)
        np.testing.assert_allclose(value, want_value, rtol=1e-5)
        np.testing.assert_allclose(grads["x"], want["x"], rtol=1e-5, atol=1e-7)
