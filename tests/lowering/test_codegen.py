"""Generated Slang: readable structure, large dispatches, compile errors quoted."""
from dataclasses import replace

import numpy as np
import pytest
import sympy

import symdiff as sd
from symdiff import lowering
from symdiff.lowering import backends
from symdiff.lowering.printer import SlangPrinter
from lowering_graphs import G, chain, i, matmul


def test_module_names_kernels_and_their_tasklets_with_source_lines():
    g, _ = chain(64, ops=3)
    exe = lowering.compile(g, device="cpu")
    src = exe.source
    assert src.count("void k0_op0_main(") == 1 and "void k1_" not in src  # one fused kernel
    assert "void run_program(uniform int first, uniform int last" in src  # the CPU device's single entry point
    assert "k0_op0_over_64x1(x_v0, y_v0);" in src  # called for each of its threads, counted in its runner
    assert "for (int x = 0; x < 64; x++)" in src
    assert "k0_op0(uint3(x, y, 0), x_v0, y_v0);" in src  # by its runner
    assert "// kernel k0_op0: 3 tasklet(s)" in src
    assert "op0 (chain.py:1), op1 (chain.py:2), op2 (chain.py:3)" in src
    assert "// tasklet op1 (chain.py:2)" in src
    assert "RWStructuredBuffer<float> x_v0" in src and "h0_v0" not in src  # intermediates in registers


def test_reduction_loop_and_matmul_read_like_loops():
    with backends.targets_changed(lambda target: replace(target, host_blas=False)):  # products as Slang kernels
        g, _ = matmul()
        src = lowering.compile(g, device="cpu").source
        # register-blocked (lowering.matmul; under Tuning.cpu_micro_min_work: every target's tiles)
        assert "for (int mm_r = 0; mm_r < 17; mm_r++)" in src
        assert "matmul_acc[mm_u][mm_v] += matmul_a[mm_u] * matmul_w;" in src
        g, _ = matmul(m=20)  # too few outputs to tile: one thread per output
        src = lowering.compile(g, device="cpu").source
        assert "for (int block = 0; block < 16; block += 8)" in src  # 8 lanes on the CPU device, then the rest
        # float32 sums accumulate in double, rounded once after the loop
        assert "matmul_o_acc_lanes[lane] = matmul_o_acc_lanes[lane] + double(matmul_a*matmul_w);" in src
        assert "float matmul_o = float(matmul_o_acc);" in src
        assert "for (int r = 16; r < 17; r++)" in src


def test_arrays_beyond_one_dispatch_row_use_a_2d_grid(device):
    n = 65535 * 256 + 1000
    b = G("big").c("x", (n,), "argument").c("y", (n,), "result")
    b.t("affine", [(i, 0, n)], 2 * b.s("x", "x") + 1, {"x": ("x", (i,))}, ("y", (i,)))
    x = np.arange(n, dtype=np.float32) % 1024
    y = lowering.compile(b.g, device=device)({"x": x})["y"]
    assert y[-1] == 2 * x[-1] + 1 and y[65535 * 256] == 2 * x[65535 * 256] + 1
    np.testing.assert_array_equal(y, 2 * x + 1)


def test_a_slang_compile_error_quotes_the_generated_line(monkeypatch):
    monkeypatch.setattr(SlangPrinter, "_print_Heaviside", lambda self, e: "no_such_fn(42)", raising=False)
    b = G("broken").c("x", (8,), "argument").c("y", (8,), "result")
    b.t("step_fn", [(i, 0, 8)], sympy.Heaviside(b.s("x", "x")) * 3, {"x": ("x", (i,))}, ("y", (i,)))
    with pytest.raises(lowering.SlangGenerationError) as err:
        lowering.compile(b.g, device="cpu")
    message = str(err.value)
    assert "undefined identifier" in message
    assert "float step_fn_o = 3.0f*no_such_fn(42);" in message.splitlines()[1]


def _scaled_squares(x: sd.f32[4096, 512], g: sd.f32[512]):
    return np.sum((x * g) ** 2 + x * g)


def test_column_sums_run_rows_outer_on_the_cpu_device():
    """The gradient of ``g`` sums down the columns of ``x``: on the CPU device
    each thread's neighbouring columns are summed with the rows outer and the
    points inner (``columns_interchanged``), so a row's loads run along
    memory.  Gradients vs float64."""
    program = sd.differentiable_program(_scaled_squares)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4096, 512)).astype(np.float32)
    g = rng.standard_normal(512).astype(np.float32)
    value, grads = program.value_and_grad(x, g, device="cpu")
    exe = next(e for e in program._executables.values() if e.graph.meta.get("gradients"))
    assert "rows outer" in exe.source
    y = x.astype(np.float64) * g.astype(np.float64)
    np.testing.assert_allclose(value, np.sum(y * y + y), rtol=1e-5)
    np.testing.assert_allclose(grads["g"], np.sum((2 * y + 1) * x.astype(np.float64), axis=0), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(grads["x"], (2 * y + 1) * g.astype(np.float64), rtol=1e-4, atol=1e-5)
