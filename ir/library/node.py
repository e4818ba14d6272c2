"""The library node: one named whole-array operation on whole containers.

A tasklet is a scalar body run over a domain; some operations are not that
(``np.linalg.solve`` pivots, ``eigh`` iterates to convergence) or should not be
(a blocked LU beats any scalar expansion).  A ``LibraryNode`` stands for such
an operation as one node of the graph, as DaCe's library nodes and JAX's
primitives do:

* its edges are ordinary memlets whose index is ``()``: the node reads and
  writes *whole* containers (a view is copied into its own container before
  the call), so no stage ever needs to know which elements it touches;
* reads go access -> node in the order of ``inputs`` (connector names), writes
  node -> access for ``outputs``, always plain (never accumulating) and always
  to a version nothing else writes;
* ``op`` names a ``LibraryOp`` in the registry (``ir.library.registry``),
  which holds the shape rule, the numpy implementation and the derivative
  rules; ``params`` are the op's static keywords (``lower=True``), hashable
  values only, since they key compiled programs.

Everything that walks a graph by node kind (the interpreter, validation, the
renderers, activity analysis, the reverse and tangent passes, the lowering's
split into compiled pieces) asks ``is_library`` and treats the node as one
opaque step.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from ..graph import DataflowGraph, GraphError, Memlet


@dataclass
class LibraryNode:
    """A whole-array operation (see the module docstring)."""

    name: str
    op: str
    inputs: tuple[str, ...]     # input connectors, in the op's argument order
    outputs: tuple[str, ...]    # output connectors, in the op's result order
    params: dict = field(default_factory=dict)
    source: str | None = None   # the user's "file:line" that called it
    backward: bool = False      # added by a reverse pass (drawn as backward)
    meta: dict = field(default_factory=dict)

    @property
    def id(self) -> str:
        return self.name


def is_library(node) -> bool:
    return isinstance(node, LibraryNode)


def library_nodes(graph: DataflowGraph) -> list[LibraryNode]:
    """The graph's library nodes, in insertion order."""
    return [d["node"] for d in graph.nx._node.values() if isinstance(d["node"], LibraryNode)]


def has_library_nodes(graph: DataflowGraph) -> bool:
    return any(isinstance(d["node"], LibraryNode) for d in graph.nx._node.values())


def add_library_node(graph: DataflowGraph, name: str, op: str, reads: Sequence[str], writes: Sequence[str],
                     params: dict | None = None, source: str | None = None, backward: bool = False,
                     **meta) -> LibraryNode:
    """Add a library node reading the access nodes ``reads`` (one per
    argument, in order) and writing the access nodes ``writes`` (one per
    result, each a fresh version); returns the node."""
    name = graph.unique_name(name)
    node = LibraryNode(name, op, tuple(f"in{k}" for k in range(len(reads))),
                       tuple(f"out{k}" for k in range(len(writes))), dict(params or {}), source, backward,
                       dict(meta))
    graph.nx.add_node(name, node=node)
    for conn, access in zip(node.inputs, reads):
        graph.nx.add_edge(access, name, memlet=Memlet(graph.node(access).container, (), conn))
    for conn, access in zip(node.outputs, writes):
        if graph.writers(access):
            raise GraphError(f"library node {name!r}: output version {access!r} already has a writer")
        graph.nx.add_edge(name, access, memlet=Memlet(graph.node(access).container, (), conn))
    return node


def ordered_edges(graph: DataflowGraph, node: LibraryNode) -> tuple[list[str], list[str]]:
    """``(input access ids, output access ids)`` in connector order."""
    reads = {m.connector: a for a, m in graph.reads(node.name)}
    writes = {m.connector: a for a, m in graph.writes(node.name)}
    return [reads[c] for c in node.inputs], [writes[c] for c in node.outputs]
