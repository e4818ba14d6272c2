"""Row kernels (lowering.rowfusion): softmax, log-softmax and layer norm, forward
and backward, against the interpreter on every device, and the kernel counts
they fuse into (structural: the number of planned kernels)."""
import numpy as np
import pytest

from symdiff import ir
from symdiff import lowering
from symdiff.ir.specs import f32
from symdiff.lowering import rowfusion
from symdiff.lowering.codegen import generate
from symdiff.lowering.plan import plan
from symdiff.lowering.rowfusion import RowKernel
from lowering_graphs import G, i, j, k, rng
from symdiff.backward import add_backward_pass


def softmax(x: f32[48, 10]):
    e = np.exp(x - np.max(x, axis=1, keepdims=True))
    return e / np.sum(e, axis=1, keepdims=True)


def log_softmax(x: f32[48, 10]):
    s = x - np.max(x, axis=1, keepdims=True)
    return s - np.log(np.sum(np.exp(s), axis=1, keepdims=True))


def layer_norm(x: f32[40, 33], g: f32[33], b: f32[33]):
    mu = np.mean(x, axis=-1, keepdims=True)
    var = np.mean((x - mu) ** 2, axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-5) * g + b


def softmax_xent(logits: f32[64, 10], y: f32[64, 10]):
    s = logits - np.max(logits, axis=1, keepdims=True)
    return -np.mean(np.sum(y * (s - np.log(np.sum(np.exp(s), axis=1, keepdims=True))), axis=1))


# program -> (the kernels it plans into, of which row kernels); forward and backward together
# (layer norm's gain and bias gradients are column sums; softmax_xent's mean needs every row, and
# its reverse pass's seed, placed first (plan.placement_order), lets both passes share one row kernel)
PROGRAMS = {softmax: (1, 1), log_softmax: (1, 1), layer_norm: (2, 1), softmax_xent: (3, 1)}


def differentiated(fn):
    """The traced program with its reverse pass w.r.t. every argument, and inputs (seeds included)."""
    graph = ir.trace(fn).copy()
    add_backward_pass(graph, graph.arguments, graph.results)
    r = rng(3)
    inputs = {a: r.standard_normal(graph.containers[a].concrete_shape()).astype(np.float32)
              for a in graph.arguments}
    return graph, inputs


@pytest.mark.parametrize("fn", PROGRAMS, ids=lambda f: f.__name__)
def test_row_programs_match_interpreter(fn, device):
    graph, inputs = differentiated(fn)
    got = lowering.compile(graph, device=device)(inputs)
    want = ir.run(graph, inputs)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-5, err_msg=f"{name} on {device}")


@pytest.mark.parametrize("fn", PROGRAMS, ids=lambda f: f.__name__)
def test_reductions_and_their_consumers_fuse_into_row_kernels(fn):
    graph, _ = differentiated(fn)
    p = plan(graph, {})
    kernels, rows = PROGRAMS[fn]
    assert len(p.kernels) <= kernels
    assert sum(isinstance(k, RowKernel) for k in p.kernels) == rows


def test_softmax_forward_is_one_row_kernel_with_shared_loops():
    (kernel,) = plan(ir.trace(softmax), {}).kernels
    assert isinstance(kernel, RowKernel) and kernel.box == (48,)
    # max | exp, sum (one loop) | the division: the exponentials are reloaded from their buffer
    assert [g.shape for g in kernel.groups] == [(10,), (10,), (10,)]
    assert [len(g.steps) for g in kernel.groups] == [1, 3, 1]


def test_row_sums_and_one_point_values_stay_in_registers():
    p = plan(ir.trace(log_softmax), {})
    # the max, the sum and its log are registers; the shifted row is reloaded by the last loop
    assert {a.split("#")[0] for a in p.stored} == {"x", "subtract", "out"}
    assert [g.shape for g in p.kernels[0].groups] == [(10,), (10,), (), (10,)]


def test_rows_longer_than_the_bound_are_not_fused(monkeypatch):
    monkeypatch.setattr(rowfusion, "MAX_ROW", 8)
    assert not any(isinstance(k, RowKernel) for k in plan(ir.trace(softmax), {}).kernels)


def test_a_column_read_stops_a_row_kernel(device):
    # z[i, j] = x[i, j] - max_j x[i, j]; out[i, j] = z[j, i]: another thread's row, so not fused
    n = 12
    b = G("transposed_read").c("x", (n, n), "argument").c("m", (n,)).c("z", (n, n)).c("out", (n, n), "result")
    b.t("max", [(i, 0, n), (j, 0, n)], b.s("x", "x"), {"x": ("x", (i, j))}, ("m", (i,)), acc="max")
    b.t("shift", [(i, 0, n), (j, 0, n)], b.s("x", "x") - b.s("m", "m"), {"x": ("x", (i, j)), "m": ("m", (i,))},
        ("z", (i, j)))
    b.t("flip", [(i, 0, n), (j, 0, n)], 2 * b.s("z", "z"), {"z": ("z", (j, i))}, ("out", (i, j)))
    p = plan(b.g, {})
    assert [type(k) for k in p.kernels] == [RowKernel, lowering.plan_types.Kernel]
    x = rng(5).standard_normal((n, n)).astype(np.float32)
    np.testing.assert_allclose(lowering.compile(b.g, device=device)({"x": x})["out"],
                               ir.run(b.g, {"x": x})["out"], rtol=1e-6)


def test_a_row_of_an_interleaved_write_stops_a_row_kernel(device):
    # packed[p0 + 6*p1] = b[p0, p1] (einsum's packing of two summed axes): row p0 writes every sixth
    # element, so out[i] += m[i, k] * packed[k], which reads all of them, must not join its row kernel
    b = G("interleaved_write").c("x", (6, 3), "argument").c("m", (6, 18), "argument").c("packed", (18,))
    b.c("out", (6,), "result")
    b.t("pack", [(i, 0, 6), (j, 0, 3)], b.s("x", "x"), {"x": ("x", (i, j))}, ("packed", (i + 6 * j,)))
    b.t("product", [(i, 0, 6), (k, 0, 18)], b.s("m", "m") * b.s("p", "packed"), {"m": ("m", (i, k)),
                                                                             "p": ("packed", (k,))},
        ("out", (i,)), acc="sum")
    x, m = rng(6).standard_normal((6, 3)).astype(np.float32), rng(7).standard_normal((6, 18)).astype(np.float32)
    np.testing.assert_allclose(lowering.compile(b.g, device=device)({"x": x, "m": m})["out"],
                               ir.run(b.g, {"x": x, "m": m})["out"], rtol=1e-5)


def test_a_sum_with_a_writer_outside_the_row_kernel_is_read_from_its_buffer(device):
    # s[i] = sum_k w[k, i] (too long a row: its own kernel) + sum_j x[i, j] (in the row kernel);
    # the row kernel's register holds only the second part
    n, m, long = 16, 10, rowfusion.MAX_ROW + 44
    b = G("two_writers").c("x", (n, m), "argument").c("w", (long, n), "argument").c("s", (n,))
    b.c("out", (n, m), "result")
    b.t("long", [(i, 0, n), (k, 0, long)], b.s("w", "w"), {"w": ("w", (k, i))}, ("s", (i,)), acc="sum")
    b.t("short", [(i, 0, n), (j, 0, m)], b.s("x", "x"), {"x": ("x", (i, j))}, ("s", (i,)), acc="sum",
        same_version=True)
    b.t("use", [(i, 0, n), (j, 0, m)], b.s("x", "x") - b.s("s", "s"), {"x": ("x", (i, j)), "s": ("s", (i,))},
        ("out", (i, j)))
    p = plan(b.g, {})
    assert isinstance(p.kernels[-1], RowKernel)
    assert all(r.producer is None for s in p.kernels[-1].steps for r in s.reads)
    r = rng(1)
    inputs = {"x": r.standard_normal((n, m)).astype(np.float32), "w": r.standard_normal((long, n)).astype(np.float32)}
    np.testing.assert_allclose(lowering.compile(b.g, device=device)(inputs)["out"], ir.run(b.g, inputs)["out"],
                               rtol=1e-5, atol=1e-5)


def row_scaled_sums(x: f32[48, 32], s: f32[48]):
    return np.sum(x * s[:, None], axis=1)


def test_row_loops_sum_in_lanes_and_load_row_values_once(device):
    """On the CPU device a row loop holding a sum runs in lanes accumulating in
    double (like any in-thread reduction); ``s[i]``, the same at every point of
    row i, is loaded once before the loop (kernels.writer.hoist_loop_invariant_reads:
    with the load inside and a double accumulator g++ vectorised nothing)."""
    graph = ir.trace(row_scaled_sums)
    (kernel,) = plan(graph, {}).kernels
    assert isinstance(kernel, RowKernel)
    src = generate(plan(graph, {}), "cpu").source
    assert "double sum_1_y_acc_lanes[16];" in src  # the loop stores y too: Tuning.cpu_storing_lanes, for g++'s vectoriser
    assert src.count("s_v0[t0]") == 1 and src.index("s_v0[t0]") < src.index("for (int block")
    r = rng(4)
    inputs = {"x": r.standard_normal((48, 32)).astype(np.float32), "s": r.standard_normal(48).astype(np.float32)}
    np.testing.assert_allclose(lowering.compile(graph, device=device)(inputs)["out"], ir.run(graph, inputs)["out"],
                               rtol=1e-5, atol=1e-6)
