"""CPU point loops (lowering.kernels.writer.frame): a thread's points within one row take the
row's leading coordinates once; points crossing rows run as rows of the box
(lowering.threads.Threads.open_rows), every coordinate but the last once a row, the last the
counter of a plain inner loop, so that g++ vectorises it.  Values against the
interpreter and gradients against JAX in float64, for rows a thread's points cross, start
mid-way or hold several of (rows shorter than a thread's run), rows too short for the row
loop, 1-d and 3-d boxes and broadcast operands; and g++'s own report that the loops vectorise."""
import re
import shutil
import subprocess

import numpy as np
import pytest
import sympy

import symdiff as sd
from symdiff.lowering import backends, targets
from symdiff.lowering.codegen import PROGRAM
from lowering_graphs import G, i, j, k, rng
import slang_compiler
from test_programs import assert_agrees


def outer_graph(shape: tuple[int, ...]):
    """o[i, (j,) k] = u[i] * w[k] + tanh(v[j or i] * w[k]): per-axis reads of an elementwise box."""
    axes = (i, j, k)[-len(shape):] if len(shape) == 3 else (i, k)
    b = G("outer").c("u", (shape[0],), "argument").c("v", (shape[-2],), "argument").c("w", (shape[-1],), "argument")
    b.c("o", shape, "result")
    b.t("t", [(s, 0, n) for s, n in zip(axes, shape)],
        b.s("x", "u") * b.s("z", "w") + sympy.tanh(b.s("y", "v") * b.s("z", "w")),
        {"x": ("u", (axes[0],)), "y": ("v", (axes[-2],)), "z": ("w", (axes[-1],))}, ("o", axes))
    r = rng(2)
    return b.g, {c: r.standard_normal(b.g.containers[c].shape).astype("float32") for c in "uvw"}


# (64, 1024), (4, 8, 1024): each thread's 256 points in one row (the leading coordinates the
# thread's own); (96, 700): 262 points a thread, starting mid-row and crossing into the next;
# (3, 300, 17): rows of 17 shorter than a thread's 59 points; (40, 13): rows too short for a
# loop of their own (Tuning.cpu_row_loop_min), one division per point
ONE_ROW, ROWS, FLAT = "one row", "rows", "flat"


@pytest.mark.parametrize("shape, form", [((64, 1024), ONE_ROW), ((4, 8, 1024), ONE_ROW), ((96, 700), ROWS),
                                         ((3, 300, 17), ROWS), ((40, 13), FLAT)])
def test_points_of_a_thread_by_rows(shape, form):
    graph, inputs = outer_graph(shape)
    exe = assert_agrees(graph, inputs, "cpu", rtol=1e-5, atol=1e-5)
    n = shape[-1]
    assert (f"first % {n} + (lin - first)" in exe.source) == (form == ONE_ROW)
    assert (f"for (int row = first / {n}; row * {n} < last; row++)" in exe.source) == (form == ROWS)


def model(x: sd.f32[3, 50, 37], y: sd.f32[3, 50, 37], b: sd.f32[37], c: sd.f32[5001]):
    """Broadcast tanh and exp over a 3-d box (rows of 37, threads of 21 points) and a 1-d exp:
    the fused forward and backward elementwise kernels of both, the 3-d one loading 4 buffers
    and storing 5 (more alias checks than g++'s default 10)."""
    return np.sum(np.tanh(x + b) * y + np.exp(y * b)) + np.sum(np.exp(c * 0.5))


@pytest.fixture(scope="module")
def program():
    return sd.differentiable_program(model)


def _jax_value_and_grad(inputs: dict[str, np.ndarray]):
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)

    def f(x, y, b, c):
        return jnp.sum(jnp.tanh(x + b) * y + jnp.exp(y * b)) + jnp.sum(jnp.exp(c * 0.5))
    value, grads = jax.jit(jax.value_and_grad(f, argnums=(0, 1, 2, 3)))(*(jnp.asarray(v, jnp.float64) for v in inputs.values()))
    return float(value), dict(zip(inputs, (np.asarray(g) for g in grads)))


def test_broadcast_gradients_by_rows_match_jax(program):
    r = rng(5)
    inputs = {"x": r.standard_normal((3, 50, 37)), "y": r.standard_normal((3, 50, 37)), "b": r.standard_normal(37),
              "c": r.standard_normal(5001)}
    inputs = {n: v.astype(np.float32) for n, v in inputs.items()}
    value, grads = program.value_and_grad(*inputs.values(), device="cpu")
    want_value, want = _jax_value_and_grad(inputs)
    assert "for (int row = first / 37; row * 37 < last; row++)" in program.slang_source(device="cpu")
    np.testing.assert_allclose(float(value), want_value, rtol=1e-5)
    for name in inputs:
        np.testing.assert_allclose(grads[name], want[name], rtol=1e-5, atol=1e-5, err_msg=name)


def _loop_lines(source: str) -> list[int]:
    """Lines (1-based) of the CPU point loops: rows' inner loops and 1-d runs of points."""
    return [n for n, line in enumerate(source.splitlines(), 1)
            if re.match(r"\s*for \(int (t\d+ = max\(first - row|lin = first;)", line)]


@pytest.mark.skipif(not slang_compiler.available() or shutil.which("g++") is None,
                    reason="needs the Slang compiler library and g++")
def test_point_loops_vectorise(program):
    """g++ (the CPU device's flags: ``targets.compiler_args``) reports every point loop of
    the module vectorised: affine indices and room for its alias checks (``Tuning.cpu_alias_checks``:
    without it the 3-d kernel's loop stays scalar)."""
    source = program.slang_source(device="cpu")
    lines = _loop_lines(source)
    assert len(lines) >= 2  # the 3-d rows and the 1-d run
    cpp = slang_compiler.compile_source(source, "cpp", [PROGRAM])[PROGRAM]
    run = subprocess.run(["g++", "-std=c++17", "-fno-strict-aliasing", "-O3", "-fPIC", "-c", "-o", "/dev/null",
                          "-x", "c++", "-", "-fopt-info-vec-optimized", *targets.compiler_args(backends.cpu.TARGET)],
                         input=cpp, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    vectorised = {int(m) for m in re.findall(r"symdiff\.slang:(\d+):\d+: optimized: loop vectorized", run.stderr)}
    assert set(lines) <= vectorised, (lines, sorted(vectorised))
