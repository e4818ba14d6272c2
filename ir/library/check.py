"""Validation of a library node (``ir.validate`` calls it): the rules of
``ir.library.node`` plus the op's own shape rule, so a hand-built or rewritten
graph whose shapes no longer fit the operation is refused naming the node."""
from __future__ import annotations

from ..graph import DataflowGraph, GraphError
from .node import LibraryNode
from .registry import lookup


def check_library_node(graph: DataflowGraph, node: LibraryNode) -> None:
    def fail(message: str) -> GraphError:
        return GraphError(f"library node {node.name!r} ({node.op}): {message}")

    try:
        op = lookup(node.op)
    except KeyError as err:
        raise fail(str(err.args[0])) from None
    reads, writes = graph.reads(node.name), graph.writes(node.name)
    for kind, edges, conns in (("read", reads, node.inputs), ("write", writes, node.outputs)):
        got = sorted(m.connector for _, m in edges)
        if got != sorted(conns):
            raise fail(f"{kind} connectors {got} do not match its {kind}s {list(conns)}")
        for access, m in edges:
            if m.index != ():
                raise fail(f"{kind} {m} names elements; a library node reads and writes whole containers")
            if m.accumulate is not None:
                raise fail(f"write {m} accumulates; library nodes write plainly")
    for access, _ in writes:
        if len(graph.writers(access)) != 1:
            raise fail(f"output version {access!r} has other writers")
    by_conn = {m.connector: a for a, m in reads}
    specs = [(graph.containers[graph.node(by_conn[c]).container].shape,
              graph.containers[graph.node(by_conn[c]).container].dtype) for c in node.inputs]
    try:
        expected = op.shapes(specs, dict(node.params))
    except Exception as err:  # the shape rule's own message says what is wrong
        raise fail(f"its inputs do not fit the operation: {err}") from None
    out_conn = {m.connector: a for a, m in writes}
    for conn, (shape, dtype) in zip(node.outputs, expected):
        c = graph.containers[graph.node(out_conn[conn]).container]
        if tuple(c.shape) != tuple(shape) or c.dtype != dtype:
            raise fail(f"output {c.name!r} is {c.dtype}{list(c.shape)}, the operation gives {dtype}{list(shape)}")
