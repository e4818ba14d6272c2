"""Products as GEMM calls in the CPU device's program entry (lowering.blas_calls):
a call is one dispatch, and the products it runs (overwriting, adding into a
gradient with ``beta = 1``, scaled, through transposed operands, batched over
heads, float64) agree with the numpy interpreter and JAX in float64 within
float32's rounding (``test_host_products``'s bound: ``(K + 2) u sum_k |a b|``);
without numpy's OpenBLAS the products are launches of their own again.
"""
import re

import numpy as np
import pytest

import symdiff as sd
from symdiff import ir, lowering
from symdiff.lowering import host_blas
from symdiff.lowering.host_products import HostProduct
from lowering_graphs import rng
from test_host_products import EINSUM, U, product_bound, rnn_gradients_agree_with_jax
from test_matmul import matmul_graph

pytestmark = [pytest.mark.skipif("cpu" not in lowering.available_devices(), reason="no CPU device"),
              pytest.mark.skipif(not host_blas.available(), reason="numpy's BLAS is not one host_blas finds")]

GEMM = re.compile(r"\b([sd])gemm\((\d), (\d), (\d+), (\d+), (\d+), ([^,]+), \w+, [^,]+, \d+, \w+, [^,]+, \d+, "
                  r"([^,]+), \w+, [^,]+, \d+\);")


def launches(exe) -> int:
    """Dispatches and host launches a call of ``exe`` makes."""
    (inst,) = exe._instances.values()
    return len(exe._launches(inst))


@pytest.mark.parametrize("layout, coeff, dtype", [("nn", 1, "float32"), ("tn", 3, "float32"),
                                                  ("nt", 1, "float64"), ("out_transposed", -0.5, "float32")])
def test_a_product_overwrites_its_output_in_one_dispatch(layout, coeff, dtype):
    """Each form the reverse pass writes: transposed operands, a column-major
    output (BLAS writes its transpose), a coefficient as ``alpha``, ``beta = 0``."""
    graph, inputs = matmul_graph(70, 65, 80, layout, coeff=coeff, dtype=dtype, epilogue=True)
    exe = lowering.compile(graph, "cpu")
    got = exe(inputs)
    ((letter, *_, alpha, beta),) = GEMM.findall(exe.source)
    assert letter == ("s" if dtype == "float32" else "d") and float(beta.rstrip("fl")) == 0
    assert float(alpha.rstrip("fl")) == coeff
    assert launches(exe) == 1  # the product and its epilogue in one program dispatch
    u = float(np.finfo(dtype).eps) / 2
    # tanh(c) + 1 moves by at most |dc|, plus its own rounding
    bound = product_bound(inputs["a"], inputs["b"], EINSUM[layout], coeff) * (u / U) + 4 * u
    exact = np.tanh(coeff * np.einsum(EINSUM[layout], *(inputs[n].astype(np.float64) for n in "ab"))) + 1
    assert np.all(np.abs(got["h"] - exact) <= bound)
    assert np.all(np.abs(got["h"] - ir.run(graph, inputs)["h"]) <= 2 * bound)  # the interpreter rounds alike

def test_an_unrolled_rnn_adds_every_steps_gradient_in_one_dispatch():
    """Each step's ``h^T g`` adds into the recurrent weight's gradient as a GEMM with
    ``beta = 1``, the mean's scale times the seed is its ``alpha``, and the whole
    ``value_and_grad`` is one dispatch; value and gradients against JAX in float64.
    The input weight's products over all the steps are one GEMM each way
    (``ir.batch_products``): its gradient's contraction runs over steps and rows."""
    (exe,) = rnn_gradients_agree_with_jax()._executables.values()
    gemms = GEMM.findall(exe.source)
    assert sum(float(beta.rstrip("fl")) == 1 for *_, beta in gemms) >= 3  # 3 of 4 steps add into wh's
    assert any(m == "32" and k == "24" for _, _, _, m, n, k, _, _ in gemms)  # xs @ wx: 4 steps of 8 rows
    assert launches(exe) == 1


def test_batched_heads_are_a_loop_of_gemms():
    """Attention's ``q @ k^T`` and ``p @ v`` over head-split views, and their
    gradients: one GEMM a (batch, head), in loops over them; ``o @ wo`` over the
    heads merged back, whose rows (batch, token) and reduced axes (head, d) do
    not merge: one GEMM a batch and head, the heads after the first adding into
    the output; against JAX in float64."""
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)

    def attention(xp, x, wq, wk, wv, wo):
        def split(t):
            return xp.swapaxes(xp.reshape(t, (2, 16, 4, 8)), 1, 2)
        q, k, v = split(x @ wq), split(x @ wk), split(x @ wv)
        s = q @ xp.swapaxes(k, 2, 3) * (1.0 / 8 ** 0.5)
        p = xp.exp(s - xp.max(s, axis=-1, keepdims=True))
        p = p / xp.sum(p, axis=-1, keepdims=True)
        o = xp.reshape(xp.swapaxes(p @ v, 1, 2), (2, 16, 32))
        return xp.mean((o @ wo) ** 2)

    def program(x: sd.f32[2, 16, 32], wq: sd.f32[32, 32], wk: sd.f32[32, 32], wv: sd.f32[32, 32], wo: sd.f32[32, 32]):
        return attention(np, x, wq, wk, wv, wo)
    r = rng(8)
    args = [r.standard_normal((2, 16, 32)).astype(np.float32)] + \
        [(r.standard_normal((32, 32)) / 6).astype(np.float32) for _ in range(4)]
    prog = sd.differentiable_program(program)
    value, got = prog.value_and_grad(*args, wrt=["x", "wq", "wk", "wv", "wo"], device="cpu")
    (exe,) = prog._executables.values()
    assert "for (int b1 = 0; b1 < 4; b1++)" in exe.source  # batch and head loops around a GEMM
    assert "(b1 == 0 ? 0.0f : 1.0f)" in exe.source  # o @ wo: the second head on adds
    assert launches(exe) == 1
    want_value, want = jax.jit(jax.value_and_grad(lambda *a: attention(jnp, *a), argnums=(0, 1, 2, 3, 4)))(
        *[jnp.asarray(a, jnp.float64) for a in args])
    assert abs(value - float(want_value)) <= 1e-4 * abs(float(want_value))
    for name, g in zip(["x", "wq", "wk", "wv", "wo"], want):
        g = np.asarray(g)
        assert np.max(np.abs(got[name] - g)) <= 1e-4 * np.max(np.abs(g)), name


def test_without_numpy_openblas_a_product_is_a_launch_of_its_own(monkeypatch):
    """Where ``host_blas`` finds no library the module calls none, and the
    runtime runs the product between launches as before."""
    monkeypatch.setattr(host_blas, "library", lambda: None)
    graph, inputs = matmul_graph(70, 65, 80, "nn", epilogue=True)
    exe = lowering.compile(graph, "cpu")
    assert not GEMM.findall(exe.source) and "numpy.matmul (BLAS) between launches" in exe.source
    got = exe(inputs)["h"]
    assert launches(exe) == 2  # the product on the host, then its epilogue's dispatch
    exact = np.tanh(np.einsum(EINSUM["nn"], *(inputs[n].astype(np.float64) for n in "ab"))) + 1
    assert np.all(np.abs(got - exact) <= product_bound(inputs["a"], inputs["b"], EINSUM["nn"]) + 4 * U)


def test_a_view_blas_cannot_read_stays_a_launch_of_its_own():
    """A diagonal ``a[i, k, k]`` has no unit stride: no GEMM reads it, and the
    product is computed between launches by ``numpy.matmul`` over a copy."""
    from lowering_graphs import G, i, j, k
    n, m = 20, 19
    g = G("diagonal").c("a", (n, m, m), "argument").c("b", (m, n), "argument").c("c", (n, n), "result")
    g.t("d", [(i, 0, n), (j, 0, n), (k, 0, m)], g.s("x", "a") * g.s("y", "b"),
        {"x": ("a", (i, k, k)), "y": ("b", (k, j))}, ("c", (i, j)), acc="sum")
    r = rng(4)
    inputs = {"a": r.standard_normal((n, m, m)).astype(np.float32), "b": r.standard_normal((m, n)).astype(np.float32)}
    exe = lowering.compile(g.g, "cpu")
    got = exe(inputs)["c"]
    (inst,) = exe._instances.values()
    ((product, *_),) = exe._launches(inst)  # one launch: the product on the host
    assert not GEMM.findall(exe.source) and isinstance(product, HostProduct)
    diag = np.einsum("ikk->ik", inputs["a"])
    want = diag.astype(np.float64) @ inputs["b"].astype(np.float64)
    assert np.all(np.abs(got - want) <= product_bound(diag, inputs["b"], "ik,kj->ij"))


def test_a_product_writing_the_buffer_it_reads_is_no_gemm():
    """BLAS would read elements it has already written: such a product (its output
    placed in an operand's buffer) stays a launch, whose numpy fallback copies."""
    from symdiff.lowering.host_products import Operand
    a = Operand("a", 16, (("i", 4), ("k", 1)), 0, "i, k")
    b = Operand("b", 16, (("k", 4), ("j", 1)), 0, "k, j")
    ranges = (("i", 0, 4), ("j", 0, 4), ("k", 0, 4))
    separate = HostProduct(Operand("c", 16, (("i", 4), ("j", 1)), 0, "i, j"), a, b, ranges, ("i",), ("j",), ("k",),
                           1.0, False, "float32")
    assert separate.gemms() is not None
    over_a = HostProduct(Operand("a", 16, (("i", 4), ("j", 1)), 0, "i, j"), a, b, ranges, ("i",), ("j",), ("k",),
                         1.0, False, "float32")
    assert over_a.gemms() is None
