"""g++'s shared libraries for slangpy's CPU device, kept on disk across processes.

slangpy's CPU device has Slang emit C++ and run ``g++ ... -shared -o
/tmp/libslang-generated-*.so /tmp/unknown-*.cpp`` for every kernel of every
new process: slangpy's shader cache (``shader_cache_path``) stores SPIR-V and
PTX but not host-callable libraries, and neither slangpy 0.43 nor Slang's
host-callable path offers a library cache (``module_cache_path`` keeps the
front end's modules of files loaded by name, not ``load_module_from_source``
text, measured).  g++ is 50-60% of a CPU device compile.

So, while symdiff compiles for the CPU device (``cache.kernels``), a directory
holding a ``g++`` of our own comes first on ``PATH``.  It runs this file as a
script: a compile of one self-contained ``.cpp`` into a ``-shared`` library
(what Slang asks for; the C++ prelude is pasted into the file) is looked up
under the SHA-256 of the compiler's identity (path, size, mtime), its
arguments (temporary paths left out) and the source text; a hit copies the
stored library to the requested output, a miss runs the real g++ and stores
its output.  Anything else goes to the real g++ unchanged.  A stored library
whose content no longer matches its recorded hash is deleted and rebuilt.

``PATH`` is the process's: another thread starting ``g++`` during a symdiff
compile goes through the wrapper too, which passes anything but such a
compile on unchanged (and caches such a compile by content, as it would ours).

The wrapper is also how the target's own compiler flags reach g++ (``extra``:
``targets.compiler_args``, the spelled-out ``-march=native``): slangpy 0.43
drops the device's ``downstream_args`` (measured: g++ ran with ``-O3 -g0``
and no ``-march``, and none of 350 cached libraries used a 256-bit register),
so they are added here to each library compile, and are part of its key.

Where: ``devices.cache_dir() / "cpu-binaries"``; with ``SYMDIFF_DISK_CACHE=0``
the wrapper still runs (for the flags) and stores nothing.
The wrapper is POSIX-only (a shell script); elsewhere g++ runs every time, without the flags.
This module is run by a bare interpreter (``python -I -S``): standard library only.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator

COMPILERS = ("g++",)  # what Slang's downstream compiler locator runs here
SOURCES = (".cpp", ".cc", ".cxx", ".c++")


NO_STORE = "-"  # the directory argument of a wrapper that stores nothing
EXTRA_ENV = "SYMDIFF_CXX_EXTRA"  # the wrapper's extra flags, space-separated


@contextlib.contextmanager
def active(directory: Path | None, extra: list[str] = ()) -> Iterator[None]:
    """Within the block, ``g++`` (found on ``PATH``) compiles each library
    with ``extra`` flags added, and stores and reuses libraries in ``directory``
    (None: stores nothing)."""
    if os.name != "posix":
        yield
        return
    bin_dir = _wrappers(directory, list(extra))
    saved = os.environ.get("PATH", "")
    os.environ["PATH"] = str(bin_dir) + os.pathsep + saved
    try:
        yield
    finally:
        os.environ["PATH"] = saved


def _wrappers(directory: Path | None, extra: list[str]) -> Path:
    """``directory/bin`` (a directory of this process's where nothing is
    stored) with a ``g++`` script running this file (rewritten if this file,
    the interpreter or the flags changed)."""
    bin_dir = directory / "bin" if directory is not None else _own_bin_dir()
    flags = " ".join(extra)
    for name in COMPILERS:
        script = (f'#!/bin/sh\n{EXTRA_ENV}="{flags}" exec "{sys.executable}" -I -S "{Path(__file__).resolve()}" '
                  f'"{directory if directory is not None else NO_STORE}" "{bin_dir}" "{name}" "$@"\n')
        path = bin_dir / name
        try:
            if path.read_text() == script:
                continue
        except OSError:
            pass
        bin_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=bin_dir)
        with os.fdopen(fd, "w") as f:
            f.write(script)
        os.chmod(tmp, 0o755)
        os.replace(tmp, path)
    return bin_dir


@functools.lru_cache(maxsize=None)
def _own_bin_dir() -> Path:
    """A temporary directory for this process's wrapper when nothing is stored."""
    return Path(tempfile.mkdtemp(prefix="symdiff-cxx-"))


def real_compiler(name: str, own_dir: str) -> str | None:
    """``name`` on ``PATH``, ours (in ``own_dir``) left out."""
    own = os.path.realpath(own_dir)
    rest = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and os.path.realpath(p) != own]
    return shutil.which(name, path=os.pathsep.join(rest))


def cache_key(compiler: str, args: list[str]) -> tuple[str, str] | None:
    """``(key, output path)`` for a cacheable compile (one C++ source file
    into a ``-shared`` library), else None."""
    if "-shared" not in args or "-o" not in args:
        return None
    o = args.index("-o")
    if o + 1 >= len(args):
        return None
    output = args[o + 1]
    sources = [i for i, a in enumerate(args) if a.endswith(SOURCES) and i != o + 1]
    if len(sources) != 1 or not os.path.isfile(args[sources[0]]):
        return None
    kept = [a for i, a in enumerate(args) if i not in (o + 1, sources[0])]
    if any(os.path.isfile(a) for a in kept if not a.startswith("-")):
        return None  # another input file (an object, a library): not keyed by content here
    st = os.stat(compiler)
    h = hashlib.sha256(f"{os.path.realpath(compiler)}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    h.update("\0".join(kept).encode() + b"\0")
    with open(args[sources[0]], "rb") as f:
        h.update(f.read())
    return h.hexdigest(), output


def _hit(entry: Path, output: str) -> bool:
    """Copy a stored library to ``output`` if it is intact; drop it if not."""
    try:
        data = entry.read_bytes()
        recorded = entry.with_suffix(".sha256").read_text().strip()
    except OSError:
        return False
    if hashlib.sha256(data).hexdigest() != recorded:
        entry.unlink(missing_ok=True)
        entry.with_suffix(".sha256").unlink(missing_ok=True)
        return False
    with open(output, "wb") as f:
        f.write(data)
    return True


def _store(entry: Path, output: str) -> None:
    try:
        data = Path(output).read_bytes()
        entry.parent.mkdir(parents=True, exist_ok=True)
        for path, content in ((entry.with_suffix(".sha256"), hashlib.sha256(data).hexdigest().encode()),
                              (entry, data)):  # the library last: present means complete
            fd, tmp = tempfile.mkstemp(dir=entry.parent, prefix=".tmp-")
            with os.fdopen(fd, "wb") as f:
                f.write(content)
            os.replace(tmp, path)
    except OSError:
        pass  # a full or read-only disk: no entry


def main(argv: list[str]) -> int:
    """``compiler_cache.py DIRECTORY BIN NAME ARGS...``: run compiler ``NAME``
    (the one on ``PATH`` after the wrappers' own ``BIN``) on ``ARGS``, a library
    compile with ``$SYMDIFF_CXX_EXTRA`` added and through the library cache in
    ``DIRECTORY`` (``-``: none)."""
    directory, bin_dir, name, args = argv[0], argv[1], argv[2], argv[3:]
    compiler = real_compiler(name, bin_dir)
    if compiler is None:
        sys.stderr.write(f"symdiff's compiler cache: no {name} on PATH\n")
        return 127
    flagged = args + os.environ.get(EXTRA_ENV, "").split()
    found = cache_key(compiler, flagged)  # the flags are part of the key (no file among them)
    if found is None:  # not a library compile: passed on as it is
        return subprocess.call([compiler, *args])
    if directory == NO_STORE:
        return subprocess.call([compiler, *flagged])
    key, output = found
    entry = Path(directory) / key[:2] / f"{key}.so"
    if _hit(entry, output):
        return 0
    status = subprocess.call([compiler, *flagged])
    if status == 0:
        _store(entry, output)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
