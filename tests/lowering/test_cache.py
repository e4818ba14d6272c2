"""The in-process compile cache and its tiers (lowering.cache): a CPU module
compiled at g++ -O0 for a quick first call has its -O3 library compiled in the
background by the g++ wrapper, and the executable switches to it.  Oracle: the
numpy interpreter device."""
import numpy as np
import pytest

import symdiff as sd
from symdiff import lowering
from symdiff.lowering import cache

pytestmark = pytest.mark.skipif("cpu" not in lowering.available_devices(), reason="no CPU device")


@pytest.fixture
def on_disk(tmp_path, monkeypatch):
    """The disk cache on, in a directory of the test's own, and no module compiled in this process yet
    (a module compiled by another test would be reused without reaching g++)."""
    monkeypatch.setenv("SYMDIFF_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("SYMDIFF_DISK_CACHE", raising=False)
    cache.clear()
    yield tmp_path
    cache.clear()


def _program():
    def small(x: sd.f32[8], w: sd.f32[8]):
        return np.sum(np.tanh(x * w) * x)
    return sd.differentiable_program(small)


def test_a_module_started_at_O0_switches_to_its_O3_library(on_disk):
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal(8).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    p = _program()
    first = p.value_and_grad(x, w, device="cpu")
    exe = p._executable(p.backward_graph(), "cpu")
    assert exe._last.level == "none" and exe._last.later is not None  # too little work for -O3 at once
    assert cache.wait_for_later(120), "no -O3 library after 120 s"
    maximal = cache.stats.get("compiles_maximal", 0)
    exe._last.later_checked = 0.0  # look at once, not after the poll interval
    second = p.value_and_grad(x, w, device="cpu")
    assert exe._last.level == "maximal" and cache.stats.get("compiles_maximal", 0) == maximal + 1
    expected = p.value_and_grad(x, w, device="numpy")
    for got in (first, second):
        np.testing.assert_allclose(got[0], expected[0], rtol=1e-5)
        for name in ("x", "w"):
            np.testing.assert_allclose(got[1][name], expected[1][name], rtol=1e-5, atol=1e-6)


def test_no_background_compile_without_the_disk_cache(monkeypatch):
    monkeypatch.setenv("SYMDIFF_DISK_CACHE", "0")
    p = _program()
    p.value_and_grad(np.ones(8, np.float32), np.ones(8, np.float32), device="cpu")
    exe = p._executable(p.backward_graph(), "cpu")
    assert exe._last.level == "none" and exe._last.later is None


def test_a_later_process_starts_at_the_stored_O3_library(on_disk):
    """Once the -O3 library of a module is on disk, a new executable of the same
    program (as in another process) compiles at maximal at once: a library hit."""
    x = np.linspace(-1, 1, 8, dtype=np.float32)
    first = _program()
    first.value_and_grad(x, x, device="cpu")
    assert cache.wait_for_later(120), "no -O3 library after 120 s"
    cache.clear()  # no in-process module: as a new process
    again = _program()
    again.value_and_grad(x, x, device="cpu")
    assert again._executable(again.backward_graph(), "cpu")._last.level == "maximal"


def test_a_deterministic_program_never_switches_code(on_disk):
    """-O0 and -O3 results may differ in the last bits: deterministic=True compiles at -O3 at once."""
    def small(x: sd.f32[8], w: sd.f32[8]):
        return np.sum(np.tanh(x * w) * x)
    p = sd.differentiable_program(small, deterministic=True)
    p.value_and_grad(np.ones(8, np.float32), np.ones(8, np.float32), device="cpu")
    exe = p._executable(p.backward_graph(), "cpu")
    assert exe._last.level == "maximal" and exe._last.later is None


LATER_PROCESS = """
import sys
import numpy as np
import symdiff as sd
from symdiff.lowering import cache

def small(x: sd.f32[8], w: sd.f32[8]):
    return np.sum(np.tanh(x * w) * x)

p = sd.differentiable_program(small)
x = np.linspace(-1, 1, 8, dtype=np.float32)
value, grads = p.value_and_grad(x, x, device="cpu")
assert cache.wait_for_later(120), "no -O3 library after 120 s"
print(p._executable(p.backward_graph(), "cpu")._last.level, float(value))
"""


def test_a_later_process_at_O3_reuses_the_checked_module(tmp_path):
    """The first process checks the module and compiles it at -O0; a second one, finding the
    -O3 library on disk, compiles at maximal from the same checked module: Slang's front end
    writes nothing new (one session serves both levels) and g++ does not run."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    env = dict(os.environ, SYMDIFF_CACHE_DIR=str(tmp_path))
    env.pop("SYMDIFF_DISK_CACHE", None)
    root = Path(__file__).resolve().parents[2]

    def run() -> str:
        proc = subprocess.run([sys.executable, "-c", LATER_PROCESS], cwd=root, env=env, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.split()

    checked = lambda: sorted(p for p in (tmp_path / "slang-modules").rglob("*")  # noqa: E731
                             if p.is_file() and "direct-programs" not in p.parts)  # lowering.direct_program's
    libraries = lambda: sorted((tmp_path / "cpu-binaries").rglob("*.so"))  # noqa: E731
    first = run()
    before = checked(), libraries()
    second = run()
    assert (first[0], second[0]) == ("none", "maximal")
    assert (checked(), libraries()) == before
    assert float(first[1]) == pytest.approx(float(second[1]), rel=1e-6)


def test_the_cache_keeps_the_most_recent_modules_and_a_dropped_ones_executable_runs_on(monkeypatch):
    """Past ``MODULES_KEPT`` modules the least recently used leaves the cache (its
    native compile state with it); the executable that compiled it keeps its
    kernels and gives the interpreter's values again; a new program of the same
    text compiles again."""
    monkeypatch.setattr(cache, "MODULES_KEPT", 2)
    cache.clear()
    rng = np.random.default_rng(5)

    def program(scale):
        def f(x: sd.f32[8], w: sd.f32[8]):
            return np.sum(np.tanh(x * w) * scale)
        return sd.differentiable_program(f)
    x, w = rng.standard_normal(8).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    programs = [program(s) for s in (1.5, 2.5, 3.5)]
    for p in programs:
        p.value_and_grad(x, w, device="cpu")
    assert len(cache._modules) == 2
    compiles = cache.stats["compiles"]
    value, grads = programs[0].value_and_grad(x, w, device="cpu")  # its module was the one dropped
    want_value, want_grads = programs[0].value_and_grad(x, w, device="numpy")
    assert cache.stats["compiles"] == compiles  # the executable kept its kernels
    np.testing.assert_allclose(value, want_value, rtol=1e-5)
    for name in "xw":
        np.testing.assert_allclose(grads[name], want_grads[name], rtol=1e-5, atol=1e-6)
    program(3.5).value_and_grad(x, w, device="cpu")  # a new program of a kept module's text: no compile
    assert cache.stats["compiles"] == compiles
    program(1.5).value_and_grad(x, w, device="cpu")  # of the dropped module's text: compiled again
    assert cache.stats["compiles"] == compiles + 1 and len(cache._modules) == 2
    cache.clear()
