"""The g++ wrapper's first step (``lowering.library_store``): a stored library is
served by a light script, and everything else reaches ``compiler_cache.main``."""
import os
import subprocess
import sys

import pytest

from symdiff.lowering import library_store
from fake_compiler import FAKE_CXX


# What loading the compiler cache imports (siblings loaded by path are not listed by
# -X importtime; these are its own imports): a hit must need none of them.
HEAVY = {"subprocess", "json", "pathlib", "tempfile", "shutil"}


def _wrapper(tmp_path, *args: str, extra: dict[str, str] = {}) -> tuple[subprocess.CompletedProcess, set[str]]:
    """Run ``library_store.py`` as the g++ wrapper does: a bare interpreter, the fake
    compiler first on PATH; also the modules it imported."""
    env = {**os.environ, "PATH": f"{tmp_path / 'fake'}{os.pathsep}{os.environ['PATH']}", **extra}
    env.pop(library_store.LATER_ENV, None)
    env.pop(library_store.EXTRA_ENV, None)
    done = subprocess.run([sys.executable, "-I", "-S", "-X", "importtime", library_store.__file__, *args],
                          env=env, capture_output=True, text=True)
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    return done, imported


@pytest.mark.skipif(os.name != "posix", reason="the g++ wrapper is a shell script")
def test_a_stored_library_is_served_without_the_compiler_cache(tmp_path):
    (tmp_path / "fake").mkdir()
    log = tmp_path / "log"
    # each run's arguments logged: a library compile has -shared (a precompiled prelude's build, which the
    # miss starts in the background, does not)
    (tmp_path / "fake" / "g++").write_text(FAKE_CXX.format(log=log).replace('echo run >>', 'echo "$@" >>'))

    def library_compiles() -> int:
        return sum("-shared" in line.split() for line in log.read_text().splitlines())
    (tmp_path / "fake" / "g++").chmod(0o755)
    src, out, store = tmp_path / "unknown-abc.cpp", tmp_path / "libslang-generated-xyz.so", tmp_path / "binaries"
    src.write_text("int a;\n#line 4 \"x.slang\"\nint b;\n")
    compile_ = [str(store), str(tmp_path / "bin"), "g++", "-O3", "-shared", "-o", str(out), str(src)]

    missed, imported = _wrapper(tmp_path, *compile_)  # a miss: compiled by compiler_cache.main, and stored
    assert missed.returncode == 0, missed.stderr
    assert "subprocess" in imported and library_compiles() == 1
    assert len(list(store.rglob("*.so"))) == 1

    out.unlink()
    src.write_text("int a;\n#line 9 \"y.slang\"\n\nint b;\n")  # the same code, other #line directives
    served, imported = _wrapper(tmp_path, *compile_)
    assert served.returncode == 0, served.stderr
    assert out.read_bytes() == b"int a;\n#line 4 \"x.slang\"\nint b;\n"  # the stored library
    assert library_compiles() == 1  # no compiler run
    assert not imported & HEAVY, imported & HEAVY

    later, imported = _wrapper(tmp_path, *compile_[:3], "-O0", *compile_[4:],
                               extra={library_store.LATER_ENV: str(tmp_path / "mark")})
    assert later.returncode == 0 and "subprocess" in imported  # a -O3 build to start: not served here

    passed, imported = _wrapper(tmp_path, str(store), str(tmp_path / "bin"), "g++", "-v")
    assert passed.returncode == 0 and "subprocess" in imported  # not a library compile: passed on


def test_the_compiler_is_found_after_the_wrappers_own_folder(tmp_path, monkeypatch):
    own, real = tmp_path / "own", tmp_path / "real"
    for folder in (own, real):
        folder.mkdir()
        (folder / "g++").write_text("#!/bin/sh\n")
        (folder / "g++").chmod(0o755)
    (tmp_path / "g++").write_text("not executable")
    monkeypatch.setenv("PATH", os.pathsep.join([str(own), str(tmp_path), str(real)]))
    assert library_store.real_compiler("g++", str(own)) == str(real / "g++")
    assert library_store.real_compiler("clang++", str(own)) is None
