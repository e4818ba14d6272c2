"""lowering.direct_program: a later process calls a CPU module's program entry from
its stored library, without Slang's code generation, and gets what the process that
compiled it got; a record it cannot trust is ignored."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from symdiff.lowering import backends, direct_program
from symdiff.lowering.slang import spy

ROOT = Path(__file__).resolve().parents[2]

# A GEMM in the entry (lowering.blas_calls), elementwise and reduction kernels, and a gather
# whose index the kernels check: its flag is read back after the direct call.
PROGRAM = """
import json, sys
import numpy as np
import symdiff as sd
from symdiff import ir
from symdiff.lowering import cache

def f(x: sd.f32[96, 64], w: sd.f32[64, 32], idx: sd.i32[4]):
    h = np.tanh(x @ w)
    return np.sum(h * h) + np.sum(h[idx] * 0.5)

p = sd.differentiable_program(f)
rng = np.random.default_rng(0)
x, w = rng.standard_normal((96, 64)).astype(np.float32), rng.standard_normal((64, 32)).astype(np.float32)
value, grads = p.value_and_grad(x, w, np.array([0, 5, 5, 95], np.int32), device="cpu", wrt=["x", "w"])
try:
    p.value_and_grad(x, w, np.array([0, 96, 1, 2], np.int32), device="cpu", wrt=["x", "w"])
    raised = False
except ir.IndexOutOfRange:
    raised = True
assert cache.wait_for_later(120)  # the -O3 library built in the background is stored (and recorded) by now
print(json.dumps({"value": float(value), "x": np.asarray(grads["x"]).tolist(), "w": np.asarray(grads["w"]).tolist(),
                  "raised": raised, "direct": cache.stats.get("direct_loads", 0)}))
"""


def _run(cache_dir: Path) -> dict:
    env = dict(os.environ, SYMDIFF_CACHE_DIR=str(cache_dir))
    env.pop("SYMDIFF_DISK_CACHE", None)
    proc = subprocess.run([sys.executable, "-c", PROGRAM], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _records(cache_dir: Path) -> list[Path]:
    return sorted(cache_dir.rglob("direct-programs/*/*.json"))


def _numpy_oracle() -> tuple[float, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((96, 64)), rng.standard_normal((64, 32))
    idx = [0, 5, 5, 95]
    h = np.tanh(x @ w)
    g_h = 2 * h
    np.add.at(g_h, idx, 0.5)
    g_pre = g_h * (1 - h * h)
    return float(np.sum(h * h) + np.sum(h[idx] * 0.5)), g_pre @ w.T, x.T @ g_pre


@pytest.mark.skipif(os.name != "posix", reason="the g++ wrapper is a POSIX script")
def test_a_later_process_calls_the_stored_library_and_gets_the_same_gradients(tmp_path):
    first = _run(tmp_path)
    assert first["direct"] == 0 and _records(tmp_path)
    later = _run(tmp_path)
    assert later["direct"] >= 1 and later["raised"] and first["raised"]
    # the first process ran its -O0 library, the later one the -O3 library built meanwhile
    assert later["value"] == pytest.approx(first["value"], rel=1e-6)
    for name in ("x", "w"):
        np.testing.assert_allclose(later[name], first[name], rtol=1e-5, atol=1e-6)
    value, g_x, g_w = _numpy_oracle()
    assert first["value"] == pytest.approx(value, rel=1e-5)
    np.testing.assert_allclose(first["x"], g_x, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(first["w"], g_w, rtol=1e-4, atol=1e-3)


@pytest.mark.skipif(os.name != "posix", reason="the g++ wrapper is a POSIX script")
def test_a_record_whose_library_changed_is_ignored(tmp_path):
    first = _run(tmp_path)
    for library in (tmp_path / "cpu-binaries").rglob("*.so"):
        library.write_bytes(library.read_bytes() + b"\0")  # no longer their checksums'
    for record in _records(tmp_path):
        assert direct_program.load(record, "run_program") is None
    later = _run(tmp_path)
    assert later["direct"] == 0 and later["raised"]
    assert later["value"] == pytest.approx(first["value"], rel=1e-6)


def _program(source: str) -> spy.ShaderProgram:
    device = backends.of("cpu").device()
    session = device.create_slang_session(compiler_options={"optimization": spy.SlangOptimizationLevel.maximal})
    module = session.load_module_from_source(f"layout_{abs(hash(source))}", source)
    return session.link_program([module], [module.entry_point("run_program")])


def test_the_layout_is_slangs_parameter_block():
    layout = direct_program.layout_of(_program(
        "[shader(\"compute\")] [numthreads(1, 1, 1)]\n"
        "void run_program(uniform int first, uniform int last, RWStructuredBuffer<float> a,"
        " RWStructuredBuffer<int> b) { b[0] = first + last + int(a[0]); }\n"))
    assert layout.parameters == {"first": (0, "int"), "last": (4, "int"), "a": (8, "buffer"), "b": (24, "buffer")}
    assert layout.size == 40


def test_a_program_with_global_parameters_has_no_layout():
    assert direct_program.layout_of(_program(
        "RWStructuredBuffer<float> g;\n[shader(\"compute\")] [numthreads(1, 1, 1)]\n"
        "void run_program(uniform int first, RWStructuredBuffer<float> a) { a[0] = g[0]; }\n")) is None


LOOP = """
import json
import numpy as np
import symdiff as sd
from symdiff.lowering import cache

def step(t, state):
    a, b = state
    b[1:-1] = 0.5 * (a[:-2] + a[2:]) + 0.01 * t
    a[1:-1] = np.tanh(b[1:-1])
    return a, b

@sd.differentiable_program
def loop(a: sd.f32[32], b: sd.f32[32]):
    a, b = sd.fori_loop(0, 12, step, (a, b))
    return np.sum(a * a)

x = np.linspace(-1, 1, 32, dtype=np.float32)
value, grads = loop.value_and_grad(x, x.copy(), device="cpu")
assert cache.wait_for_later(120)
print(json.dumps({"value": float(value), "a": np.asarray(grads["a"]).tolist(), "direct": cache.stats.get("direct_loads", 0)}))
"""


@pytest.mark.skipif(os.name != "posix", reason="the g++ wrapper is a POSIX script")
def test_a_loop_records_its_body_called_from_the_stored_library(tmp_path):
    """``sd.fori_loop`` records its body's calls (``Executable.record``): a body called
    from its library runs at once, after what was recorded before it, and the loop
    goes on with a new encoder."""
    env = dict(os.environ, SYMDIFF_CACHE_DIR=str(tmp_path))
    env.pop("SYMDIFF_DISK_CACHE", None)
    runs = [json.loads(subprocess.run([sys.executable, "-c", LOOP], cwd=ROOT, env=env, capture_output=True,
                                      text=True, timeout=600, check=True).stdout.strip().splitlines()[-1])
            for _ in range(2)]
    assert runs[1]["direct"] >= 1
    assert runs[1]["value"] == pytest.approx(runs[0]["value"], rel=1e-6)
    np.testing.assert_allclose(runs[1]["a"], runs[0]["a"], rtol=1e-5, atol=1e-7)
