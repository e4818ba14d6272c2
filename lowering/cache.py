"""In-process compile cache: one compiled module per (device, source hash,
optimisation level).

Executables of the same program (or a recompiled binding producing the same
text) share kernels; slangpy also refuses to reload a module name with other
source, so module names are the hash.  The cache keeps the ``MODULES_KEPT``
most recently used modules: a module holds its native compile state (a
large fuzz model's lavapipe module, 70-100 MB of the process's memory:
measured), and a process building program after program grew until the
machine swapped.  An executable keeps its own kernels, so one whose module
left the cache runs on; only a new binding of the same text compiles again.
The on-disk side is slangpy's shader cache, configured per device by its
backend (``lowering.backends``), for the CPU device g++'s libraries and Slang's
checked modules (its compile policy: ``CpuBackend.compiling`` and
``modules_folder``), and which modules went hot (``mark_hot``).
"""
from __future__ import annotations

import collections
import contextlib
import functools
import hashlib
import os
import re
import tempfile
import threading
import time
from pathlib import Path

from . import backends, compiler_cache, direct_program, disk_cache, library_store
from .slang import spy

_lock = threading.Lock()
# How many compiled modules the cache keeps (least recently used dropped first).
MODULES_KEPT = 64
_modules: collections.OrderedDict[tuple[str, str, str], dict[str, spy.ComputeKernel]] = collections.OrderedDict()
_seconds: dict[tuple[str, str, str], float] = {}  # what compiling each of _modules took
_sessions: dict[tuple[str, Path], "spy.SlangSession"] = {}
# front end: Slang parsing and checking the module; backend: Slang's code generation and the
# downstream compiler (g++ on the CPU device, the driver's on Vulkan), forced per entry point
stats = {"compiles": 0, "compile_seconds": 0.0, "front_end_seconds": 0.0, "backend_seconds": 0.0}


class SlangGenerationError(RuntimeError):
    """Generated Slang failed to compile: a bug in the lowering, quoted here."""


def _quote(source: str, message: str) -> str:
    lines = source.splitlines()
    quoted = []
    for m in re.finditer(r"-->\s*\S+?:(\d+):(\d+)", message):
        n = int(m.group(1)) - 1  # slangpy counts one line more than the string has
        if 1 <= n <= len(lines):
            quoted.append(f"  line {n}: {lines[n - 1].strip()}")
    first = next((ln for ln in message.splitlines() if "error" in ln.lower()), message.strip()[:300])
    where = "\n".join(dict.fromkeys(quoted)) or "  (no line reported)"
    return f"generated Slang does not compile: {first.strip()}\n{where}\n--- compiler output ---\n{message}"


def optimization(device_kind: str, source: str, work: int) -> str:
    """The Slang optimisation level for a module doing ``work`` points per call:
    the backend's compile policy (``maximal`` but on the CPU device, whose
    ``CpuBackend.optimization`` says when g++ -O0 pays)."""
    return backends.of(device_kind).optimization(source, work)


def _session(device_kind: str, device: spy.Device, modules: Path | None):
    """The Slang session loading modules: the device's own, unless modules are loaded
    from ``modules`` (the backend's ``modules_folder``), whose session keeps their checked
    front-end modules there.  One session serves every optimisation level (``_linked``):
    Slang keys its folder of checked modules by the session's options, and a session per
    level checked a module again in a second process that wanted the other level (a
    module compiled at -O0 first, whose -O3 library is on disk by then: attention's
    front end 0.06-0.08 s instead of 0.003)."""
    if modules is None:
        return device
    key = (device_kind, modules)
    if key not in _sessions:
        _sessions[key] = device.create_slang_session(
            compiler_options={"optimization": spy.SlangOptimizationLevel.maximal, "include_paths": [str(modules)]},
            cache_path=str(modules / "front-end"))
    return _sessions[key]


def _linked(session, module, entry: str, level: str):
    """Entry point ``entry`` of ``module`` linked for code generation at ``level``."""
    options = spy.SlangLinkOptions()
    options.optimization = getattr(spy.SlangOptimizationLevel, level)
    return session.link_program([module], [module.entry_point(entry)], link_options=options)


def _load(session, name: str, source: str, modules: Path | None):
    """``source`` as Slang module ``name``, from its file in ``modules`` when given
    (written first if missing; a folder that cannot be written loads the text)."""
    if modules is not None:
        path = modules / f"{name}.slang"
        try:
            if not path.is_file():
                modules.mkdir(parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(dir=modules, prefix=".tmp-")
                with os.fdopen(fd, "w") as f:
                    f.write(source)
                os.replace(tmp, path)
        except OSError:
            return session.load_module_from_source(name, source)
        try:
            return session.load_module(name)
        except spy.SlangCompileError:
            pass  # reported from the text, whose line numbers _quote reads
        return session.load_module_from_source(f"{name}_text", source)
    return session.load_module_from_source(name, source)


def level_for(device_kind: str, source: str, work: int | None) -> str:
    """The optimisation level ``kernels`` compiles at for ``work`` points per
    call (``optimization``; None: maximal); maximal for a module an earlier
    process compiled again once hot (``mark_hot``) or whose -O3 library is on
    disk already (``later_marker``): then both are a library-cache hit."""
    if work is None:
        return "maximal"
    level = optimization(device_kind, source, work)
    if level != "maximal" and disk_cache.enabled() and (
            disk_cache.load("hot", _hot_key(device_kind, source))[0] or later_ready(later_marker(device_kind, source))):
        return "maximal"
    return level


def later_ready(marker: Path | None) -> bool:
    """Whether the background -O3 compile marked by ``marker`` is done and stored its library."""
    try:
        return marker is not None and marker.read_text() != compiler_cache.FAILED
    except OSError:  # not there (yet)
        return False


def mark_hot(device_kind: str, source: str) -> None:
    """Remember on disk that ``source`` was compiled again at maximal because
    its calls ran long (``runtime``'s hot recompile): a later process starts
    there, its g++ library already on disk (``compiler_cache``)."""
    if disk_cache.enabled():
        disk_cache.store("hot", _hot_key(device_kind, source), True)


def _hot_key(device_kind: str, source: str) -> str:
    return disk_cache.key("hot", [device_kind, _digest(source)])


def later_marker(device_kind: str, source: str) -> Path | None:
    """The file the CPU device's g++ wrapper creates once the -O3 library of
    ``source``'s -O0 module is on disk (``compiler_cache._optimise_later``), or
    None where nothing is compiled later (no disk cache, another device)."""
    folder = backends.of(device_kind).libraries_folder()
    return None if folder is None else folder / "later" / _digest(source)[:20]


_later: set[Path] = set()  # markers of the -O3 libraries this process asked for


def wait_for_later(timeout: float) -> bool:
    """Wait up to ``timeout`` seconds until the background -O3 compile of every
    module this process compiled at -O0 has ended (each executable switches to
    its library at its next call); whether all have.  For timing steady calls
    (``bench``)."""
    deadline = time.perf_counter() + timeout
    while True:
        _later.difference_update([marker for marker in list(_later) if marker.exists()])
        if not _later:
            return True
        if time.perf_counter() > deadline:
            return False
        time.sleep(0.02)


@contextlib.contextmanager
def _optimised_later(marker: Path | None):
    """Around a compile: ask the g++ wrapper to store the -O3 library too and create ``marker`` then."""
    if marker is None:
        yield
        return
    _later.add(marker)
    os.environ[library_store.LATER_ENV] = str(marker)
    try:
        yield
    finally:
        os.environ.pop(library_store.LATER_ENV, None)


def kernels(device_kind: str, device: spy.Device, source: str, entries: list[str],
            work: int | None = None, at: str | None = None) -> dict[str, spy.ComputeKernel]:
    """Compiled compute kernels for ``entries`` of ``source`` (cached per
    level); ``work``: points per call, which picks the optimisation level
    (``level_for``), or ``at`` a level (``runtime``'s hot recompile: maximal)."""
    level = at or level_for(device_kind, source, work)
    key = _key(device_kind, source, level)
    digest = key[1]
    with _lock:
        if key in _modules:
            _modules.move_to_end(key)
            return _modules[key]
        backend = backends.of(device_kind)
        start = time.perf_counter()
        try:
            with backend.compiling(), _optimised_later(later_marker(device_kind, source) if level == "none" else None):
                modules = backend.modules_folder()
                record = _record_path(modules, source, entries, level)
                out = _direct(device_kind, source, modules, record, entries, level)
                front = time.perf_counter()
                if out is None:
                    session = _session(device_kind, device, modules)
                    module = _load(session, f"symdiff_{digest}", source, modules)
                    front = time.perf_counter()
                    with _library_told(record) as told:
                        out = {}
                        for entry in entries:
                            out[entry] = device.create_compute_kernel(_linked(session, module, entry, level))
                            out[entry].pipeline  # the backend compile now, not at first dispatch (lavapipe
                            # still compiles its shader code there: measured, bench.first_call's cold run)
                    _keep_record(record, told, out)
        except spy.SlangCompileError as exc:
            raise SlangGenerationError(_quote(source, str(exc))) from None
        except RuntimeError as exc:
            raise SlangGenerationError(f"backend compile of generated Slang failed "
                                       f"({device_kind}):\n{exc}") from None
        end = time.perf_counter()
        stats["compiles"] += 1
        stats["compile_seconds"] += end - start
        stats["front_end_seconds"] += front - start
        stats["backend_seconds"] += end - front
        stats[f"compiles_{level}"] = stats.get(f"compiles_{level}", 0) + 1
        _modules[key] = out
        _seconds[key] = end - start
        while len(_modules) > MODULES_KEPT:
            _seconds.pop(_modules.popitem(last=False)[0], None)
        return out


def _record_path(modules: Path | None, source: str, entries: list[str], level: str) -> Path | None:
    """Where a module of one entry (the CPU device's program) loaded from files
    (``modules``, the disk cache on) keeps its ``direct_program`` record, else None."""
    if modules is None or len(entries) != 1:
        return None
    return direct_program.record_path(modules / "direct-programs", _digest(source), level)


def _direct(device_kind: str, source: str, modules: Path | None, record: Path | None, entries: list[str],
            level: str) -> dict | None:
    """The module's one entry called straight from its stored library (``direct_program``),
    where an earlier process recorded it (``record``, ``_record_path``) or, at maximal, its
    -O3 library was built later (``_direct_later``), else None (compiled through slangpy)."""
    program = None if record is None else direct_program.load(record, entries[0])
    if program is None and record is not None and level == "maximal":
        program = _direct_later(device_kind, source, record, _record_path(modules, source, entries, "none"),
                                entries[0])
    if program is None:
        return None
    stats["direct_loads"] = stats.get("direct_loads", 0) + 1
    return {entries[0]: program}


def _direct_later(device_kind: str, source: str, record: Path, unoptimised_record: Path,
                  entry: str) -> "direct_program.DirectProgram | None":
    """The -O3 library the g++ wrapper built after this module's -O0 compile (its path in
    ``later_marker``), called with the -O0 record's layout (Slang writes the same C++ at
    either level), and recorded as the module's maximal one: the runtime's switch to -O3
    (``runtime``'s tiered compile) costs no Slang code generation."""
    marker = later_marker(device_kind, source)
    try:
        library = marker.read_text().strip() if marker is not None else ""
    except OSError:
        return None
    unoptimised = direct_program.layout_in(unoptimised_record)
    if not library or library == compiler_cache.FAILED or unoptimised is None:
        return None
    direct_program.record(record, library, unoptimised)
    return direct_program.load(record, entry)


@contextlib.contextmanager
def _library_told(record: Path | None):
    """Around a compile: the file the g++ wrapper writes its stored library's path into
    (``library_store.MODULE_ENV``), yielded, and removed after; None without a record."""
    if record is None:
        yield None
        return
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        fd, told = tempfile.mkstemp(dir=record.parent, prefix=".told-")
        os.close(fd)
    except OSError:
        yield None
        return
    os.environ[library_store.MODULE_ENV] = told
    try:
        yield Path(told)
    finally:
        os.environ.pop(library_store.MODULE_ENV, None)


def _keep_record(record: Path | None, told: Path | None, kernels: dict) -> None:
    """Record the module just compiled for later processes (``direct_program.record``) where
    the wrapper told its library and its entry's parameters have a layout a direct call fills."""
    if told is None:
        return
    try:
        library = told.read_text().strip()
        told.unlink()
    except OSError:
        return
    (kernel,) = kernels.values()
    layout = direct_program.layout_of(kernel.program)
    if library and layout is not None:
        direct_program.record(record, library, layout)


def _key(device_kind: str, source: str, level: str) -> tuple[str, str, str]:
    return device_kind, _digest(source)[:20], level


@functools.lru_cache(maxsize=8)
def _digest(source: str) -> str:
    """SHA-256 of a module's source: every key and mark this module makes of it
    (``_key``, ``_hot_key``, ``later_marker``) in one compile hashes it once."""
    return hashlib.sha256(source.encode()).hexdigest()


def compile_seconds(device_kind: str, source: str, level: str) -> float:
    """Seconds compiling ``source`` at ``level`` took in this process (0 if it was not)."""
    return _seconds.get(_key(device_kind, source, level), 0.0)


def clear() -> int:
    """Forget every compiled module (``sd.clear_caches``); returns how many.
    Executables holding kernels keep them; the next new binding recompiles
    (or loads slangpy's on-disk shader cache)."""
    with _lock:
        dropped = len(_modules)
        _modules.clear()
        _seconds.clear()
        _digest.cache_clear()  # nor keep their sources
        return dropped
