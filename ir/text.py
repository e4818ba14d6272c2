"""A readable text form of a graph: what `str(graph)` prints."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .graph import DataflowGraph


def _domain(t) -> str:
    if not t.domain:
        return "[]"
    return "[" + ", ".join(f"{s}={b}:{e}" for s, b, e in t.domain) + "]"


def summary(graph: "DataflowGraph") -> str:
    """One line per container, then the tasklets in execution order with their
    memlets and bodies, so a user can read the whole program top to bottom."""
    lines = [f"DataflowGraph {graph.name!r}"]
    for c in graph.containers.values():
        shape = "(" + ", ".join(str(s) for s in c.shape) + (",)" if len(c.shape) == 1 else ")")
        lines.append(f"  {c.role:<9} {c.name}: {c.dtype}{shape}")
    for node_id in graph.topological_order():
        t = graph.node(node_id)
        if hasattr(t, "op"):  # a library node (ir.library): one line, the operation on whole containers
            from .library.node import ordered_edges
            reads, writes = ordered_edges(graph, t)
            params = "".join(f", {k}={v!r}" for k, v in t.params.items())
            where = f"  # {t.source}" if t.source else ""
            lines.append(f"  {'backward ' if t.backward else ''}library {t.name}: {', '.join(writes)} = "
                         f"{t.op}({', '.join(reads)}{params}){where}")
            continue
        if not hasattr(t, "body"):
            continue
        tag = "backward " if t.backward else ""
        cond = "" if t.condition is True or str(t.condition) == "True" else f" if {t.condition}"
        where = f"  # {t.source}" if t.source else ""
        lines.append(f"  {tag}tasklet {t.name} {_domain(t)}{cond}{where}")
        for acc, m in graph.reads(node_id):
            lines.append(f"      {m.connector} <- {acc}{list(m.index)}")
        for conn, expr in t.body.items():
            outs = [(acc, m) for acc, m in graph.writes(node_id) if m.connector == conn]
            for acc, m in outs:
                op = {None: "=", "sum": "+=", "max": "max=", "min": "min=", "prod": "*="}[m.accumulate]
                lines.append(f"      {acc}{list(m.index)} {op} {expr}")
    return "\n".join(lines)
