"""Persistent on-disk cache of derived programs, so a second process skips the work.

The first call of a program traces it, differentiates it (sympy), plans
kernels and generates Slang; on slangpy's CPU device g++ then compiles the
generated C++.  Everything after tracing is a pure function of the traced
graph, the options and the code doing the work, so its results are stored
here under a key hashing all of them, and a later process with the same key
loads them instead of deriving them again:

- ``"backward"``: a forward graph's backward graph (``symdiff.program``),
- ``"lowered"``: a graph's kernel plan and generated module (``runtime``),
- g++'s shared libraries for the CPU device (``compiler_cache``); the Vulkan
  and CUDA binaries are slangpy's own shader cache (``devices``).

A key is the SHA-256 of the graph's canonical text (``graph_text``: every
container, node and memlet, expressions in ``sympy.srepr`` so symbol
assumptions count), the options, and ``environment()``: a hash of symdiff's
own source files and the versions of Python, sympy, networkx, numpy and
slangpy.  Editing symdiff, upgrading a dependency, or changing a shape,
dtype, line or option gives another key.  A graph holding something without
a stable text (a Python callable in ``sd.custom_vjp``, a loop body graph) is
not cached at all.

Safety: an entry is written to a temporary file and renamed into place, and
holds its own key; an entry that does not unpickle, or holds another key, is
deleted and rebuilt, never used.

Where: ``devices.cache_dir() / "lowered"`` (``$SYMDIFF_CACHE_DIR``, else
``$XDG_CACHE_HOME/symdiff``, else ``~/.cache/symdiff``).  ``SYMDIFF_DISK_CACHE=0``
turns every on-disk cache off (this one, the g++ cache and slangpy's shader
cache); deleting the directory is always safe.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.metadata
import importlib.util
import io
import os
import pickle
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable, TypeVar

import numpy as np
import sympy

from symdiff.ir.graph import DataflowGraph

from . import devices

ENV_OFF = devices.DISK_CACHE_ENV
enabled = devices.disk_cache_enabled
FORMAT = b"symdiff-disk-cache-1"  # bumped if the file layout itself changes
KEY = "cache_key"  # graph.derived entry: the key a graph was loaded or derived under
stats = {"hits": 0, "misses": 0, "stores": 0, "rejected": 0}

T = TypeVar("T")


class Uncacheable(Exception):
    """Something in a graph has no text that is the same in every process."""


def directory() -> Path:
    """This cache's directory, under ``devices.cache_dir()``."""
    return devices.cache_dir() / "lowered"


def _text(value: Any, seen: dict[int, str]) -> str:
    """A text of ``value`` that is the same in every process, or ``Uncacheable``.
    ``seen``: the texts of the sympy expressions met so far, by object (a graph
    shares them: elman_rnn's 3015 expressions are 49 objects; its text took
    0.022 s, 0.007 with each object's ``srepr`` written once); valid while they live."""
    if isinstance(value, sympy.Basic):
        text = seen.get(id(value))
        if text is None:
            text = seen[id(value)] = sympy.srepr(value)
        return text
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return type(value).__name__ + "(" + ",".join(_text(v, seen) for v in value) + ")"
    if isinstance(value, (set, frozenset)):
        return "set(" + ",".join(sorted(_text(v, seen) for v in value)) + ")"
    if isinstance(value, dict):
        return "{" + ",".join(sorted(f"{_text(k, seen)}:{_text(v, seen)}" for k, v in value.items())) + "}"
    if isinstance(value, np.ndarray):
        return f"array({value.dtype.str},{value.shape},{hashlib.sha256(np.ascontiguousarray(value)).hexdigest()})"
    if isinstance(value, np.generic):
        return f"{value.dtype.str}:{value!r}"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = ",".join(f"{f.name}={_text(getattr(value, f.name), seen)}" for f in dataclasses.fields(value))
        return f"{type(value).__qualname__}({fields})"
    raise Uncacheable(f"{type(value).__qualname__} has no stable text")


def graph_text(graph: DataflowGraph) -> str:
    """The canonical text of ``graph``: name, meta, containers, nodes and edges
    in insertion order (the tracer's order, the same in every process).
    Raises ``Uncacheable`` for a graph holding callables or other objects."""
    seen: dict[int, str] = {}  # the graph holds its expressions alive while this runs
    lines = [f"graph {graph.name!r} {_text(graph.meta, seen)}"]
    lines += [f"C {_text(c, seen)}" for c in graph.containers.values()]
    lines += [f"N {n} {_text(d, seen)}" for n, d in graph.nx.nodes(data=True)]
    lines += [f"E {u} {v} {k} {_text(d, seen)}" for u, v, k, d in graph.nx.edges(keys=True, data=True)]
    return "\n".join(lines)


def graph_key(graph: DataflowGraph) -> str | None:
    """A digest standing for ``graph``'s content: the key it was derived or
    loaded under (``graph.derived[KEY]``), else the hash of ``graph_text``;
    None for a graph that cannot be cached."""
    if KEY in graph.derived:
        return graph.derived[KEY]
    try:
        return hashlib.sha256(graph_text(graph).encode()).hexdigest()
    except Uncacheable:
        return None


def _package_files() -> Iterable[Path]:
    root = __name__.split(".")[0]  # "symdiff": ir and lowering install as its subpackages
    dirs: list[str] = []
    for name in (root, f"{root}.ir", f"{root}.lowering"):
        spec = importlib.util.find_spec(name)
        dirs += list(spec.submodule_search_locations or []) if spec else []
    for d in dict.fromkeys(dirs):
        yield from sorted(Path(d).rglob("*.py"))


@functools.lru_cache(maxsize=None)
def environment() -> str:
    """What every derived result also depends on: symdiff's source files (by
    content) and the versions of Python and the libraries that build or
    pickle them.  Computed once per process (a few ms)."""
    h = hashlib.sha256()
    for path in _package_files():
        h.update(path.name.encode())
        h.update(path.read_bytes())
    versions = [sys.version]
    for dist in ("sympy", "networkx", "numpy", "slangpy"):
        try:
            versions.append(f"{dist}={importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            versions.append(f"{dist}=none")
    h.update("\n".join(versions).encode())
    return h.hexdigest()


def key(kind: str, parts: Iterable[str]) -> str:
    """The key of a ``kind`` entry derived from ``parts`` (texts or digests)."""
    h = hashlib.sha256(FORMAT + kind.encode() + environment().encode())
    for part in parts:
        h.update(b"\0" + part.encode())
    return h.hexdigest()


def _path(kind: str, digest: str) -> Path:
    return directory() / kind / digest[:2] / f"{digest}.pkl"


def load(kind: str, digest: str) -> tuple[bool, Any]:
    """``(True, value)`` for a valid entry, ``(False, None)`` otherwise; an
    unreadable entry or one holding another key is deleted."""
    path = _path(kind, digest)
    try:
        data = path.read_bytes()
    except OSError:
        return False, None
    try:
        magic, stored, value = pickle.loads(data)
        if magic != FORMAT or stored != digest:
            raise ValueError("entry holds another key")
        return True, value
    except Exception:  # truncated, corrupt, from an incompatible library: rebuild it
        stats["rejected"] += 1
        path.unlink(missing_ok=True)
        return False, None


def _graph(state: dict) -> DataflowGraph:
    graph = DataflowGraph.__new__(DataflowGraph)
    graph.__dict__.update(state)
    return graph


def _unevaluated(cls: type, args: tuple) -> sympy.Basic:
    return cls(*args, evaluate=False)


# Expressions rebuilt from their arguments as they are (``evaluate=False``): sympy's own
# reduction calls the class, which simplifies its arguments again (a Max compares each
# pair of them); conv1d_slices' plan took 0.096 s to load in a new process, 0.0024 s so.
_AS_STORED = frozenset({sympy.Add, sympy.Mul, sympy.Max, sympy.Min})  # exactly these classes


class _Pickler(pickle.Pickler):
    """Graphs go without ``derived``: what a process computed from a graph
    (its executables, holding device buffers) is that process's own.  Sums,
    products, maxima and minima are stored to be rebuilt as they were (``_AS_STORED``)."""

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is DataflowGraph and obj.derived:
            return _graph, ({**obj.__dict__, "derived": {}},)
        if type(obj) in _AS_STORED:
            return _unevaluated, (type(obj), obj.args)
        return NotImplemented


def store(kind: str, digest: str, value: Any) -> None:
    """Write an entry atomically (temporary file, then rename); a value that
    cannot be pickled or a full disk only means no entry."""
    path = _path(kind, digest)
    try:
        buffer = io.BytesIO()
        _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump((FORMAT, digest, value))
        data = buffer.getvalue()
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        stats["stores"] += 1
    except Exception:
        try:
            os.unlink(tmp)  # type: ignore[possibly-undefined]
        except Exception:
            pass


def cached(kind: str, parts: Iterable[str | None], build: Callable[[], T]) -> T:
    """``build()``'s value, from disk when an entry for ``(kind, parts)``
    exists, else built and stored.  Built directly when the cache is off or a
    part is None (uncacheable).  A graph value remembers its key
    (``graph_key``), so what is derived from it next needs no text of it."""
    parts = list(parts)
    if not enabled() or any(p is None for p in parts):
        return build()
    digest = key(kind, parts)  # type: ignore[arg-type]
    found, value = load(kind, digest)
    if found:
        stats["hits"] += 1
    else:
        stats["misses"] += 1
        value = build()
        store(kind, digest, value)
    if isinstance(value, DataflowGraph):
        value.derived[KEY] = digest
    return value


def checked(kind: str, graph: DataflowGraph, check: Callable[[DataflowGraph], Any]) -> None:
    """Run ``check(graph)``, which raises where it refuses the graph, unless an earlier
    process passed the same check on a graph of this key.  A graph with a key
    (``graph.derived[KEY]``: loaded or derived here) holds the content its key stands for,
    and a check is a function of that content and of symdiff's source, which every key
    includes; a graph without a key is checked.  A second process served elman_rnn's
    backward graph from disk validated its 486 tasklets again: 0.04 of its 0.35 s."""
    graph_key = graph.derived.get(KEY)
    if graph_key is None or not enabled():
        check(graph)
        return
    digest = key(kind, [graph_key])
    if load(kind, digest)[0]:
        return
    check(graph)
    store(kind, digest, True)
