"""Elementwise producers folded into reductions (lowering.reduce_fusion) and the
CPU device's multi-lane reduction loops: results against the interpreter on
every device, and structural checks that the intermediate is not materialised."""
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sympy

import symdiff as sd

from symdiff import ir
from symdiff import lowering
from symdiff.lowering.codegen import generate
from symdiff.lowering.plan import plan
from symdiff.lowering.rowfusion import RowKernel
from lowering_graphs import G, i, j, rng

jax.config.update("jax_enable_x64", True)


def _check(graph, inputs, device):
    got = lowering.compile(graph, device=device)(inputs)
    want = ir.run(graph, inputs)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=2e-4, atol=1e-4, err_msg=f"{name} on {device}")


def _buffers(graph, sizes=None) -> set[str]:
    """Containers with a stored version in the plan."""
    p = plan(graph, sizes or {})
    return {p.graph.node(a).container for a in p.stored}


def square_then(op: str, n: int, extra_reader: bool = False):
    """``op``-reduce ``x * x + 0.5`` (two elementwise producers); with
    ``extra_reader`` the square is also a result of its own."""
    b = G(f"{op}_of_square").c("x", (n,), "argument").c("sq", (n,), "result" if extra_reader else "transient")
    b.c("h", (n,)).c("out", (), "result")
    x = b.s("x", "x")
    b.t("square", [(i, 0, n)], x * x, {"x": ("x", (i,))}, ("sq", (i,)))
    b.t("shift", [(i, 0, n)], b.s("a", "sq") * (0.25 if op == "prod" else 1) + 0.5, {"a": ("sq", (i,))}, ("h", (i,)))
    b.t("reduce", [(i, 0, n)], b.s("a", "h"), {"a": ("h", (i,))}, ("out", ()), op)
    return b.g, {"x": rng(2).uniform(-1.2, 1.2, n).astype(np.float32)}


@pytest.mark.parametrize("op", ["sum", "max", "min", "prod"])
@pytest.mark.parametrize("n", [100, 10_007, 100_000])  # in-thread; two stages with a partial last chunk; dividing
def test_folded_reductions_match_interpreter(op, n, device):
    graph, inputs = square_then(op, 100 if op == "prod" else n)
    _check(graph, inputs, device)


def test_intermediates_are_not_stored():
    graph, _ = square_then("sum", 100_000)
    assert _buffers(graph) & {"sq", "h"} == set()
    p = plan(graph, {})
    assert [s.tasklet.meta["origin"] for k in p.kernels for s in k.steps] == ["reduce", "reduce"]  # two stages


def test_intermediate_with_another_reader(device):
    """The square is a result too: it is still stored, and recomputed (cheap) inside the sum."""
    graph, inputs = square_then("sum", 10_007, extra_reader=True)
    _check(graph, inputs, device)
    assert "h" not in _buffers(graph)
    p = plan(graph, {})
    reduce_reads = {r.memlet.container for k in p.kernels for s in k.steps if "reduce" in s.tasklet.name
                    for r in s.reads}
    assert "x" in reduce_reads and "sq" not in reduce_reads


def test_costly_shared_producer_is_not_recomputed():
    """tanh read by the sum and by another result stays a buffer the sum reads
    (5003 is prime: the sum's chunks are ragged, so no elementwise pass runs
    over them, ``chunk_producers``)."""
    n = 5003
    b = G("shared_tanh").c("x", (n,), "argument").c("t", (n,)).c("u", (n,), "result").c("out", (), "result")
    b.t("tanh", [(i, 0, n)], sympy.tanh(b.s("x", "x")), {"x": ("x", (i,))}, ("t", (i,)))
    b.t("double", [(i, 0, n)], 2 * b.s("a", "t"), {"a": ("t", (i,))}, ("u", (i,)))
    b.t("reduce", [(i, 0, n)], b.s("a", "t"), {"a": ("t", (i,))}, ("out", ()), "sum")
    assert "t" in _buffers(b.g)


def test_multiple_outputs_and_rows(device):
    """Row sums and row maxima of one folded producer (one reduction tasklet with two outputs)."""
    m, n = 37, 300
    b = G("row_stats").c("x", (m, n), "argument").c("p", (m, n))
    b.c("s", (m,), "result").c("mx", (m,), "result")
    x = b.s("x", "x")
    b.t("poly", [(i, 0, m), (j, 0, n)], x * x - x, {"x": ("x", (i, j))}, ("p", (i, j)))
    a = b.s("a", "p")
    b.g.add_tasklet("stats", [(i, 0, m), (j, 0, n)], {"s": a, "mx": a}, {"a": (b.g.latest("p"), (i, j))},
                    {"s": (b.g.new_version("s"), (i,), "sum"), "mx": (b.g.new_version("mx"), (i,), "max")})
    r = rng(4)
    inputs = {"x": r.standard_normal((m, n)).astype(np.float32)}
    _check(b.g, inputs, device)
    assert "p" not in _buffers(b.g)


def test_producer_with_more_inputs_is_not_folded():
    """sum(x * w): the sum would read two streams instead of one (see the module docstring;
    5003 is prime: no pass over the sum's chunks either)."""
    n = 5003
    b = G("dot").c("x", (n,), "argument").c("w", (n,), "argument").c("p", (n,)).c("out", (), "result")
    b.t("mul", [(i, 0, n)], b.s("x", "x") * b.s("w", "w"), {"x": ("x", (i,)), "w": ("w", (i,))}, ("p", (i,)))
    b.t("reduce", [(i, 0, n)], b.s("a", "p"), {"a": ("p", (i,))}, ("out", ()), "sum")
    assert "p" in _buffers(b.g)


def test_matmul_shaped_read_is_not_folded():
    """A producer read once per output of a matmul would be recomputed per output: kept."""
    m, n, q = 16, 24, 8
    b = G("mm").c("a", (m, n), "argument").c("bm", (n, q), "argument").c("t", (m, n)).c("out", (m, q), "result")
    b.t("tanh", [(i, 0, m), (j, 0, n)], sympy.tanh(b.s("a", "a")), {"a": ("a", (i, j))}, ("t", (i, j)))
    k = sympy.Symbol("k", integer=True)
    b.t("mm", [(i, 0, m), (k, 0, q), (j, 0, n)], b.s("u", "t") * b.s("v", "bm"),
        {"u": ("t", (i, j)), "v": ("bm", (j, k))}, ("out", (i, k)), "sum")
    assert "t" in _buffers(b.g)


def _reversed_dot(x, y, xp=np):
    """The fuzzer's seed 40244: ``v`` is read twice by one matmul (``v @ v[::-1]``)
    and only there (the comparison has no gradient, so the reverse pass does not
    read ``v``); ``y`` gives the gradients something to carry."""
    v = x * 2.0
    return xp.where((v @ v[::-1]) > 0, xp.cosh(y), 0.3 * xp.cosh(y)) + xp.sum(x * x) * y


def test_producer_read_twice_by_one_reduction(device):
    """Folding ``v`` into one of the matmul's two reads of it dropped the
    producer as unread, and with it the other read: Slang with an undefined
    identifier.  Values and gradients against JAX in float64."""
    import jax
    import jax.numpy as jnp
    import symdiff as sd
    jax.config.update("jax_enable_x64", True)

    def f(x: sd.f32[5], y: sd.f32):
        return _reversed_dot(x, y)

    program = sd.differentiable_program(f)
    for x in (np.array([0.5, -1.0, 0.25, 2.0, -0.75]), np.array([0.5, 1.0, 0.25, 2.0, 0.75])):  # both branches
        y = np.float64(0.7)
        value, grads = program.value_and_grad(x.astype(np.float32), np.float32(y), device=device)
        want = _reversed_dot(x, y, jnp)
        want_x, want_y = jax.jit(jax.grad(lambda a, b: _reversed_dot(a, b, jnp), argnums=(0, 1)))(x, y)
        np.testing.assert_allclose(value, want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(grads["x"], want_x, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(grads["y"], want_y, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(program(x.astype(np.float32), np.float32(y), device=device), want,
                                   rtol=1e-5, atol=1e-6)  # the forward graph alone


def test_cpu_reduction_lanes_in_source():
    """The CPU device sums in lanes (vectorisable); lavapipe keeps one accumulator per thread."""
    graph, _ = square_then("sum", 10_007)
    p = plan(graph, {})
    src = generate(p, "cpu").source
    accumulators = set(re.findall(r"(\w+)_lanes\[8\];", src))
    assert accumulators
    for acc in accumulators:  # the lanes start from it and are added to it in lane order, written out
        assert " ".join(f"{acc}_lanes[{k}] = {acc};" for k in range(8)) in src
        assert f"{acc} = {' + '.join([acc] + [f'{acc}_lanes[{k}]' for k in range(8)])};" in src
    assert "_lanes" not in generate(p, "vulkan").source


# -- elementwise passes over a first stage's chunks (chunk_producers) ----------------------
def _shared_tanh(n: int, shifted: bool = False):
    """``out = sum(tanh(x))`` and ``u = 2 tanh(x)`` (or, ``shifted``, ``2 tanh(x[i + 1])``)."""
    m = n - 1 if shifted else n
    b = G("chunked").c("x", (n,), "argument").c("t", (n,)).c("u", (m,), "result").c("out", (), "result")
    b.t("tanh", [(i, 0, n)], sympy.tanh(b.s("x", "x")), {"x": ("x", (i,))}, ("t", (i,)))
    b.t("double", [(i, 0, m)], 2 * b.s("a", "t"), {"a": ("t", (i + 1 if shifted else i,))}, ("u", (i,)))
    b.t("reduce", [(i, 0, n)], b.s("a", "t"), {"a": ("t", (i,))}, ("out", ()), "sum")
    return b.g, {"x": rng(5).uniform(-2, 2, n).astype(np.float32)}


def test_elementwise_pass_runs_over_the_reduction_chunks(device):
    """tanh, read by the sum (too costly to fold in) and by an elementwise
    result at the same points, runs over the sum's chunks: one row kernel
    computes it once a point, stores u and sums the chunk, and t has no
    buffer.  Against the interpreter on every device."""
    graph, inputs = _shared_tanh(5000)
    _check(graph, inputs, device)
    p = plan(graph, {})
    assert "t" not in {p.graph.node(a).container for a in p.stored}
    (rows,) = [k for k in p.kernels if isinstance(k, RowKernel)]
    assert {"tanh", "double", "reduce_stage1"} <= {s.tasklet.name for s in rows.steps}
    assert [str(body) for t in p.graph.tasklets() for body in t.body.values()].count("tanh(x)") == 1


@pytest.mark.parametrize("n, shifted", [(5003, False), (5000, True)])
def test_no_pass_over_chunks_that_do_not_coincide(n, shifted):
    """Ragged chunks (5003 is prime), or a reader of tanh at another point
    (``t[i + 1]``): the elementwise tasklets keep their domains, t its buffer."""
    graph, _ = _shared_tanh(n, shifted)
    p = plan(graph, {})
    assert "t" in {p.graph.node(a).container for a in p.stored}
    assert all(t.domain[0][0] == i for t in p.graph.tasklets() if t.name in ("tanh", "double"))


def _tanh_x(x: sd.f32[60000]):
    return np.mean(np.tanh(x) * x) + np.sum(x * x) * 0.5


def test_gradients_over_chunks_match_jax(device):
    """The issue's ``mean(tanh(x) * x)`` with a second sum over the same
    points: value and gradient vs JAX in float64 on every device."""
    x = rng(6).standard_normal(60000).astype(np.float32)
    value, grads = sd.differentiable_program(_tanh_x).value_and_grad(x, device=device)
    want_value, want_grad = jax.jit(jax.value_and_grad(lambda y: jnp.mean(jnp.tanh(y) * y) + jnp.sum(y * y) * 0.5))(
        x.astype(np.float64))
    np.testing.assert_allclose(value, want_value, rtol=1e-5)
    np.testing.assert_allclose(grads["x"], want_grad, rtol=1e-4, atol=1e-8)
