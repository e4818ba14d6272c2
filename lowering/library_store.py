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
MODULE_ENV = "SYMDIFF_CXX_MODULE"  # set around a module's compile: the file to write its stored library's path in
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
    data = intact(entry)
    if data is None:
        return False
    with open(output, "wb") as f:
        f.write(data)
    return True


def intact(entry: str) -> bytes | None:
    """The bytes of the library stored at ``entry`` where they match its checksum; None
    where it is not there, or altered (then dropped, checksum and all)."""
    try:
        with open(entry, "rb") as f:
            data = f.read()
        with open(checksum_path(entry)) as f:
            recorded = f.read().strip()
    except OSError:
        return None
    if hashlib.sha256(data).hexdigest() != recorded:
        for path in (entry, checksum_path(entry)):
            try:
                os.unlink(path)
            except OSError:
                pass
        return None
    return data


def checksum_path(entry: str) -> str:
    """The file holding the SHA-256 of the library stored at ``entry``."""
    return os.path.splitext(entry)[0] + ".sha256"


class Request:
    """A compile the wrapper was asked for (``DIRECTORY BIN NAME ARGS...``), read once:
    the real compiler ``NAME`` on ``PATH`` after the wrappers' own ``BIN``, ``ARGS`` with
    ``$SYMDIFF_CXX_EXTRA`` added (``flagged``) and, for a library compile, its key and
    output (``found``; the flags are part of the key, no file among them)."""

    __slots__ = ("directory", "name", "args", "flagged", "compiler", "found")

    def __init__(self, argv: list[str]):
        self.directory, bin_dir, self.name, self.args = argv[0], argv[1], argv[2], argv[3:]
        self.flagged = self.args + os.environ.get(EXTRA_ENV, "").split()
        self.compiler = real_compiler(self.name, bin_dir)
        self.found = None if self.compiler is None else cache_key(self.compiler, self.flagged)

    def later(self) -> bool:
        """Whether a -O3 build of this -O0 library is to start after it (``$SYMDIFF_CXX_LATER``)."""
        return bool(os.environ.get(LATER_ENV)) and UNOPTIMISED in self.flagged


def served(request: Request) -> bool:
    """Whether ``request`` was served from the store: a library compile whose library
    is stored, and no -O3 build to start after it."""
    if request.directory == NO_STORE or request.found is None or request.later():
        return False
    key, output = request.found
    return hit(entry_path(request.directory, key), output)


def sibling(name: str):
    """The module ``name`` beside this file, loaded by path once (this file runs as a
    script: ``compiler_cache``, and its ``cxx_units``)."""
    if name not in sys.modules:
        import importlib.util
        spec = importlib.util.spec_from_file_location(name, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                          f"{name}.py"))
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


def main(argv: list[str]) -> int:
    """The wrapper's script (``compiler_cache._wrappers``): serve a stored library, and
    run ``compiler_cache`` for anything else, its background builds (``--...``) included."""
    if argv and argv[0].startswith("--"):
        return sibling("compiler_cache").main(argv)
    request = Request(argv)
    status = 0 if served(request) else sibling("compiler_cache").run(request)
    if status == 0:
        tell_module(request)
    return status


def tell_module(request: Request) -> None:
    """Write where ``request``'s library is stored into ``$SYMDIFF_CXX_MODULE``'s file
    (``lowering.direct_program`` calls it from there in a later process)."""
    told = os.environ.get(MODULE_ENV)
    if not told or request.directory == NO_STORE or request.found is None:
        return
    entry = entry_path(request.directory, request.found[0])
    if os.path.isfile(entry):
        try:
            with open(told, "w") as f:
                f.write(entry)
        except OSError:
            pass


if __name__ == "__main__":
    sys.modules["library_store"] = sys.modules["__main__"]  # compiler_cache's import of it finds this one
    sys.exit(main(sys.argv[1:]))
