"""Products the host's BLAS computes on the CPU device (lowering.host_products):
every form the reverse pass writes, batches, a coefficient, two products adding
into one gradient, against float64 references with bounds from the arithmetic;
and where they are used (the CPU device, from ``Tuning.host_blas_min_work``) and where not
(GPU targets, standalone exports).

A float32 dot product of ``K`` terms is within ``K u sum_k |a_k b_k|`` of the
exact one whatever the summation order (u: float32's unit roundoff); BLAS and
the generated kernels sum in different orders, so the bound, not a tolerance
copied from a run, is what a correct product meets.  A transposed or misplaced
operand misses it by orders of magnitude.
"""
from dataclasses import replace

import numpy as np
import pytest
import sympy

import symdiff as sd
from symdiff import lowering
from symdiff.lowering import backends, host_blas, runtime
from symdiff.lowering.export import export
from symdiff.lowering.host_products import HostProduct
from symdiff.lowering.plan import plan
from symdiff.lowering.plan_types import HostKernel
from symdiff.ir.graph import index_symbol
from lowering_graphs import G, i, j, k, rng
from test_matmul import LAYOUTS, b_, matmul_graph

U = float(np.finfo(np.float32).eps) / 2
cpu_only = pytest.mark.skipif("cpu" not in lowering.available_devices(), reason="no CPU device")


def product_bound(a: np.ndarray, b: np.ndarray, subscripts: str, coeff: float = 1.0) -> np.ndarray:
    """Per output element: ``(K + 2) u |coeff| sum_k |a b|`` (the sum's rounding, the
    inputs' float32 rounding and the coefficient's product)."""
    kk = a.shape[subscripts.split(",")[0].index("k")]
    return (kk + 2) * U * abs(coeff) * np.einsum(subscripts, np.abs(a.astype(np.float64)), np.abs(b.astype(np.float64)))


def on_host(graph, sizes=None) -> int:
    """How many of the CPU device's kernels for ``graph`` the host computes."""
    return sum(isinstance(kern, HostKernel) for kern in plan(graph, dict(sizes or {}), backends.of("cpu").target()).kernels)


EINSUM = {"nn": "ik,kj->ij", "tn": "ki,kj->ij", "nt": "ik,jk->ij", "out_transposed": "ki,kj->ji"}


@cpu_only
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_every_form_meets_the_float32_bound(layout):
    graph, inputs = matmul_graph(131, 129, 127, layout, coeff=3)
    assert on_host(graph) == 1
    got = lowering.compile(graph, "cpu")(inputs)["c"]
    a, b = inputs["a"], inputs["b"]
    want = 3 * np.einsum(EINSUM[layout], a.astype(np.float64), b.astype(np.float64))
    bound = product_bound(a, b, EINSUM[layout], 3)
    assert np.all(np.abs(got - want) <= bound), float(np.max(np.abs(got - want) / bound))


@cpu_only
def test_a_batch_with_an_operand_shared_by_every_member():
    """``c[b, i, j] = a[b, i, k] w[k, j]``: the shared operand broadcasts over the batch."""
    nb, m, kk, n = 3, 100, 90, 110
    g = G("bmm").c("a", (nb, m, kk), "argument").c("w", (kk, n), "argument").c("c", (nb, m, n), "result")
    g.t("bmm", [(b_, 0, nb), (i, 0, m), (j, 0, n), (k, 0, kk)], g.s("x", "a") * g.s("y", "w"),
        {"x": ("a", (b_, i, k)), "y": ("w", (k, j))}, ("c", (b_, i, j)), acc="sum")
    r = rng()
    inputs = {"a": r.standard_normal((nb, m, kk)).astype(np.float32), "w": r.standard_normal((kk, n)).astype(np.float32)}
    assert on_host(g.g) == 1
    got = lowering.compile(g.g, "cpu")(inputs)["c"]
    want = np.einsum("bik,kj->bij", inputs["a"].astype(np.float64), inputs["w"].astype(np.float64))
    assert np.all(np.abs(got - want) <= product_bound(inputs["a"], inputs["w"], "bik,kj->bij"))


@cpu_only
def test_two_products_add_into_one_gradient():
    """``w`` is used twice: its gradient is the sum of two host products (the second adds)."""
    def two_uses(x1: sd.f32[160, 120], x2: sd.f32[160, 120], w: sd.f32[120, 130]):
        return np.sum(np.tanh(x1 @ w)) + np.sum((x2 @ w) ** 2)
    program = sd.differentiable_program(two_uses)
    r = rng(2)
    args = [(r.standard_normal(s) / 8).astype(np.float32) for s in [(160, 120), (160, 120), (120, 130)]]
    graph = program.backward_graph(["w"])
    assert on_host(graph) >= 3
    _, got = program.value_and_grad(*args, wrt=["w"], device="cpu")
    x1, x2, w = (a.astype(np.float64) for a in args)
    want = x1.T @ (1 - np.tanh(x1 @ w) ** 2) + x2.T @ (2 * (x2 @ w))
    scale = np.abs(x1).T @ np.ones((160, 130)) + np.abs(x2).T @ np.abs(2 * (x2 @ w))
    # each term's factor from the forward product carries its own rounding: a few times K u
    assert np.all(np.abs(got["w"] - want) <= 8 * 122 * U * scale), float(np.max(np.abs(got["w"] - want)))


@cpu_only
def test_mlp_gradients_match_the_interpreter_in_float64():
    """An MLP's value and gradients on the CPU device (host products, fused Slang
    epilogues) against the interpreter in float64 on the same float32 inputs."""
    def mlp(x, w1, b1, w2):
        h = np.tanh(x @ w1 + b1)
        return np.mean((h @ w2) ** 2)
    r = rng(1)
    shapes = {"x": (256, 96), "w1": (96, 128), "b1": (128,), "w2": (128, 70)}
    args = {n: (r.standard_normal(s) / 4).astype(np.float32) for n, s in shapes.items()}
    program = sd.differentiable_program(mlp)
    value, grads = program.value_and_grad(**args, device="cpu")
    assert on_host(program.backward_graph(list(shapes))) >= 4
    want_value, want = program.value_and_grad(**{n: a.astype(np.float64) for n, a in args.items()}, device="numpy")
    # float32 everywhere: each result a few products of 96-128 terms deep, all of magnitude <= ~1
    assert abs(value - want_value) <= 64 * 128 * U * abs(want_value)
    for name, g in want.items():
        assert np.max(np.abs(grads[name] - g)) <= 64 * 128 * U * np.max(np.abs(g)), name


def test_only_the_cpu_target_and_only_from_min_work():
    small, _ = matmul_graph(8, 8, 8, "nn")  # 512 multiply-adds
    large, _ = matmul_graph(16, 64, 64, "nn")  # a small RNN's step
    assert 8 * 8 * 8 < backends.cpu.TARGET.tuning.host_blas_min_work <= 16 ** 3
    assert on_host(small) == 0 and on_host(large) == 1
    for target in (backends.vulkan.TARGET, backends.cuda.TARGET, backends.vulkan.LAVAPIPE):
        assert not any(isinstance(kern, HostKernel) for kern in plan(large, {}, target).kernels)


@pytest.fixture
def host_launches(monkeypatch):
    """Products as launches of their own, between the Slang launches (the way
    taken where numpy's OpenBLAS is not found, or BLAS cannot read a view as it
    is), rather than GEMM calls in the program entry (``lowering.blas_calls``)."""
    monkeypatch.setattr(HostProduct, "gemms", lambda self: None)


def test_the_module_names_the_product_the_host_computes(host_launches):
    graph, _ = matmul_graph(130, 130, 130, "tn")
    source = lowering.codegen.generate(plan(graph, {}, backends.cpu.TARGET), backends.cpu.TARGET).source
    assert "computed on the host, numpy.matmul (BLAS)" in source
    assert "c_v0[i, j] = sum over k of a_v0[k, i] * b_v0[k, j]" in source
    assert "void k0_mm" not in source  # no Slang kernel for it


def test_a_standalone_export_keeps_every_product_in_slang():
    graph, _ = matmul_graph(130, 130, 130, "nn")
    module = export(graph, target="cpu")
    assert "computed on the host" not in module.source and "mm_acc" in module.source


@cpu_only
def test_operands_read_through_views_of_their_containers():
    """Affine indices are strided views: a diagonal ``a[i, k, k]``, an offset and a
    stride (``b[2k + 1, j]``, a slice's step), a reshape's ``c[i, 4h + d]``."""
    n, m, h = 130, 129, 4
    g = G("views").c("a", (n, m, m), "argument").c("b", (2 * m + 1, n), "argument").c("c", (n, n), "result")
    g.t("d", [(i, 0, n), (j, 0, n), (k, 0, m)], g.s("x", "a") * g.s("y", "b"),
        {"x": ("a", (i, k, k)), "y": ("b", (2 * k + 1, j))}, ("c", (i, j)), acc="sum")
    r = rng(3)
    inputs = {"a": r.standard_normal((n, m, m)).astype(np.float32),
              "b": r.standard_normal((2 * m + 1, n)).astype(np.float32)}
    assert on_host(g.g) == 1
    got = lowering.compile(g.g, "cpu")(inputs)["c"]
    diag, rows = np.einsum("ikk->ik", inputs["a"]), inputs["b"][1::2]
    want = diag.astype(np.float64) @ rows.astype(np.float64)
    assert np.all(np.abs(got - want) <= product_bound(diag, rows, "ik,kj->ij"))

    q = G("heads").c("x", (n, h * 33), "argument").c("w", (33, n), "argument").c("o", (h, n, n), "result")
    hh = b_
    q.t("p", [(hh, 0, h), (i, 0, n), (j, 0, n), (k, 0, 33)], q.s("x", "x") * q.s("y", "w"),
        {"x": ("x", (i, 33 * hh + k)), "y": ("w", (k, j))}, ("o", (hh, i, j)), acc="sum")
    inputs = {"x": r.standard_normal((n, h * 33)).astype(np.float32), "w": r.standard_normal((33, n)).astype(np.float32)}
    assert on_host(q.g) == 1
    got = lowering.compile(q.g, "cpu")(inputs)["o"]
    heads = np.moveaxis(inputs["x"].reshape(n, h, 33), 1, 0)
    want = heads.astype(np.float64) @ inputs["w"].astype(np.float64)
    assert np.all(np.abs(got - want) <= product_bound(heads, inputs["w"], "hik,kj->hij"))


def test_an_index_that_is_not_affine_stays_a_slang_kernel():
    """``a[i, k // 2]`` is no strided view: not a host product."""
    n = 140
    g = G("floor").c("a", (n, n), "argument").c("b", (2 * n, n), "argument").c("c", (n, n), "result")
    g.t("d", [(i, 0, n), (j, 0, n), (k, 0, 2 * n)], g.s("x", "a") * g.s("y", "b"),
        {"x": ("a", (i, sympy.floor(k / 2))), "y": ("b", (k, j))}, ("c", (i, j)), acc="sum")
    assert on_host(g.g) == 0


@pytest.fixture
def any_size():
    """Products of any size go to the host: the forms below at unit-test sizes."""
    with backends.targets_changed(lambda t: replace(t, tuning=replace(t.tuning, host_blas_min_work=1))):
        yield


h_, d_ = index_symbol("h"), index_symbol("d")


def run_on_host(g: G, inputs: dict, result: str) -> np.ndarray:
    assert on_host(g.g) == 1
    return lowering.compile(g.g, "cpu")(inputs)[result]


@cpu_only
def test_a_head_split_reduced_axis_two_reduced_axes_and_a_seed(any_size):
    """Attention's reverse pass: the heads merged back (``x[b, m // 8, i, m % 8]``,
    its reduced ``m`` split in two), a weight gradient summed over batch and rows
    (two reduced symbols), and the seed of the mean as a one-element factor."""
    nb, nh, n, dh, o = 2, 3, 20, 8, 17
    m = index_symbol("m")
    g = (G("merge").c("x", (nb, nh, n, dh), "argument").c("w", (nh * dh, o), "argument").c("s", (), "argument")
         .c("y", (nb, n, o), "result"))
    g.t("merge", [(b_, 0, nb), (i, 0, n), (j, 0, o), (m, 0, nh * dh)],
        g.s("x", "x") * g.s("y", "w") * g.s("z", "s") / 5,
        {"x": ("x", (b_, sympy.floor(m / dh), i, sympy.Mod(m, dh))), "y": ("w", (m, j)), "z": ("s", ())},
        ("y", (b_, i, j)), acc="sum")
    r = rng(4)
    inputs = {"x": r.standard_normal((nb, nh, n, dh)).astype(np.float32),
              "w": r.standard_normal((nh * dh, o)).astype(np.float32), "s": np.float32(1.5)}
    got = run_on_host(g, inputs, "y")
    merged = np.moveaxis(inputs["x"], 1, 2).reshape(nb, n, nh * dh)
    want = np.einsum("bik,kj->bij", merged.astype(np.float64), inputs["w"].astype(np.float64)) * 1.5 / 5
    assert np.all(np.abs(got - want) <= product_bound(merged, inputs["w"], "bik,kj->bij", 0.3))

    q = G("weights").c("x", (nb, n, o), "argument").c("g", (nb, n, dh), "argument").c("dw", (o, dh), "result")
    q.t("dw", [(b_, 0, nb), (i, 0, n), (j, 0, o), (k, 0, dh)], q.s("x", "x") * q.s("y", "g"),
        {"x": ("x", (b_, i, j)), "y": ("g", (b_, i, k))}, ("dw", (j, k)), acc="sum")
    inputs = {"x": r.standard_normal((nb, n, o)).astype(np.float32), "g": r.standard_normal((nb, n, dh)).astype(np.float32)}
    got = run_on_host(q, inputs, "dw")
    x2, g2 = inputs["x"].reshape(nb * n, o), inputs["g"].reshape(nb * n, dh)
    want = x2.T.astype(np.float64) @ g2.astype(np.float64)
    assert np.all(np.abs(got - want) <= product_bound(x2, g2, "ki,kj->ij"))


@cpu_only
def test_an_output_written_through_a_head_merge(any_size):
    """``out[b, i, 8 h + d]`` (the heads' gradient written back into one row) is a
    strided view of the output: the product writes into it in place."""
    nb, nh, n, dh = 2, 3, 12, 8
    g = G("split").c("p", (nb, nh, n, n), "argument").c("v", (nb, n, nh * dh), "argument")
    g.c("o", (nb, n, nh * dh), "result")
    g.t("pv", [(b_, 0, nb), (h_, 0, nh), (i, 0, n), (d_, 0, dh), (k, 0, n)], g.s("x", "p") * g.s("y", "v"),
        {"x": ("p", (b_, h_, i, k)), "y": ("v", (b_, k, dh * h_ + d_))}, ("o", (b_, i, dh * h_ + d_)), acc="sum")
    r = rng(5)
    inputs = {"p": r.standard_normal((nb, nh, n, n)).astype(np.float32),
              "v": r.standard_normal((nb, n, nh * dh)).astype(np.float32)}
    got = run_on_host(g, inputs, "o")
    heads = inputs["v"].reshape(nb, n, nh, dh).transpose(0, 2, 1, 3)
    want = (inputs["p"].astype(np.float64) @ heads.astype(np.float64)).transpose(0, 2, 1, 3).reshape(nb, n, nh * dh)
    bound = product_bound(inputs["p"], heads, "bhik,bhkd->bhid").transpose(0, 2, 1, 3).reshape(nb, n, nh * dh)
    assert np.all(np.abs(got - want) <= bound)


def test_an_output_whose_points_overlap_stays_a_slang_kernel(any_size):
    """``c[i + j]`` sums several points into one element: no view numpy writes."""
    n = 30
    g = G("overlap").c("a", (n, n), "argument").c("b", (n, n), "argument").c("c", (2 * n,), "result")
    g.t("d", [(i, 0, n), (j, 0, n), (k, 0, n)], g.s("x", "a") * g.s("y", "b"),
        {"x": ("a", (i, k)), "y": ("b", (k, j))}, ("c", (i + j,)), acc="sum")
    assert on_host(g.g) == 0


@cpu_only
def test_calls_over_new_buffers_compute_into_them(any_size, host_launches):
    """A product's run is kept per set of buffers (``HostProduct.bound``): calls with
    new argument arrays, and with earlier results still held (each call's result in
    a buffer of its own), each compute into their own.  The output ``c[j, i] = 3
    sum_k a[k, i] b[k, j]`` is column-major and scaled: BLAS writes it through its
    transpose, then it is multiplied in place."""
    graph, first = matmul_graph(40, 30, 50, "out_transposed", coeff=3)
    exe = lowering.compile(graph, "cpu")
    r = rng(6)
    calls = [first] + [{n: r.standard_normal(a.shape).astype(np.float32) for n, a in first.items()} for _ in range(3)]
    results = [exe({n: lowering.asarray(a, "cpu") for n, a in inputs.items()}, return_device_arrays=True)["c"]
               for inputs in calls[:3]] + [exe(calls[3])["c"]]
    assert len({id(res.buffer) for res in results[:3]}) == 3
    for inputs, got in zip(calls, results):
        want = 3 * np.einsum(EINSUM["out_transposed"], inputs["a"].astype(np.float64), inputs["b"].astype(np.float64))
        assert np.all(np.abs(np.asarray(got) - want) <= product_bound(inputs["a"], inputs["b"], EINSUM["out_transposed"], 3))


@cpu_only
def test_every_launch_keeps_its_binding_between_calls(any_size, monkeypatch, host_launches):
    """Each launch's root shader object and each host product's run are made once and
    kept for ``runtime.RECORDED_BINDINGS`` sets of buffers per launch: with room for
    one set, a second call over the same buffers makes none again (a cap that counted
    objects rather than sets threw an unrolled RNN's 254 away on every call)."""
    monkeypatch.setattr(runtime, "RECORDED_BINDINGS", 1)
    graph, inputs = matmul_graph(40, 30, 50, "nn", epilogue=True)
    exe = lowering.compile(graph, "cpu")
    first = exe(inputs)["h"]
    (inst,) = exe._instances.values()
    kept = dict(inst.bound)
    assert len(kept) == len(exe._launches(inst)) == 2  # the product on the host, then its epilogue kernel
    np.testing.assert_array_equal(exe(inputs)["h"], first)
    assert all(inst.bound[key] is entry for key, entry in kept.items())


@cpu_only
def test_an_unrolled_rnn_adds_every_steps_weight_gradient_in_place(monkeypatch, host_launches):
    """Each step's ``h^T g`` adds into the recurrent weight's gradient as one GEMM
    with ``beta = 1`` (``host_blas``: no temporary, no pass adding it), and the mean's
    scale is GEMM's ``alpha``; value and gradients against JAX in float64.  (The input
    weight's products are one over all the steps: ``ir.batch_products``.)"""
    betas = []
    real = host_blas.gemm

    def counted(a, b, c):
        run = real(a, b, c)
        return None if run is None else lambda alpha, beta: (betas.append(beta), run(alpha, beta))
    monkeypatch.setattr(host_blas, "gemm", counted)
    rnn_gradients_agree_with_jax()
    assert betas.count(1.0) >= 3  # 3 of the 4 steps add into wh's gradient


def rnn_gradients_agree_with_jax() -> sd.DifferentiableProgram:
    """A 4-step RNN's ``value_and_grad`` on the CPU device against JAX in float64
    (its weights' gradients add a product a step); the program, for its executable."""
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)

    def rnn(xp, xs, h, wx, wh):
        for t in range(4):
            h = xp.tanh(xs[t] @ wx + h @ wh)
        return xp.mean(h * h)

    def program(xs: sd.f32[4, 8, 24], h: sd.f32[8, 32], wx: sd.f32[24, 32], wh: sd.f32[32, 32]):
        return rnn(np, xs, h, wx, wh)
    r = rng(7)
    args = [(r.standard_normal(s) / 4).astype(np.float32) for s in [(4, 8, 24), (8, 32), (24, 32), (32, 32)]]
    prog = sd.differentiable_program(program)
    value, got = prog.value_and_grad(*args, wrt=["wx", "wh"], device="cpu")
    want_value, want = jax.jit(jax.value_and_grad(lambda *a: rnn(jnp, *a), argnums=(2, 3)))(
        *[jnp.asarray(a, jnp.float64) for a in args])
    assert abs(value - float(want_value)) <= 64 * 32 * U * abs(float(want_value))
    for name, g in zip(["wx", "wh"], want):
        g = np.asarray(g)
        assert np.max(np.abs(got[name] - g)) <= 64 * 32 * U * np.max(np.abs(g)), name
    return prog
