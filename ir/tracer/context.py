"""The state of one trace in progress, and which trace (if any) this thread runs.

The state is thread-local so that tracing in one thread never changes what
numpy or a traced array does in another.
"""
from __future__ import annotations

import itertools
import threading

import sympy

from ..graph import DataflowGraph, Range
from .errors import TraceError

_local = threading.local()


class Trace:
    """The graph being built plus the bookkeeping the tracer needs while building it."""

    def __init__(self, graph: DataflowGraph, float_dtype: str, strict_broadcasting: bool = False):
        self.graph = graph
        self.float_dtype = float_dtype        # dtype of float constants and np.zeros(...) without dtype
        self.strict_broadcasting = strict_broadcasting  # see ir.tracer.strict
        self.map_ranges: list[Range] = []     # domains of the sd.map loops currently iterating
        self._counter = itertools.count()
        self.hidden_error: TraceError | None = None  # see Operators._conversion_error
        # an array of an enclosing trace used here (a loop body's closure) -> an array of this trace;
        # None: such a use is an error (see traced_array.localized and symdiff.loops)
        self.capture = None
        # container -> weak references to the read-only views standing for numpy copies of it (np.roll,
        # np.tile...: traced_array.TracedArray); a write to the container makes them copies first (emit.write)
        self.copies: dict[str, list] = {}

    def fresh(self, base: str) -> str:
        """A name unique within this trace (connectors, map symbols)."""
        return f"{base}{next(self._counter)}"

    def map_symbols(self) -> set[sympy.Symbol]:
        return {r[0] for r in self.map_ranges}


def current(op: str = "tracing") -> Trace:
    """The trace running in this thread; an error if there is none."""
    stack = getattr(_local, "stack", None)
    if not stack:
        raise TraceError(op, "only usable inside a program being traced (ir.trace / sd.differentiable_program)")
    return stack[-1]


def active() -> Trace | None:
    stack = getattr(_local, "stack", None)
    return stack[-1] if stack else None


def push(trace: Trace) -> None:
    if not hasattr(_local, "stack"):
        _local.stack = []
    _local.stack.append(trace)


def pop() -> None:
    _local.stack.pop()
