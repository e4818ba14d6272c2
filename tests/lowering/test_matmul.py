"""Register-blocked matmul kernels (lowering.matmul) against the interpreter on every device:
tile edges, thin operands, batches, the transposed forms of the backward pass, fused epilogues."""
import numpy as np
import pytest
import sympy

import symdiff as sd
from symdiff import lowering
from symdiff.ir.graph import index_symbol
from symdiff.lowering.codegen import generate
from symdiff.lowering import backends, targets
from symdiff.lowering.matmul import matmul_shape, matvec_shape, tiling
from symdiff.lowering.plan import plan
from lowering_graphs import G, i, j, k, rng
from test_programs import assert_agrees

b_ = index_symbol("b")


@pytest.fixture(autouse=True)
def generated_products():
    """These tests are about the generated product kernels (which ``export_slang``
    writes for every target): the CPU device's large products would otherwise run
    on the host's BLAS (lowering.host_products, tests/lowering/test_host_products.py)."""
    from dataclasses import replace
    from symdiff.lowering import backends
    with backends.targets_changed(lambda target: replace(target, host_blas=False)):
        yield

# (a index, b index, c index) over (i, j, k): c[i, j] += a * b and the backward pass's transposes
LAYOUTS = {
    "nn": ((i, k), (k, j), (i, j)),
    "tn": ((k, i), (k, j), (i, j)),  # dW = X^T dY
    "nt": ((i, k), (j, k), (i, j)),  # dX = dY W^T
    "out_transposed": ((k, i), (k, j), (j, i)),
}


def matmul_graph(m: int, kk: int, n: int, layout: str = "nn", coeff=1, epilogue: bool = False,
                 dtype: str = "float32"):
    ia, ib, ic = LAYOUTS[layout]
    ext = {i: m, j: n, k: kk}
    shape = lambda ix: tuple(ext[s] for s in ix)  # noqa: E731
    b = G(f"mm_{layout}", dtype).c("a", shape(ia), "argument").c("b", shape(ib), "argument")
    b.c("c", shape(ic), "transient" if epilogue else "result")
    b.t("mm", [(i, 0, m), (j, 0, n), (k, 0, kk)], coeff * b.s("x", "a") * b.s("y", "b"),
        {"x": ("a", ia), "y": ("b", ib)}, ("c", ic), acc="sum")
    if epilogue:
        b.c("h", shape(ic), "result")
        b.t("act", [(i, 0, m), (j, 0, n)], sympy.tanh(b.s("x", "c")) + 1, {"x": ("c", ic)}, ("h", ic))
    r = rng()
    inputs = {"a": r.standard_normal(shape(ia)).astype(dtype), "b": r.standard_normal(shape(ib)).astype(dtype)}
    return b.g, inputs


def kernel_tiling(graph, device):
    p = plan(graph, {})
    return [tiling(p.graph, kern, device) for kern in p.kernels]


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("m, kk, n", [(64, 32, 48), (37, 19, 45), (300, 7, 5), (1, 33, 700), (700, 33, 1),
                                      (9, 1, 300)])
def test_tiled_matmul_matches_interpreter(layout, m, kk, n, device):
    graph, inputs = matmul_graph(m, kk, n, layout)
    assert_agrees(graph, inputs, device, rtol=1e-4, atol=1e-4)


def test_large_outputs_are_tiled_and_edges_are_guarded(device):
    graph, inputs = matmul_graph(123, 40, 601, "tn", coeff=3, epilogue=True)
    (tl,) = kernel_tiling(graph, device)  # the epilogue is fused behind the matmul
    assert tl is not None and tl.threads < 123 * 601
    exe = assert_agrees(graph, inputs, device, rtol=1e-4, atol=1e-4)
    assert "mm_acc" in exe.source and "continue;" in exe.source  # neither 123 nor 601 is a multiple of a tile


def test_matmul_shape_reads_the_backward_forms():
    for layout in LAYOUTS:
        graph, _ = matmul_graph(40, 8, 30, layout)
        (t,) = graph.tasklets()
        shape = matmul_shape(graph, t)
        assert (shape.row, shape.col, shape.k) == (i, j, k)


def test_not_a_matmul():
    # an elementwise product summed over one axis (the same symbols in both reads)
    b = G("rowdot").c("a", (50, 60), "argument").c("b", (50, 60), "argument").c("c", (50,), "result")
    b.t("d", [(i, 0, 50), (k, 0, 60)], b.s("x", "a") * b.s("y", "b"), {"x": ("a", (i, k)), "y": ("b", (i, k))},
        ("c", (i,)), acc="sum")
    (t,) = b.g.tasklets()
    assert matmul_shape(b.g, t) is None
    assert generate(plan(b.g, {}), "cpu").source.count("_acc[") == 0


def test_batched_matmul(device):
    nb, m, kk, n = 3, 33, 17, 29
    b = G("bmm").c("a", (nb, m, kk), "argument").c("b", (nb, kk, n), "argument").c("c", (nb, m, n), "result")
    b.t("bmm", [(b_, 0, nb), (i, 0, m), (j, 0, n), (k, 0, kk)], b.s("x", "a") * b.s("y", "b"),
        {"x": ("a", (b_, i, k)), "y": ("b", (b_, k, j))}, ("c", (b_, i, j)), acc="sum")
    r = rng()
    inputs = {"a": r.standard_normal((nb, m, kk)).astype(np.float32),
              "b": r.standard_normal((nb, kk, n)).astype(np.float32)}
    (tl,) = kernel_tiling(b.g, device)
    assert tl is not None and tl.tile[0] == 1
    assert_agrees(b.g, inputs, device, rtol=1e-4, atol=1e-4)


def test_float64_matmul(device):
    graph, inputs = matmul_graph(70, 20, 50, "nt", dtype="float64")
    assert_agrees(graph, inputs, device, rtol=1e-12, atol=1e-12)


def test_mlp_gradients_through_tiled_kernels(device):
    """Forward matmuls with a fused epilogue, dX = dY W^T, dW = X^T dY and a long
    dW reduction kept whole (not split in two stages) against the interpreter."""
    def mlp(x, w1, b1, w2):
        h = np.tanh(x @ w1 + b1)
        return np.sum((h @ w2) ** 2)

    r = rng(1)
    args = dict(x=r.standard_normal((4100, 24)).astype(np.float32),
                w1=(r.standard_normal((24, 40)) / 5).astype(np.float32), b1=np.zeros(40, np.float32),
                w2=(r.standard_normal((40, 9)) / 6).astype(np.float32))
    program = sd.differentiable_program(mlp)
    value, grads = program.value_and_grad(**args, wrt=["x", "w1", "b1", "w2"], device=device)
    want_value, want = program.value_and_grad(**args, wrt=["x", "w1", "b1", "w2"], device="numpy")
    np.testing.assert_allclose(value, want_value, rtol=1e-4)
    for name in want:
        np.testing.assert_allclose(grads[name], want[name], rtol=1e-3, atol=1e-4 * np.abs(want[name]).max(),
                                   err_msg=name)
    p = plan(program.backward_graph(["x", "w1", "b1", "w2"]), {})
    assert not any("grad_matmul" in kern.name and "stage" in kern.name for kern in p.kernels)
    assert sum(tiling(p.graph, kern, device) is not None for kern in p.kernels) >= 4



def test_each_matmul_of_a_backward_gets_its_own_tiles():
    # dA = G B^T and dB = A^T G have the same output box: fused into one kernel, the second
    # ran one output per thread behind the first's tiles (~1 GFLOP/s; gemm 512 7x slower on the CPU)
    @sd.differentiable_program
    def loss(a: sd.f32[64, 64], b: sd.f32[64, 64]):
        return np.sum((a @ b) ** 2)

    graph = loss.backward_graph(wrt=["a", "b"])
    for device in ("cpu", "vulkan"):
        p = plan(graph, {}, device)
        for kernel in p.kernels:
            matmuls = [s for s in kernel.steps if s.loop and matmul_shape(p.graph, s.tasklet)]
            assert len(matmuls) <= 1, kernel.name
            if matmuls:
                assert tiling(p.graph, kernel, device).step is matmuls[0]
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((64, 64)).astype(np.float32) for _ in range(2))
    _, grads = loss.value_and_grad(a, b)
    g = 2 * a.astype(np.float64) @ b
    np.testing.assert_allclose(grads["a"], g @ b.T, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(grads["b"], a.T.astype(np.float64) @ g, rtol=1e-4, atol=1e-4)


def test_float_coefficient_is_tiled():
    # sympy's as_coeff_mul leaves a Float among the factors: 1.5 * a @ b ran one output per thread
    b = G("scaled").c("a", (40, 30), "argument").c("w", (30, 50), "argument").c("c", (40, 50), "result")
    b.t("mm", [(i, 0, 40), (j, 0, 50), (k, 0, 30)], 1.5 * b.s("a", "a") * b.s("w", "w"),
        {"a": ("a", (i, k)), "w": ("w", (k, j))}, ("c", (i, j)), "sum")
    shape = matmul_shape(b.g, b.g.tasklets()[0])
    assert shape is not None and float(shape.coeff) == 1.5
    g = rng(7)
    a, w = g.normal(size=(40, 30)).astype(np.float32), g.normal(size=(30, 50)).astype(np.float32)
    got = lowering.compile(b.g, device="cpu")({"a": a, "w": w})["c"]
    np.testing.assert_allclose(got, 1.5 * a.astype(np.float64) @ w, rtol=1e-5, atol=1e-5)


# (vector index, matrix index, output index) over (j, k): out += v * m, the two vector-matrix forms
VECTOR_LAYOUTS = {
    "vector_matrix": ((k,), (k, j), (j,)),   # x @ A, and A^T g: the reverse pass of every A @ x
    "matrix_vector": ((k,), (j, k), (j,)),   # A @ x: a thread per output already reads its row along memory
}


def vector_graph(n: int, kk: int, layout: str, coeff=1, dtype: str = "float32"):
    iv, im, io = VECTOR_LAYOUTS[layout]
    ext = {j: n, k: kk}
    shape = lambda ix: tuple(ext[s] for s in ix)  # noqa: E731
    b = G(f"mv_{layout}", dtype).c("v", shape(iv), "argument").c("m", shape(im), "argument")
    b.c("c", shape(io), "result")
    b.t("mv", [(j, 0, n), (k, 0, kk)], coeff * b.s("x", "v") * b.s("y", "m"), {"x": ("v", iv), "y": ("m", im)},
        ("c", io), acc="sum")
    r = rng(3)
    return b.g, {"v": r.standard_normal(shape(iv)).astype(dtype), "m": r.standard_normal(shape(im)).astype(dtype)}


def test_matvec_shape_only_where_the_matrix_runs_with_the_output():
    for layout, want in (("vector_matrix", True), ("matrix_vector", False)):
        graph, _ = vector_graph(300, 20, layout)
        (t,) = graph.tasklets()
        assert matmul_shape(graph, t) is None  # the planner keeps treating it as a reduction
        shape = matvec_shape(graph, t)
        assert (shape is not None) == want, layout
        if want:
            assert (shape.row, shape.col, shape.k) == (None, j, k)


@pytest.mark.parametrize("n, kk", [(300, 37), (256, 5), (1030, 300)])
@pytest.mark.parametrize("layout", sorted(VECTOR_LAYOUTS))
def test_vector_matrix_products_match_interpreter(layout, n, kk, device):
    """Tiled along the output on the CPU device (rows of sums in doubles; 300 and 1030 leave a
    ragged last tile), one output per thread elsewhere and for A @ x."""
    graph, inputs = vector_graph(n, kk, layout, coeff=1.5)
    (tl,) = kernel_tiling(graph, device)
    tiled = device == "cpu" and layout == "vector_matrix"
    assert (tl is not None) == tiled
    exe = assert_agrees(graph, inputs, device, rtol=1e-5, atol=1e-5)
    if tiled:
        assert "double mv_acc[1][" in exe.source
        assert ("continue;" in exe.source) == (n % tl.tile[0] != 0)


def test_float64_vector_matrix_product(device):
    graph, inputs = vector_graph(300, 40, "vector_matrix", dtype="float64")
    assert_agrees(graph, inputs, device, rtol=1e-12, atol=1e-12)


def test_mvt_gradients_through_tiled_vector_products(device):
    """NPBench's mvt at a size whose products are tiled: x1 + A y1 and x2 + y2 A forward, A^T g and
    A g backward; value and gradients against numpy float64."""
    def mvt(x1, x2, y_1, y_2, A):
        return np.sum((x1 + A @ y_1) ** 2) + np.sum((x2 + y_2 @ A) ** 2)

    r = rng(5)
    n = 520
    args = {name: r.standard_normal(n).astype(np.float32) for name in ("x1", "x2", "y_1", "y_2")}
    args["A"] = (r.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32)
    program = sd.differentiable_program(mvt)
    value, grads = program.value_and_grad(**args, wrt=list(args), device=device)
    a = {name: v.astype(np.float64) for name, v in args.items()}
    u, w = a["x1"] + a["A"] @ a["y_1"], a["x2"] + a["y_2"] @ a["A"]
    want = {"x1": 2 * u, "x2": 2 * w, "y_1": a["A"].T @ (2 * u), "y_2": a["A"] @ (2 * w),
            "A": np.outer(2 * u, a["y_1"]) + np.outer(a["y_2"], 2 * w)}
    np.testing.assert_allclose(value, np.sum(u * u) + np.sum(w * w), rtol=1e-5)
    for name, g in want.items():
        np.testing.assert_allclose(grads[name], g, rtol=1e-4, atol=1e-5 * np.abs(g).max(), err_msg=name)
    if device == "cpu":
        p = plan(program.backward_graph(list(args)), {}, device)
        assert sum(tiling(p.graph, kern, device) is not None for kern in p.kernels) >= 2


def test_a_row_kernel_whose_other_steps_loop_is_not_tiled(device):
    """Fuzz seed 840141: ``sum(y @ B)`` plans ``y @ B`` and B's gradient (a loop over
    the row writing each point) in one row kernel; tiling it for the vector-matrix
    product ran the gradient's step once per output and crashed code generation.
    Value and gradients against numpy float64."""
    def f(y, B):
        return np.sum(y @ B)

    r = rng(6)
    y, B = r.standard_normal(4).astype(np.float32), r.standard_normal((4, 4099)).astype(np.float32)
    value, grads = sd.differentiable_program(f).value_and_grad(y, B, device=device)
    np.testing.assert_allclose(value, np.sum(y.astype(np.float64) @ B), rtol=1e-5)
    np.testing.assert_allclose(grads["y"], B.astype(np.float64).sum(axis=1), rtol=1e-5)
    np.testing.assert_allclose(grads["B"], np.repeat(y[:, None], 4099, axis=1), rtol=1e-6)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("m, kk, n", [(45, 233, 512), (131, 370, 97), (100, 700, 256), (31, 70, 45)])
def test_every_form_against_numpy_float64(layout, m, kk, n, device):
    """Each transpose form the reverse pass produces at sizes that are no multiple of the
    CPU device's blocks (micro-kernel rows and columns, tiles, k blocks; the third size is
    past ``cpu_wide_micro_work``, the wide block's, the last under ``cpu_micro_min_work``, which
    takes every target's plain tiles): on the CPU the inner operand is read in place only
    where it runs along the output's inner axis and the tiles cover that axis exactly
    (``A B`` and ``A^T B`` at n = 512 and 256), else packed."""
    graph, inputs = matmul_graph(m, kk, n, layout, coeff=1.5)
    (tl,) = kernel_tiling(graph, device)
    exe = lowering.compile(graph, device=device)
    got = exe(inputs)["c"]
    ia, ib, ic = LAYOUTS[layout]
    want = 1.5 * np.einsum(f"{''.join(map(str, ia))},{''.join(map(str, ib))}->{''.join(map(str, ic))}",
                           inputs["a"].astype(np.float64), inputs["b"].astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    tuning = backends.cpu.TARGET.tuning
    if device == "cpu" and m * kk * n >= tuning.cpu_micro_min_work:
        wide = m * kk * n >= tuning.cpu_wide_micro_work and "-mavx512f" in targets.compiler_args(backends.cpu.TARGET)
        assert tl.micro == (tuning.cpu_micro if wide else tuning.cpu_micro_narrow) and "_sum[" in exe.source
        assert tl.packed_inner == (layout in ("nt", "out_transposed") or n % 32 != 0)
    else:
        assert tl.micro is None and "_pack[" not in exe.source
