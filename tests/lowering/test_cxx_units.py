"""A CPU module's C++ cut into two translation units (lowering.cxx_units), compiled by the g++ wrapper."""
import ctypes
import os
import shutil
import time

import pytest

from symdiff.lowering import compiler_cache, cxx_units, library_store


def _kernel(n: int, lines: int) -> list[str]:
    """Kernel ``n`` as Slang writes it: a function of the thread id, its runner out of line."""
    body = [f"    b_0[tid_0 + {j}] = b_0[tid_0 + {j}] * 2.0f + {n}.0f;" for j in range(lines)]
    return [f"static void k{n}_scale_0(int tid_0, float* b_0)", "{", *body, "}", "",
            f"__attribute__((noinline)) static void k{n}_scale{compiler_cache.RUNNER_INFIX}4x1_0(float* b_1)", "{",
            "    for (int x_0 = 0; x_0 < 4; x_0++)", "    {", f"        k{n}_scale_0(x_0, b_1);", "    }", "}", ""]


def _module(sizes: list[int]) -> str:
    """A module's own C++ in Slang's shape: helpers, kernels, then the entry and its exported wrapper."""
    lines = ["static float twice_0(float x_0)", "{", "    return x_0 * 2.0f;", "}", ""]
    for n, size in enumerate(sizes):
        lines += _kernel(n, size)
    lines += ["void _run_program(float* b_2)", "{",
              *[f"    k{n}_scale{compiler_cache.RUNNER_INFIX}4x1_0(b_2 + {4 * n});" for n in range(len(sizes))],
              "    b_2[0] = twice_0(b_2[0]);", "}", "", '#define EXPORT extern "C" __attribute__((visibility("default")))',
              "EXPORT", "void run_program(float* b_3)", "{", "    _run_program(b_3);", "}", ""]
    return "\n".join(lines)


def test_kernels_are_shared_out_and_the_entry_sees_what_it_calls():
    own = _module([300, 280, 20])
    first, second = cxx_units.two_units(own, min_lines=100)
    runner = f"k0_scale{compiler_cache.RUNNER_INFIX}4x1_0(float* b_1)"
    # the largest kernel alone in the first unit, its runner visible from the other
    assert "static void k0_scale_0(" in first and f"__attribute__((noinline)) void {runner}" in first
    assert "_run_program" not in first and "k1_" not in first
    # the second: the other kernels, the entry, and a declaration of the first's runner
    assert f"__attribute__((noinline)) void {runner};" in second and "k0_scale_0" not in second
    assert "static void k1_scale_0(" in second and "void _run_program(float* b_2)" in second
    assert second.count("static float twice_0(") == first.count("static float twice_0(") == 1  # helpers: both


def test_one_large_kernel_goes_apart_from_the_entry():
    first, second = cxx_units.two_units(_module([300]), min_lines=100)
    assert "k0_scale_0(" in first and "k0_scale_0(" not in second and "_run_program" in second


def test_small_or_unreadable_modules_are_not_cut():
    assert cxx_units.two_units(_module([30, 30]), min_lines=600) is None  # too little to pay for a second g++
    assert cxx_units.two_units(_module([300, 300]).replace("void _run_program", "void other"), 100) is None
    unclosed = _module([300, 300]).rsplit("}", 1)[0]
    assert cxx_units.two_units(unclosed, min_lines=100) is None


@pytest.mark.skipif(os.name != "posix" or shutil.which("g++") is None, reason="compiles with g++")
def test_a_cut_module_links_into_the_library_a_whole_one_gives(tmp_path, monkeypatch):
    """Through the wrapper with real g++: the two units' library computes what the module says."""
    monkeypatch.setattr(compiler_cache, "_compile_text", None)  # no compile of the module whole
    sizes = [400, 350, 300]
    src = tmp_path / "unknown-abc.cpp"
    src.write_text(_module(sizes))
    assert cxx_units.two_units(src.read_text(), compiler_cache.SPLIT_MIN_LINES, compiler_cache.ENTRY_WEIGHT)
    out = tmp_path / "libslang-generated-xyz.so"
    status = compiler_cache.main([library_store.NO_STORE, str(tmp_path / "bin"), "g++", "-O1", "-fPIC",
                                  "-shared", "-o", str(out), str(src)])
    assert status == 0
    data = (ctypes.c_float * (4 * len(sizes) + max(sizes)))(*([1.0] * (4 * len(sizes) + max(sizes))))
    ctypes.CDLL(str(out)).run_program(data)
    # kernel n scales elements 4n .. 4n + 3 + size (each thread x writes x .. x + size - 1 in order)
    expected = [1.0] * len(data)
    for n, size in enumerate(sizes):
        base = expected[:]
        for x in range(4):
            for j in range(size):
                base[4 * n + x + j] = base[4 * n + x + j] * 2.0 + n
        expected = base
    expected[0] *= 2.0
    assert list(data) == pytest.approx(expected)


def _logging_compiler(tmp_path, monkeypatch, then: str):
    """A ``g++`` first on PATH that appends its arguments to the returned log, then runs ``then``."""
    folder = tmp_path / "logging"
    folder.mkdir()
    log = tmp_path / "log"
    (folder / "g++").write_text(f'#!/bin/sh\necho "$@" >> "{log}"\n{then}\n')
    (folder / "g++").chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return log


@pytest.mark.skipif(os.name != "posix", reason="the g++ wrapper is a shell script")
def test_a_module_whose_prelude_is_not_precompiled_is_compiled_whole(tmp_path, monkeypatch):
    """Without the precompiled prelude (disk cache off, or its header not built yet) each
    unit would parse the prelude again: one g++ run then."""
    log = _logging_compiler(tmp_path, monkeypatch, then="")
    src = tmp_path / "unknown-abc.cpp"
    src.write_text("// Slang's prelude\n" + compiler_cache.PRELUDE_END.lstrip("\n") + "1\n" + _module([400, 350]))
    assert cxx_units.two_units(_module([400, 350]), compiler_cache.SPLIT_MIN_LINES, compiler_cache.ENTRY_WEIGHT)
    out = tmp_path / "libslang-generated-xyz.so"
    assert compiler_cache.main([library_store.NO_STORE, str(tmp_path / "bin"), "g++", "-O3", "-shared", "-o",
                                str(out), str(src)]) == 0
    calls = log.read_text().splitlines()
    assert len(calls) == 1 and "-c" not in calls[0].split()


@pytest.mark.skipif(os.name != "posix" or shutil.which("g++") is None, reason="compiles with g++")
def test_a_program_compiled_in_two_units_computes_what_the_interpreter_does(tmp_path, monkeypatch):
    """End to end, disk cache on: once the prelude is precompiled, a program with
    enough kernels is compiled as two units (seen by a g++ on PATH that logs its
    calls), and its gradients are the numpy interpreter's."""
    import numpy as np

    import symdiff as sd
    from symdiff.lowering import backends, cache

    monkeypatch.setenv("SYMDIFF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SYMDIFF_DISK_CACHE", raising=False)
    log = _logging_compiler(tmp_path, monkeypatch, then=f'exec "{shutil.which("g++")}" "$@"')

    def program(shift: float):
        def normalised(x: sd.f32[64, 32], w1: sd.f32[32, 64], w2: sd.f32[64, 8]):
            h = np.tanh(x @ w1 + shift)
            m = h - np.mean(h, axis=1, keepdims=True)
            s = m / np.sqrt(np.mean(m * m, axis=1, keepdims=True) + 1e-5)
            return np.mean(np.exp(-(s @ w2) ** 2))
        return sd.differentiable_program(normalised)

    rng = np.random.default_rng(7)
    args = [rng.standard_normal(s).astype(np.float32) * 0.3 for s in ((64, 32), (32, 64), (64, 8))]
    program(0.125).value_and_grad(*args, device="cpu")  # its compile starts the prelude's header build
    folder = backends.of("cpu").libraries_folder()
    deadline = time.monotonic() + 60
    while compiler_cache.headers_building(folder) or not list(folder.glob("pch/*/*/prelude.h.gch")):
        assert time.monotonic() < deadline, "no precompiled prelude after 60 s"
        time.sleep(0.1)
    log.write_text("")
    p = program(0.375)
    value, grads = p.value_and_grad(*args, device="cpu")
    assert cache.wait_for_later(60)  # the -O3 library compiled later, also in two units
    units = [line for line in log.read_text().splitlines() if " -c " in line]
    assert len(units) >= 2 and all("unit" in line for line in units)
    expected, expected_grads = p.value_and_grad(*args, device="numpy")
    assert value == pytest.approx(expected, rel=1e-5)
    for name, g in expected_grads.items():
        np.testing.assert_allclose(grads[name], g, rtol=1e-4, atol=1e-6)
    later, later_grads = p.value_and_grad(*args, device="cpu")  # now the -O3 library's
    np.testing.assert_allclose(later_grads["w1"], expected_grads["w1"], rtol=1e-4, atol=1e-6)
