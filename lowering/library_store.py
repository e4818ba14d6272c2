"""The CPU device's stored g++ libraries: what a compile is keyed by, and serving a stored one.

This is the first thing the ``g++`` wrapper of ``compiler_cache`` runs, for every
module a process compiles.  In a second process nearly every compile is a hit, so
a hit must cost little more than the interpreter's start: this module imports only
``os``, ``sys`` and ``hashlib`` (12 ms with the interpreter, where the whole compiler
cache's imports took 40 ms: ``subprocess``, ``json``, ``pathlib``, ``re`` and the C++
splitter), and loads ``compiler_cache`` only for what is not a plain hit: a miss, a
compile that is not a library's, a library whose -O3 build is still to start.

Run by a bare interpreter (``python -I -S``): standard library only.
"""
from __future__ import annotations

import hashlib
import os
import sys

SOURCES = (".cpp", ".cc", ".cxx", ".c++")
NO_STORE = "-"  # the directory argument of a wrapper that stores nothing
EXTRA_ENV = "SYMDIFF_CXX_EXTRA"  # the wrapper's extra flags, space-separated
LATER_ENV = "SYMDIFF_CXX_LATER"  # set around a -O0 compile: the file to create once its -O3 library is stored
UNOPTIMISED, OPTIMISED = "-O0", "-O3"  # the g++ levels the CPU device compiles at (``CpuBackend.optimization``)


def real_compiler(name: str, own_dir: str) -> str | None:
    """``name`` on ``PATH``, ours (in ``own_dir``) left out (``shutil.which``'s
    search, without importing ``shutil``)."""
    own = os.path.realpath(own_dir)
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        if not folder or os.path.realpath(folder) == own:
            continue
        path = os.path.join(folder, name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


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
    h = hashlib.sha256(identity(compiler).encode())
    h.update("\0".join(kept).encode() + b"\0")
    with open(args[sources[0]], "rb") as f:
        h.update(code(f.read()))
    return h.hexdigest(), output


def code(source: bytes) -> bytes:
    """``source`` less its ``#line`` directives and blank lines: what the library's code
    depends on.  Slang writes them differently for one module checked from its text and
    loaded from its front-end cache (``CpuBackend.modules_folder``: a second process), the
    code between them the same; with them in the key every second process missed."""
    kept: list[bytes] = []
    for line in source.splitlines():
        continued = bool(kept) and kept[-1].rstrip().endswith(b"\\")
        if continued or (line.strip() and not line.startswith(b"#line")):
            kept.append(line)
    return b"\n".join(kept)


def identity(compiler: str) -> str:
    """The compiler as keys name it: its path, size and modification time."""
    st = os.stat(compiler)
    return f"{os.path.realpath(compiler)}\0{st.st_size}\0{st.st_mtime_ns}\0"


def entry_path(directory: str, key: str) -> str:
    """Where the library of ``key`` is stored under ``directory``."""
    return os.path.join(directory, key[:2], f"{key}.so")


def hit(entry: str, output: str) -> bool:
    """Copy a stored library to ``output`` if it is intact; drop it if not."""
    try:
        with open(entry, "rb") as f:
            data = f.read()
        with open(checksum_path(entry)) as f:
            recorded = f.read().strip()
    except OSError:
        return False
    if hashlib.sha256(data).hexdigest() != recorded:
        for path in (entry, checksum_path(entry)):
            try:
                os.unlink(path)
            except OSError:
                pass
        return False
    with open(output, "wb") as f:
        f.write(data)
    return True


def checksum_path(entry: str) -> str:
    """The file holding the SHA-256 of the library stored at ``entry``."""
    return os.path.splitext(entry)[0] + ".sha256"


def served(argv: list[str]) -> bool:
    """Whether the wrapper's compile ``argv`` (``DIRECTORY BIN NAME ARGS...``,
    ``compiler_cache.main``'s) was served from the store: a library compile whose
    library is stored, and no -O3 build to start after it."""
    if len(argv) < 3 or argv[0] == NO_STORE:
        return False
    directory, bin_dir, name, args = argv[0], argv[1], argv[2], argv[3:]
    flagged = args + os.environ.get(EXTRA_ENV, "").split()
    if os.environ.get(LATER_ENV) and UNOPTIMISED in flagged:
        return False
    compiler = real_compiler(name, bin_dir)
    found = None if compiler is None else cache_key(compiler, flagged)
    return found is not None and hit(entry_path(directory, found[0]), found[1])


def _compiler_cache():
    """``compiler_cache``, its sibling, loaded by path (this file runs as a script)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "compiler_cache", os.path.join(os.path.dirname(os.path.abspath(__file__)), "compiler_cache.py"))
    module = sys.modules["compiler_cache"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if __name__ == "__main__":
    sys.modules["library_store"] = sys.modules["__main__"]  # compiler_cache's import of it finds this one
    sys.exit(0 if served(sys.argv[1:]) else _compiler_cache().main(sys.argv[1:]))
