"""Recompute where read (lowering.rematerialise): a program whose named
producers are inlined into their readers computes what the interpreter
computes for the graph as written, with fewer buffers; a value read through
a gather index keeps its buffer."""
import numpy as np
import sympy

from symdiff import ir
from symdiff import lowering
import symdiff as sd
from symdiff.lowering import backends, targets
from symdiff.lowering.cost_model import with_recomputed
from symdiff.lowering.plan import plan
from symdiff.lowering.rematerialise import candidates


def _layer_norm(x: sd.f32[8, 32], g: sd.f32[32]):
    mu = np.mean(x, axis=1, keepdims=True)
    c = x - mu
    y = c / np.sqrt(np.mean(c * c, axis=1, keepdims=True) + 1e-5) * g
    return np.sum(np.tanh(y) * y)


def _backward_graph():
    graph = ir.trace(_layer_norm).copy()
    sd.add_backward_pass(graph, inputs=["x", "g"], outputs=graph.results)
    return graph


RNG = np.random.default_rng(11)
INPUTS = {"x": RNG.standard_normal((8, 32)).astype(np.float32), "g": RNG.standard_normal(32).astype(np.float32)}


def test_every_candidate_recomputed_gives_the_interpreters_numbers(device):
    graph = _backward_graph()
    names = candidates(graph)
    assert names
    recomputed = with_recomputed(graph, names)
    seeds = {s: np.ones(recomputed.containers[s].concrete_shape({}), np.float32) for s in graph.meta["seeds"].values()}
    want = ir.run(graph, {**INPUTS, **seeds})
    got = lowering.compile(recomputed, device=device)({**INPUTS, **seeds})
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=2e-4, atol=1e-5, err_msg=name)
    before = plan(graph, {}, device)
    after = plan(recomputed, {}, device)
    assert len(after.stored) < len(before.stored)
    assert not {t.meta["origin"] for t in after.graph.tasklets()} & set(names)  # inlined into readers, then gone


def test_a_value_read_through_a_gather_index_is_not_a_candidate():
    def gathered(a: sd.f32[16], idx: sd.i32[4]):
        t = np.tanh(a)
        return np.sum(t[idx] * 2.0)
    graph = ir.trace(gathered)
    tanh = next(t.name for t in graph.tasklets() if "tanh" in t.name)
    assert tanh not in candidates(graph)


def _scaled_softmax_sum(x: sd.f32[16, 32]):
    s = x * 0.5  # arithmetic on one element: recomputing it reads nothing more
    m = np.max(s, axis=1, keepdims=True)
    return np.sum(np.exp(s - m))


def test_values_that_cost_no_read_are_recomputed_in_every_plan(device):
    graph = ir.trace(_scaled_softmax_sum)
    (scale,) = [t.name for t in graph.tasklets() if t.name.startswith("multiply")]
    p = plan(graph, {}, device)
    assert scale not in {t.meta["origin"] for t in p.graph.tasklets()}
    assert not any(a.startswith("multiply#") for a in p.stored)
    program = sd.differentiable_program(_scaled_softmax_sum)
    x = RNG.standard_normal((16, 32)).astype(np.float32)
    value, grads = program.value_and_grad(x, device=device)
    want_value, want = program.value_and_grad(x, device="numpy")
    np.testing.assert_allclose(value, want_value, rtol=1e-5)
    np.testing.assert_allclose(grads["x"], want["x"], rtol=1e-4, atol=1e-6)


TAPS = 6


def _conv(x: sd.f32[64], k: sd.f32[TAPS]):
    n = x.shape[0] - TAPS + 1
    y = k[0] * x[0:n]
    for j in range(1, TAPS):
        y = y + k[j] * x[j:n + j]
    return np.mean(np.tanh(y))


def test_a_chain_of_gradient_copies_is_one_buffer(device):
    """The reverse of ``y + k[j] * x[j:]`` copies y's gradient into both
    operands' gradients, down the whole chain of additions: each tap's
    gradient read its own copy, one buffer of y's size per tap.  Split per
    output and recomputed along the chain (``split_free_copies``,
    ``free_buffered``), the taps read the one gradient; gradients checked
    against float64."""
    program = sd.differentiable_program(_conv)  # also merge_duplicates: the last addition's reverse wrote its
    # gradient, with the tanh derivative folded in, once per operand
    x = RNG.standard_normal(64).astype(np.float32)
    k = RNG.standard_normal(TAPS).astype(np.float32)
    value, grads = program.value_and_grad(x, k, device=device)
    graph = next(e for e in program._executables.values() if e.graph.meta.get("gradients")).graph
    p = plan(graph, {}, device)
    n = 64 - TAPS + 1
    full = [a for a in p.stored if p.graph.containers[p.graph.node(a).container].shape == (n,)]
    # y's gradient and tanh(y) (lavapipe: y alone, the gradient recomputed from it), not a copy per tap
    assert len(full) <= 2, full  # (TAPS + 1 before)
    x64, k64 = x.astype(np.float64), k.astype(np.float64)
    y = sum(k64[j] * x64[j:n + j] for j in range(TAPS))
    dy = (1 - np.tanh(y) ** 2) / n
    dx = np.zeros(64)
    for j in range(TAPS):
        dx[j:n + j] += k64[j] * dy
    dk = np.array([np.sum(dy * x64[j:n + j]) for j in range(TAPS)])
    np.testing.assert_allclose(value, np.mean(np.tanh(y)), rtol=1e-5)
    np.testing.assert_allclose(grads["x"], dx, rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(grads["k"], dk, rtol=1e-4, atol=1e-7)


def _centred_twice(x: sd.f32[16, 8]):
    mu = np.mean(x, axis=1, keepdims=True)
    var = np.mean((x - mu) ** 2, axis=1, keepdims=True)
    return np.sum(np.tanh((x - mu) / np.sqrt(var + 1e-5)))


def test_a_value_traced_twice_is_one_version(device):
    """``x - mu`` written twice (layer norm's variance and its output) is
    computed and stored once (``merge_duplicates``); gradients vs float64."""
    graph = ir.trace(_centred_twice)
    p = plan(graph, {}, device)
    assert sum(t.meta["origin"].startswith("subtract") for t in p.graph.tasklets()) <= 1
    program = sd.differentiable_program(_centred_twice)
    x = RNG.standard_normal((16, 8)).astype(np.float32)
    value, grads = program.value_and_grad(x, device=device)
    x64 = x.astype(np.float64)

    def f(x):
        c = x - x.mean(axis=1, keepdims=True)
        return np.sum(np.tanh(c / np.sqrt((c * c).mean(axis=1, keepdims=True) + 1e-5)))
    h, dx = 1e-6, np.zeros_like(x64)
    for i in np.ndindex(x64.shape):
        e = np.zeros_like(x64)
        e[i] = h
        dx[i] = (f(x64 + e) - f(x64 - e)) / (2 * h)
    np.testing.assert_allclose(value, f(x64), rtol=1e-5)
    np.testing.assert_allclose(grads["x"], dx, rtol=1e-3, atol=1e-5)


def _tanh_x(x: sd.f32[8192]):
    return np.mean(np.tanh(x) * x)


def test_a_value_only_a_reduction_reads_is_not_stored(device):
    """``tanh(x) * x`` is read only by the mean; the reverse pass keeps
    ``tanh(x)`` in a register, so the product was a buffer of x's size.  On
    parallel targets ``tanh`` is recomputed (``cheap_on_gpu``) and the mean
    folds the product in; on slangpy's CPU device the mean's first stage runs
    in the gradient's loop over its chunks (``reduce_fusion.chunk_producers``),
    the product in a register.  Gradients vs float64."""
    program = sd.differentiable_program(_tanh_x)
    x = RNG.standard_normal(8192).astype(np.float32)
    value, grads = program.value_and_grad(x, device=device)
    graph = next(e for e in program._executables.values() if e.graph.meta.get("gradients")).graph
    target = lowering.backends.of(device).target()  # lavapipe's own: a thread per point, tanh not recomputed elsewhere
    p = plan(graph, {}, target)
    full = {a for a in p.stored if p.graph.containers[p.graph.node(a).container].shape == (8192,)}
    assert full == {"x#0", "grad_x#0"}
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(value, np.mean(np.tanh(x64) * x64), rtol=1e-5)
    np.testing.assert_allclose(grads["x"], (np.tanh(x64) + x64 * (1 - np.tanh(x64) ** 2)) / 8192, rtol=1e-4,
                               atol=1e-9)


def _softplus_logsumexp(x: sd.f32[8192]):
    m = np.max(x)
    return np.mean(np.log1p(np.exp(x))) + m + np.log(np.sum(np.exp(x - m)))


def test_a_value_stored_for_the_last_kernel_is_recomputed_there_on_parallel_targets(device):
    """The reverse pass read ``exp(x)`` in its last kernel, stored since its
    first, next to ``x``, which stays live through both: on parallel targets
    it is recomputed there (``cheap_on_gpu``) and its buffer goes.
    Gradients vs float64."""
    program = sd.differentiable_program(_softplus_logsumexp)
    x = RNG.standard_normal(8192).astype(np.float32)
    value, grads = program.value_and_grad(x, device=device)
    graph = next(e for e in program._executables.values() if e.graph.meta.get("gradients")).graph
    target = lowering.backends.of(device).target()
    p = plan(graph, {}, target)
    assert ("exp#0" in p.stored) == target.sequential
    x64 = x.astype(np.float64)
    softmax = np.exp(x64 - x64.max()) / np.sum(np.exp(x64 - x64.max()))
    want = np.mean(np.log1p(np.exp(x64))) + x64.max() + np.log(np.sum(np.exp(x64 - x64.max())))
    np.testing.assert_allclose(value, want, rtol=1e-5)
    np.testing.assert_allclose(grads["x"], 1 / (1 + np.exp(-x64)) / 8192 + softmax, rtol=1e-3, atol=1e-7)


def _max_of_quotient(y0: sd.f32[1, 64, 33], y1: sd.f32[2, 64, 33]):
    return np.mean(np.max(y0 / (y1 * y1 + 0.5), axis=-2))


def test_a_recomputed_maximum_compares_equal_to_the_stored_one(device):
    """Fuzz seed 920071: the max's gradient recomputes ``y0 / d`` to find the maximal
    element, and with ``1 / d`` shared with the derivative's terms it became
    ``y0 * (1 / d)``, a last bit off the stored maximum: no element matched and the
    gradient was lost (codegen keeps reciprocals out of shared terms)."""
    graph = ir.trace(_max_of_quotient).copy()
    sd.add_backward_pass(graph, inputs=["y0", "y1"], outputs=graph.results)
    recomputed = with_recomputed(graph, candidates(graph))
    rng = np.random.default_rng(5)
    inputs = {"y0": rng.standard_normal((1, 64, 33)).astype(np.float32),
              "y1": rng.standard_normal((2, 64, 33)).astype(np.float32)}
    seeds = {s: np.ones((), np.float32) for s in graph.meta["seeds"].values()}
    want = ir.run(graph, {**inputs, **seeds})
    got = lowering.compile(recomputed, device=device)({**inputs, **seeds})
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=2e-4, atol=1e-6, err_msg=name)


def test_recomputing_chains_of_gathers_stays_bounded():
    """ludcmp's reverse pass is a chain of gathers each reading several elements
    of the one before; lavapipe recomputes cheap values where they are read, and
    composed down the chain one tasklet grew to thousands of operations (and its
    planning took seconds).  A tasklet takes a recomputed value only while the
    sum of the sizes stays within ``Tuning.max_recomputed_ops``; sympy's rebuild of
    the sum may come out larger (176 operations here, 2583 unbounded)."""

    def ludcmp(A: sd.f32[6, 6], b: sd.f32[6]):
        x, y = np.zeros_like(b), np.zeros_like(b)
        for i in range(6):
            for j in range(i):
                A[i, j] -= A[i, :j] @ A[:j, j]
                A[i, j] /= A[j, j]
            A[i, i:] -= A[i, :i] @ A[:i, i:]
        for i in range(6):
            y[i] = b[i] - A[i, :i] @ y[:i]
        for i in range(5, -1, -1):
            x[i] = (y[i] - A[i, i + 1:] @ x[i + 1:]) / A[i, i]
        return np.sum(x * x)

    graph = sd.trace(ludcmp)
    sd.add_backward_pass(graph, inputs=["A", "b"], outputs=graph.results)

    def ops(t):
        return sum(sympy.count_ops(b) for b in t.body.values())

    largest = max(ops(t) for t in graph.tasklets())
    p = plan(graph, {}, targets.of("vulkan"))
    grown = max(ops(s.tasklet) for k in p.kernels for s in k.steps)
    assert grown <= max(largest, 2 * backends.vulkan.TARGET.tuning.max_recomputed_ops), (grown, largest)


def _gemm(A: sd.f32[64, 64], B: sd.f32[64, 64], C: sd.f32[64, 64]):
    return np.sum((1.5 * (A @ B) + 1.2 * C) ** 2)


def test_a_value_a_product_reads_stays_a_buffer(device):
    """gemm's reverse pass reads ``G = 2 * y * g`` in ``G B^T`` and ``A^T G``.
    Recomputed there (each target's recompute rule, the CPU device's trial and
    lavapipe's), the products read ``y`` and ``g`` instead and stop being
    products: no tiled kernel, ``G`` computed once per use (512^3 on the CPU
    device: 5.6 -> 171 ms; lavapipe 57.7 -> 222).  Every plan keeps the three
    products.  Gradients vs float64."""
    from symdiff.lowering.matmul import matmul_shape
    program = sd.differentiable_program(_gemm)
    rng = np.random.default_rng(3)
    A, B, C = (rng.standard_normal((64, 64)).astype(np.float32) for _ in range(3))
    value, grads = program.value_and_grad(A, B, C, device=device)
    graph = next(e for e in program._executables.values() if e.graph.meta.get("gradients")).graph
    for target in {lowering.backends.of(device).target(), targets.of("vulkan")}:  # and a GPU's own rules
        p = plan(graph, {}, target)
        assert sum(matmul_shape(p.graph, s.tasklet) is not None for k in p.kernels for s in k.steps) == 3, target
    A64, B64, C64 = (m.astype(np.float64) for m in (A, B, C))
    y = 1.5 * A64 @ B64 + 1.2 * C64
    np.testing.assert_allclose(value, np.sum(y * y), rtol=1e-5)
    np.testing.assert_allclose(grads["A"], 3 * y @ B64.T, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(grads["B"], 3 * A64.T @ y, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(grads["C"], 2.4 * y, rtol=1e-4, atol=1e-3)


def _n_body(x: sd.f32[64], y: sd.f32[64], z: sd.f32[64], m: sd.f32[64]):
    r = np.sqrt((x[:, None] - x[None, :]) ** 2 + (y[:, None] - y[None, :]) ** 2 + (z[:, None] - z[None, :]) ** 2
                + 1e-2)
    return -0.5 * np.sum(m[:, None] * m[None, :] / r)


def test_values_expanding_their_inputs_are_recomputed_on_every_target(device):
    """n-body's pair values (``x[i] - x[j]``, ``r``, the reverse pass's terms
    built on them) are made of elements broadcast along their domain, each a
    4096-element buffer against 1 KiB of inputs and gradients.  Every target's
    plan recomputes them where they are read: the planned buffers stay within
    3x the inputs and gradients (the program's own plan stored 80 KiB).
    Gradients vs float64."""
    from symdiff.lowering.buffer_plan import plan_buffers
    from symdiff.lowering.codegen import generate
    program = sd.differentiable_program(_n_body)
    rng = np.random.default_rng(4)
    args = [rng.standard_normal(64).astype(np.float32) for _ in range(3)] + [rng.uniform(0.5, 1.5, 64).astype(np.float32)]
    value, grads = program.value_and_grad(*args, device=device)
    graph = program.backward_graph()
    inputs_and_gradients = 8 * 64 * 4
    for target in (lowering.backends.of(device).target(), targets.of("vulkan")):  # and a GPU's own rules
        p = plan(graph, {}, target)
        assert plan_buffers(p, generate(p, target), target.sequential)[0].peak_bytes <= 3 * inputs_and_gradients
    x, y, z, m = (a.astype(np.float64) for a in args)
    dx, dy, dz = x[:, None] - x[None, :], y[:, None] - y[None, :], z[:, None] - z[None, :]
    r = np.sqrt(dx * dx + dy * dy + dz * dz + 1e-2)
    mm = m[:, None] * m[None, :]
    np.testing.assert_allclose(value, -0.5 * np.sum(mm / r), rtol=1e-5)
    pull = mm / r ** 3  # each pair counted in both orders: dE/dx_i = sum_j m_i m_j (x_i - x_j) / r^3
    for name, d in (("x", dx), ("y", dy), ("z", dz)):
        want = np.sum(pull * d, axis=1)
        np.testing.assert_allclose(grads[name], want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    want_m = -np.sum(m[None, :] / r, axis=1)
    np.testing.assert_allclose(grads["m"], want_m, rtol=1e-4, atol=1e-4 * np.abs(want_m).max())
