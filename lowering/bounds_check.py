"""In-kernel checks of data-dependent indices (gathers and scatters).

An index read from data (``emb[idx[b]]``, ``out[idx[i]] += v``, ``e[idx + 5]``)
cannot be checked when a program is traced, and an unchecked one reads
garbage or, on slangpy's CPU device, writes outside its buffer and corrupts
the process's heap.  So every such access is guarded where the kernel makes
it: each index component that depends on a value read from data is compared
with its extent; an access out of range reads 0 or drops its write (it never
touches memory outside the buffer), and the first violation of a call is
recorded in a two-word flag buffer, ``[code, value]``, ``code`` being one
plus the position of the access in the module's table of ``IndexCheck``s.
The runtime clears the flag before a call and, unless the caller opted out
(``check_bounds=False``), reads it after and raises ``IndexOutOfRange``.

Static (affine) indices need none of this: the tracer refuses those that
provably leave their container (``ir.validate.check_static_bounds``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

import networkx as nx
import sympy

from symdiff.ir.bounds import check_index_arguments
from symdiff.ir.graph import DataflowGraph, IndexOutOfRange, Memlet, Tasklet
from symdiff.ir import tasklet_notes as notes

from .printer import SlangPrinter
from .targets import Target

if TYPE_CHECKING:
    import numpy as np

# Entry-point parameter name of the flag buffer, and the pseudo access id the
# kernel entries list it under (it belongs to no container).
FLAG = "symdiff_bounds"
FLAG_WORDS = 2

HELPER_NAME = "symdiff_index_error"


def helper(target: Target) -> str:
    """The function recording the first violation of a call in the flag, in
    ``target``'s form (lowering.targets): a plain first write where threads
    run one after another, a compare-and-swap where they run together."""
    record = ("if (flag[0] == 0) { flag[0] = code; flag[1] = value; }" if target.sequential else
              "int prev; InterlockedCompareExchange(flag[0], 0, code, prev); if (prev == 0) flag[1] = value;")
    return (f"// Records the first out-of-range index of a call: {FLAG}[0] = code, {FLAG}[1] = value.\n"
            f"void {HELPER_NAME}(RWStructuredBuffer<int> flag, int code, int value)\n{{\n    {record}\n}}")


@dataclass(frozen=True)
class IndexCheck:
    """One checked index component; its code in the flag is its table position + 1."""

    tasklet: str  # the tasklet's name in the user's graph (its origin)
    source: str | None  # the user's line
    container: str  # the array indexed
    axis: int
    extent: int
    sources: tuple[str, ...]  # containers the index's values are read from
    write: bool

    def message(self, value: int, graph: DataflowGraph) -> str:
        where = f" ({self.source})" if self.source else ""
        arguments = index_arguments_upstream(graph, self.sources)
        if arguments and set(arguments) == set(self.sources):
            origin = "argument " + ", ".join(f"{a!r}" for a in arguments)
        elif arguments:
            origin = (f"{', '.join(map(repr, self.sources))}, computed from argument "
                      + ", ".join(f"{a!r}" for a in arguments))
        else:
            origin = ", ".join(map(repr, self.sources))
        return (f"tasklet {self.tasklet}{where}: index {value} out of range for axis {self.axis} of "
                f"{self.container!r} (extent {self.extent}) in a {'write' if self.write else 'read'}; the "
                f"index is read from {origin}. Indices must lie in [0, {self.extent}): negative ones do not wrap")


def index_arguments_upstream(graph: DataflowGraph, containers: tuple[str, ...]) -> list[str]:
    """The int32 arguments whose values flow into ``containers`` (themselves included)."""
    found: list[str] = []
    for node in graph.nx.nodes:
        if getattr(graph.node(node), "container", None) not in containers:
            continue
        for up in (node, *nx.ancestors(graph.nx, node)):
            name = getattr(graph.node(up), "container", None)
            c = graph.containers.get(name) if name else None
            if c is not None and c.role == "argument" and c.dtype == "int32" and name not in found:
                found.append(name)
    return found


def indirect_axes(memlet: Memlet, tasklet: Tasklet) -> list[int]:
    """Axes of ``memlet`` whose index uses a value read by the tasklet."""
    values = set(tasklet.inputs.values())
    return [a for a, e in enumerate(memlet.index) if sympy.sympify(e).free_symbols & values]


class IndexGuards:
    """The checks of one module, shared by its kernel writers."""

    def __init__(self, graph: DataflowGraph):
        self.graph = graph
        self.checks: list[IndexCheck] = []

    def guard(self, writer, tasklet: Tasklet, memlet: Memlet, names: Mapping, depth: int,
              write: bool) -> str | None:
        """Emit (through ``writer.emit``) the range checks of ``memlet``'s
        data-dependent index components, recording a violation in the flag;
        returns the name of a bool local that is true when every component is
        in range, or None when the access needs no check."""
        axes = indirect_axes(memlet, tasklet)
        if not axes:
            return None
        writer.buffers[FLAG] = FLAG
        shape = self.graph.containers[memlet.container].shape
        by_symbol = {sym: conn for conn, sym in tasklet.inputs.items()}
        reads = {m.connector: m.container for _, m in self.graph.reads(tasklet.name)}
        printer = SlangPrinter("int", dict(names))
        ok = f"in_range{len(self.checks)}"
        conditions = []
        for axis in axes:
            expr = sympy.sympify(memlet.index[axis])
            extent = int(shape[axis])
            sources = tuple(dict.fromkeys(reads[by_symbol[s]] for s in expr.free_symbols if s in by_symbol))
            self.checks.append(IndexCheck(notes.origin(tasklet), tasklet.source,
                                          memlet.container, axis, extent, sources, write))
            value = f"{ok}_axis{axis}"
            writer.emit(f"int {value} = {printer.doprint(expr)};", depth)
            writer.emit(f"if (uint({value}) >= {extent}u) symdiff_index_error({FLAG}, {len(self.checks)}, "
                        f"{value});", depth)
            conditions.append(f"uint({value}) < {extent}u")
        writer.emit(f"bool {ok} = {' && '.join(conditions)};", depth)
        return ok


def raise_violation(checks: list[IndexCheck], flag: "np.ndarray", graph: DataflowGraph,
                    host_inputs: Mapping[str, "np.ndarray"], sizes: Mapping[str, int]) -> None:
    """Raise ``IndexOutOfRange`` for a flag a call left set.  Where index
    arguments are at hand, the host check names the offending element
    (``ir.check_index_arguments``); otherwise the kernel's record names the
    access, the tasklet and its line, and the value."""
    code, value = int(flag[0]), int(flag[1])
    if code == 0:
        return
    check_index_arguments(graph, host_inputs, sizes)
    raise IndexOutOfRange(checks[code - 1].message(value, graph))
