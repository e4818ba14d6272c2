"""g++'s shared libraries for slangpy's CPU device, kept on disk across processes.

slangpy's CPU device has Slang emit C++ and run ``g++ ... -shared -o
/tmp/libslang-generated-*.so /tmp/unknown-*.cpp`` for every kernel of every
new process: slangpy's shader cache (``shader_cache_path``) stores SPIR-V and
PTX but not host-callable libraries, and neither slangpy 0.43 nor Slang's
host-callable path offers a library cache (``module_cache_path`` keeps the
front end's modules of files loaded by name, not ``load_module_from_source``
text, measured).  g++ is 50-60% of a CPU device compile.

So, while symdiff compiles for the CPU device (``cache.kernels``), a directory
holding a ``g++`` of our own comes first on ``PATH``.  It runs ``library_store``
as a script: a compile of one self-contained ``.cpp`` into a ``-shared`` library
(what Slang asks for; the C++ prelude is pasted into the file) is looked up
under the SHA-256 of the compiler's identity (path, size, mtime), its
arguments (temporary paths left out) and the source text (less ``#line``
directives and blank lines, ``library_store.code``); a hit copies the
stored library to the requested output, a miss runs this file's ``run``: the
real g++, whose output it stores.  Anything else goes to the real g++
unchanged.  A stored library whose content no longer matches its recorded hash
is deleted and rebuilt.

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
This module is loaded by that script, under a bare interpreter (``python -I -S``): standard library only.
"""
from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

if __package__:
    from . import cxx_units, library_store
else:  # loaded by the g++ wrapper's script, ``library_store``, which loads its siblings by path
    library_store = sys.modules["library_store"]
    cxx_units = library_store.sibling("cxx_units")

COMPILERS = ("g++",)  # what Slang's downstream compiler locator runs here
PRELUDE_END = "\n#line "  # where Slang's generated code starts, after the prelude every module shares
# The first line of C++ a module asks for itself (``__requirePrelude``: lowering.threads' worker pool): after
# Slang's prelude, and only in some modules, so a shared precompiled header ends before it.
OWN_PRELUDE = "\n// symdiff: module prelude"
# The CPU program entry's runners (``lowering.codegen``: ``<kernel>_over_<width>x<height>``, to which Slang
# adds ``_<n>``) are compiled out of line, the entry (``cxx_units.ENTRY``) at -O0 (``_entry_light``).
RUNNER_INFIX = "_over_"
# A module is compiled as two translation units where its kernels have this many lines of C++, the entry's
# counting twice (``cxx_units``).  g++ -O3, precompiled prelude, 2 cores: mlp_tanh small (900 lines of
# kernels) 0.24 -> 0.21 s, bicg large (1,460) 0.30 -> 0.26, ffn_block large 0.60 -> 0.37, nbody_energy
# large 0.59 -> 0.29, elman_rnn large 0.58 -> 0.43; a second process and a link cost about 0.1 s.
SPLIT_MIN_LINES = 600
ENTRY_WEIGHT = 2.0
_RUNNER = re.compile(rf"^(static void \w+{RUNNER_INFIX}\d+x\d+_\d+\()", re.M)
_ENTRY = re.compile(rf"^(void {cxx_units.ENTRY}\()", re.M)
# The entry's definition (its body ends at the first line ``}``: ``cxx_units``' reading of Slang's C++).
_ENTRY_BODY = re.compile(rf"^(?:__attribute__\(\(.*?\)\) )?void {cxx_units.ENTRY}\((?P<parameters>.*)\)\n\{{\n"
                         r"(?P<body>(?:.*\n)*?)\}$", re.M)
_PARAMS_CAST = re.compile(r"\(slang_bit_cast<(\w+)\*>\((\w+)\)\)")
BUILD_HEADER = "--build-header"  # the argument that makes the wrapper's script build precompiled headers
LEVELS = (library_store.UNOPTIMISED, library_store.OPTIMISED)
BUILD_LATER = "--build-later"  # the argument that makes it build a library at -O3 in the background
FAILED = "failed"  # what that file holds when the -O3 compile failed
BUILD_TIMEOUT = 600.0  # seconds after which an unfinished header build is taken to have died


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
    stored) with a ``g++`` script running ``library_store`` (which serves a stored
    library, and runs ``main`` for anything else), rewritten if that file, the
    interpreter or the flags changed."""
    bin_dir = directory / "bin" if directory is not None else _own_bin_dir()
    flags = " ".join(extra)
    for name in COMPILERS:
        script = (f'#!/bin/sh\n{library_store.EXTRA_ENV}="{flags}" exec "{sys.executable}" -I -S '
                  f'"{Path(library_store.__file__).resolve()}" '
                  f'"{directory if directory is not None else library_store.NO_STORE}" "{bin_dir}" "{name}" "$@"\n')
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
    """A temporary directory for this process's wrapper when nothing is stored, removed
    when the process exits (left behind, one a process piled up in the temporary folder)."""
    folder = tempfile.mkdtemp(prefix="symdiff-cxx-")
    atexit.register(shutil.rmtree, folder, True)
    return Path(folder)


def _store(entry: Path, output: str) -> None:
    try:
        data = Path(output).read_bytes()
        entry.parent.mkdir(parents=True, exist_ok=True)
        checksum = Path(library_store.checksum_path(str(entry)))
        for path, content in ((checksum, hashlib.sha256(data).hexdigest().encode()),
                              (entry, data)):  # the library last: present means complete
            _atomic_write(path, content)
    except OSError:
        pass  # a full or read-only disk: no entry


def main(argv: list[str]) -> int:
    """``DIRECTORY BIN NAME ARGS...``: the wrapper's compile (``run``), or one of its
    background builds (``BUILD_HEADER``, ``BUILD_LATER``)."""
    if argv and argv[0] == BUILD_HEADER:  # --build-header COMPILER JOBS (JSON)
        return _build_headers(argv[1], json.loads(argv[2]))
    if argv and argv[0] == BUILD_LATER:  # --build-later COMPILER JOB (JSON)
        return _build_later(argv[1], json.loads(argv[2]))
    return run(library_store.Request(argv))


def run(request: library_store.Request) -> int:
    """Run ``request``'s compiler on its arguments: a library compile with
    ``$SYMDIFF_CXX_EXTRA`` added and through the library cache in its directory
    (``-``: none; ``library_store.served`` had no hit for it, or was not asked); a
    -O0 one with ``$SYMDIFF_CXX_LATER`` set also has its -O3 library stored
    (``_optimise_later``)."""
    compiler, flagged = request.compiler, request.flagged
    if compiler is None:
        sys.stderr.write(f"symdiff's compiler cache: no {request.name} on PATH\n")
        return 127
    if request.found is None:  # not a library compile: passed on as it is
        return subprocess.call([compiler, *request.args])
    if request.directory == library_store.NO_STORE:
        return _compile(compiler, flagged, None)
    key, output = request.found
    entry = Path(library_store.entry_path(request.directory, key))
    if library_store.hit(str(entry), output):
        status = 0
    else:
        status = _compile(compiler, flagged, Path(request.directory))
        if status != 0:  # compiled again as given, so that its errors quote the file Slang wrote
            status = subprocess.call([compiler, *flagged])
        if status == 0:
            _store(entry, output)
    if status == 0 and request.later():
        _optimise_later(compiler, flagged, Path(request.directory), Path(os.environ[library_store.LATER_ENV]))
    return status


def _optimise_later(compiler: str, args: list[str], directory: Path, marker: Path) -> None:
    """Store the library of this -O0 compile's source at -O3 too, in a detached
    process on the other core, and create ``marker`` once that compile ends (at
    once if the library is already stored): the runtime then compiles the module at ``maximal``, a
    library-cache hit, and runs the faster code (``runtime``'s tiered compile)."""
    optimised = [library_store.OPTIMISED if a == library_store.UNOPTIMISED else a for a in args]
    key, _ = library_store.cache_key(compiler, optimised)
    entry = Path(library_store.entry_path(str(directory), key))
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)
        if entry.is_file():
            _atomic_write(marker, str(entry).encode())
            return
        work = Path(tempfile.mkdtemp(prefix=".later-", dir=directory))
        source = _source_index(optimised)
        copy = work / Path(optimised[source]).name  # Slang deletes its file once this compile returns
        shutil.copyfile(optimised[source], copy)
        optimised[source] = str(copy)
        optimised[optimised.index("-o") + 1] = str(work / "library.so")
        job = {"args": optimised, "entry": str(entry), "marker": str(marker), "work": str(work)}
        _in_background(BUILD_LATER, compiler, json.dumps(job))
    except OSError:
        pass  # a read-only or full disk: the runtime's ski rental recompiles when the calls have paid for it


def _in_background(*args: str) -> None:
    """The wrapper's script run on ``args`` (a background build) in a detached process."""
    subprocess.Popen([sys.executable, "-I", "-S", str(Path(library_store.__file__).resolve()), *args],
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True)


def _build_later(compiler: str, job: dict) -> int:
    """``_optimise_later``'s detached half: compile, store, mark (the stored library's path
    in the mark, ``lowering.direct_program`` calls it from there; ``FAILED`` if the compile
    failed, so that nobody waits for it and the module stays at -O0)."""
    args, entry, status = job["args"], Path(job["entry"]), 1
    try:
        status = _compile(compiler, args, entry.parent.parent)
        if status == 0:
            _store(entry, args[args.index("-o") + 1])
        return status
    finally:
        shutil.rmtree(job["work"], ignore_errors=True)
        try:
            _atomic_write(Path(job["marker"]), str(entry).encode() if status == 0 else FAILED.encode())
        except OSError:
            pass


def _source_index(args: list[str]) -> int:
    o = args.index("-o")
    return next(i for i, a in enumerate(args) if a.endswith(library_store.SOURCES) and i != o + 1)


def _header_flags(args: list[str]) -> list[str]:
    """A library compile's arguments less output, source and what only its link step
    uses (``_link_only``): what a precompiled header, or an object file, must share."""
    skip = {args.index("-o"), args.index("-o") + 1, _source_index(args)}
    return [a for i, a in enumerate(args) if i not in skip and not _link_only(a)]


def _link_only(arg: str) -> bool:
    """An argument only a library's link step uses: ``-shared``, ``-Wl,`` and ``-l``."""
    return arg == "-shared" or arg.startswith(("-Wl,", "-l"))


def _compile(compiler: str, args: list[str], directory: Path | None) -> int:
    """Compile the source with its entry light (``_entry_light``), through a
    precompiled header of its prelude where ``directory`` (none: the disk cache is off) has one,
    and then as two translation units compiled at once where it has enough kernels (``cxx_units``).

    Slang pastes the same ~120k characters before every module's own code (its
    C++ prelude, up to the first ``#line`` of generated code or the C++ the
    module asks for itself, ``OWN_PRELUDE``, which only some modules have);
    parsing them was about half of g++'s time on a small module (0.35 of 0.8
    CPU s).  Their precompiled header (one per prelude text
    and flags, ``directory/pch``) is built once, in a background process on the
    other core while this compile goes on without it; later compiles
    ``#include`` it.  g++ reads the header's text where the ``.gch`` does not
    fit, so the library is the same either way."""
    source = Path(args[_source_index(args)])
    text = _entry_light(source.read_text())
    cut = min((i for i in (text.find(PRELUDE_END), text.find(OWN_PRELUDE)) if i >= 0), default=-1)
    head, own, parsed = "", text, False  # parsed: the prelude's text is compiled (no precompiled header)
    if cut >= 0:
        head, own = text[:cut].rstrip() + "\n", text[cut + 1:]  # one prelude text whatever follows it
        flags = _header_flags(args)
        header = None if directory is None else _header_path(compiler, flags, head, directory)
        if header is not None and Path(f"{header}.gch").is_file():
            head = f'#include "{header}"\n'
        else:
            parsed = True
            if header is not None:
                _start_header_builds(compiler, [(header, flags)] + [
                    (_header_path(compiler, other, head, directory), other) for other in _other_levels(flags)],
                    head)
    # each unit would parse the prelude again (0.35 CPU s), on a core the header build may be using
    units = None if parsed else cxx_units.two_units(own, SPLIT_MIN_LINES, ENTRY_WEIGHT)
    if units is not None and _compile_units(compiler, args, source, [head + unit for unit in units]) == 0:
        return 0
    return _compile_text(compiler, args, source, head + own)


def _compile_text(compiler: str, args: list[str], source: Path, text: str) -> int:
    """The compile ``args`` asks for, of ``text`` in place of ``source`` (a file beside it)."""
    fd, tmp = tempfile.mkstemp(suffix=source.suffix, dir=source.parent, prefix="symdiff-")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        return subprocess.call([compiler, *(tmp if a == str(source) else a for a in args)])
    finally:
        os.unlink(tmp)


def _compile_units(compiler: str, args: list[str], source: Path, units: list[str]) -> int:
    """The library ``args`` asks for, from translation units ``units`` compiled at the
    same time (``cxx_units``) and linked; nonzero, quietly, where one does not compile
    (the caller compiles the module whole, and reports its errors)."""
    work = Path(tempfile.mkdtemp(dir=source.parent, prefix="symdiff-units-"))
    flags = _header_flags(args)
    try:
        objects, jobs = [], []
        for k, unit in enumerate(units):
            path = work / f"unit{k}{source.suffix}"
            path.write_text(unit)
            objects.append(str(path.with_suffix(".o")))
            jobs.append(subprocess.Popen([compiler, *flags, "-c", str(path), "-o", objects[-1]],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        if [job.wait() for job in jobs] != [0] * len(jobs):
            return 1
        link = [a for a in args if _link_only(a)]
        return subprocess.call([compiler, *objects, *link, "-o", args[args.index("-o") + 1]],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _entry_light(text: str) -> str:
    """``text`` with the CPU program entry compiled light: each of its runners
    (``RUNNER_INFIX``) marked ``noinline`` and the entry itself at -O0.  The
    entry calls a runner once per kernel it dispatches: 300 calls for the
    unrolled 32-step RNN, each of which g++ -O3 inlined, body and all (0.76 of
    elman_rnn large's 0.8 s there; 0.5 s with its six runners out of line).  A
    runner's thread counts are constants in its body (one runner per kernel
    function and dispatch shape), so out of line it is the same loop it was
    inlined.  What is left in the entry is a list of calls, one per dispatch,
    which -O3 only makes slower to compile: elman_rnn large's whole module
    0.47 -> 0.31 s of g++ with it at -O0, steady calls the same (8.2 and 7.9 ms)."""
    text = _RUNNER.sub(r"__attribute__((noinline)) \1", text)
    return _params_once(_ENTRY.sub(r'__attribute__((optimize("O0"))) \1', text))


def _params_once(text: str) -> str:
    """``text`` with the entry's casts of its parameters (``(slang_bit_cast<EntryPointParams_0*>(
    entryPointParams_0))``, which Slang writes at every use of an entry parameter: 1,278 times in
    elman_rnn's entry) made once, into locals at the top of its body.  At -O0 each cast is a call
    of a function template: elman_rnn large's entry unit 0.18 -> 0.13 s of g++.  The cast of a
    parameter (which Slang never assigns) is the same pointer at every use."""
    found = _ENTRY_BODY.search(text)
    if found is None:
        return text
    parameters = {p.split()[-1].lstrip("*") for p in found.group("parameters").split(",") if p.strip()}
    body = found.group("body")
    casts = sorted({m for m in _PARAMS_CAST.findall(body) if m[1] in parameters})
    if not casts:
        return text
    locals_ = [f"    {kind}* _symdiff_params_{k} = slang_bit_cast<{kind}*>({name});"
               for k, (kind, name) in enumerate(casts)]
    for k, (kind, name) in enumerate(casts):
        body = body.replace(f"(slang_bit_cast<{kind}*>({name}))", f"(_symdiff_params_{k})")
    return text[:found.start("body")] + "\n".join(locals_) + "\n" + body + text[found.end("body"):]


def _header_path(compiler: str, flags: list[str], prelude: str, directory: Path) -> Path:
    key = hashlib.sha256("\0".join([library_store.identity(compiler), *flags, prelude]).encode()).hexdigest()
    return directory / "pch" / key[:2] / key / "prelude.h"


def _other_levels(flags: list[str]) -> list[list[str]]:
    """``flags`` at each other g++ level of ``LEVELS``: a header precompiled at one
    optimisation level is refused at another (its ``__OPTIMIZE__`` differs), and a
    process's first module at the other level would otherwise compile without one."""
    levels = [a for a in flags if a in LEVELS]
    if len(levels) != 1:
        return []
    return [[level if a == levels[0] else a for a in flags] for level in LEVELS if level != levels[0]]


def _start_header_builds(compiler: str, jobs: list[tuple[Path, list[str]]], prelude: str) -> None:
    """Write each job's header and build the ``.gch`` of those that lack one, in
    order, in one detached process, leaving out any another process is building (a
    ``.building`` mark younger than ``BUILD_TIMEOUT``)."""
    todo = []
    for header, flags in jobs:
        mark = header.parent / ".building"
        try:
            if Path(f"{header}.gch").is_file() or (mark.exists() and time.time() - mark.stat().st_mtime < BUILD_TIMEOUT):
                continue
            header.parent.mkdir(parents=True, exist_ok=True)
            mark.touch()
            if not header.is_file():
                _atomic_write(header, prelude.encode())
            todo.append({"header": str(header), "flags": flags})
        except OSError:
            pass  # a read-only or full disk: every compile parses the prelude
    if not todo:
        return
    try:
        _in_background(BUILD_HEADER, compiler, json.dumps(todo))
    except OSError:
        for job in todo:
            (Path(job["header"]).parent / ".building").unlink(missing_ok=True)


def headers_building(directory: Path) -> bool:
    """Whether a precompiled header of the wrapper storing in ``directory`` is being built."""
    now = time.time()
    return any(now - mark.stat().st_mtime < BUILD_TIMEOUT for mark in directory.glob("pch/*/*/.building"))


def _build_headers(compiler: str, jobs: list[dict]) -> int:
    """Each job's ``.gch``, written under a temporary name and renamed into place."""
    status = 0
    for job in jobs:
        header = Path(job["header"])
        fd, tmp = tempfile.mkstemp(suffix=".gch", dir=header.parent, prefix=".tmp-")
        os.close(fd)
        try:
            built = subprocess.call([compiler, *job["flags"], "-x", "c++-header", str(header), "-o", tmp],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if built == 0:
                os.replace(tmp, f"{header}.gch")
            status = status or built
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
            (header.parent / ".building").unlink(missing_ok=True)
    return status


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)

