"""The CPU device's program entry called straight from its stored library, without slangpy.

slangpy makes a CPU kernel by having Slang write the module's C++ and g++
compile it.  A later process loading the same module pays Slang's C++
generation again although the g++ wrapper serves the library from its store
(``library_store``): 0.10-0.15 s of elman_rnn's 0.2 s second first call.
What a call needs is only that library and the layout of the entry's
parameters.  The process that compiles a module records both (``record``: the
wrapper writes where it stored the library, ``library_store.MODULE_ENV``, and
slangpy's reflection gives the layout); a later one loads the library with
ctypes and calls its ``run_program`` on a parameter block it fills itself
(``DirectProgram``), as slangpy's CPU device does: each ``int`` at its offset,
each buffer as its memory's address and its size in bytes.

A record is keyed by the module's source, the optimisation level and the
compiler flags the wrapper adds (``library_store.EXTRA_ENV``: the target's
``-march`` and the like), in a folder per slangpy version; a record whose
library is gone or altered is ignored (and the module compiled as usual).
The call is synchronous: ``runtime`` runs it between encoded work as it runs a
host product, after submitting what was encoded before it.
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from . import library_store
from .slang import spy

_UNIFORM, _BUFFER = "int", "buffer"  # the parameter kinds a program entry has (lowering.codegen.PROGRAM)


class _ThreadInput(ctypes.Structure):
    """Slang's ``ComputeThreadVaryingInput``: the entry of one thread group (the program's only one)."""
    _fields_ = [("group", ctypes.c_uint32 * 3), ("thread", ctypes.c_uint32 * 3)]


@dataclass(frozen=True)
class Layout:
    """The entry's parameter block: its size, and each parameter's byte offset and kind."""

    size: int
    parameters: dict[str, tuple[int, str]]


def layout_of(program: spy.ShaderProgram) -> Layout | None:
    """The parameter block of ``program``'s one entry point, or None where the program has
    global parameters or an entry parameter is neither an ``int`` nor a buffer (nothing the
    program entry declares)."""
    if len(program.layout.parameters):
        return None  # global parameters: a block of their own, which slangpy fills
    parameters, size = {}, 0
    for p in program.layout.entry_points[0].parameters:
        t = p.type_layout
        if t.kind == spy.TypeReflection.Kind.resource and t.type.name in ("RWStructuredBuffer", "StructuredBuffer"):
            kind = _BUFFER
        elif t.kind == spy.TypeReflection.Kind.scalar and t.size == 4 and t.type.name in ("int", "uint"):
            kind = _UNIFORM
        else:
            return None
        parameters[p.name] = (p.offset, kind)
        size = max(size, p.offset + t.size)
    return Layout(-(-size // 8) * 8, parameters)


def record_path(folder: Path, digest: str, level: str) -> Path:
    """Where the record of module ``digest`` at ``level`` lives under ``folder``, for the
    compiler flags in force (called inside the backend's ``compiling()``)."""
    key = hashlib.sha256(f"{digest}\0{level}\0{os.environ.get(library_store.EXTRA_ENV, '')}".encode()).hexdigest()
    return folder / key[:2] / f"{key}.json"


def record(path: Path, library: str, layout: Layout) -> None:
    """Write the record of a module whose library the wrapper stored at ``library``."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"library": library, "size": layout.size, "parameters": layout.parameters}))
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only or full disk: later processes compile through slangpy


def _read(path: Path) -> tuple[str, Layout] | None:
    """The library and layout of the record at ``path``, or None where there is none."""
    try:
        found = json.loads(path.read_text())
        return found["library"], Layout(found["size"], {name: (offset, kind)
                                                        for name, (offset, kind) in found["parameters"].items()})
    except (OSError, ValueError, KeyError, TypeError):
        return None


def layout_in(path: Path) -> Layout | None:
    """The layout of the record at ``path``, or None where there is none."""
    found = _read(path)
    return None if found is None else found[1]


def load(path: Path, entry: str) -> "DirectProgram | None":
    """Entry point ``entry`` of the record at ``path``, or None where there is none or its
    library is not the one stored (``library_store.intact``: an altered one is dropped)."""
    found = _read(path)
    if found is None or library_store.intact(found[0]) is None:
        return None
    return DirectProgram(found[0], entry, found[1])


class DirectProgram:
    """A module's entry point, from its library: ``bind`` a call's parameters once, run it often."""

    def __init__(self, library: str, entry: str, layout: Layout):
        self.library = library
        self.layout = layout
        self._library = ctypes.CDLL(library, mode=os.RTLD_NOW | os.RTLD_LOCAL)  # kept: it holds the code
        self._entry = getattr(self._library, f"{entry}_Thread")  # Slang's C++ entry of one thread group
        self._entry.restype = None
        self._entry.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        self._thread = _ThreadInput()

    def bind(self, params: dict[str, int | spy.Buffer]) -> Callable[[], None]:
        """A call of the entry on ``params`` (every parameter, by name): its block is
        filled here, so the buffers must outlive the call (``runtime`` keeps them)."""
        block = ctypes.create_string_buffer(self.layout.size)
        for name, (offset, kind) in self.layout.parameters.items():
            value = params[name]
            if kind == _BUFFER:
                ctypes.c_uint64.from_buffer(block, offset).value = value.device_address
                ctypes.c_uint64.from_buffer(block, offset + 8).value = value.size
            else:
                ctypes.c_int32.from_buffer(block, offset).value = int(value)
        entry, thread = self._entry, ctypes.byref(self._thread)

        def run() -> None:
            entry(thread, block, None)
        return run
