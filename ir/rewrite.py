"""Small graph surgery shared by rewrites that move a tasklet's outputs elsewhere
(stencil gathers in ``symdiff.transpose``, owner-computes loops in
``lowering.deterministic``): which reads an expression needs, and dropping
outputs from a tasklet without leaving dead reads behind.  Which point writes
an element (``solve_shifts``) is index analysis: ``ir.index_analysis``."""
from __future__ import annotations

from typing import Iterable

import sympy

from .graph import DataflowGraph, Tasklet


def needed_reads(graph: DataflowGraph, t: Tasklet, exprs: Iterable) -> dict[str, tuple[str, tuple]]:
    """``{connector: (access, index)}`` of ``t``'s reads that ``exprs`` (bodies
    or indices) use, closed over the connectors gathered read indices use."""
    reads = {m.connector: (a, m.index) for a, m in graph.reads(t.name)}
    conn_of = {sym: conn for conn, sym in t.inputs.items()}
    pending = [conn_of[s] for e in exprs for s in sympy.sympify(e).free_symbols if s in conn_of]
    kept: dict[str, tuple[str, tuple]] = {}
    while pending:
        conn = pending.pop()
        if conn in kept:
            continue
        kept[conn] = reads[conn]
        pending += [conn_of[s] for i in reads[conn][1] for s in sympy.sympify(i).free_symbols if s in conn_of]
    # in the tasklet's own read order: ``free_symbols`` is a set, whose order depends on the
    # process's string hashing, and the rebuilt tasklet's edge order is its generated load order
    return {c: r for c, r in reads.items() if c in kept}


def drop_outputs(graph: DataflowGraph, name: str, connectors: set[str]) -> Tasklet | None:
    """Remove output ``connectors`` of tasklet ``name`` (and the reads only they
    needed); the tasklet keeps its name and meta, minus those connectors'
    ``write_modes``.  Returns the rebuilt tasklet, None when nothing is left."""
    t = graph.node(name)
    writes = [(a, m) for a, m in graph.writes(name) if m.connector not in connectors]
    body = {m.connector: t.body[m.connector] for _, m in writes}
    reads = needed_reads(graph, t, list(body.values()) + [i for _, m in writes for i in m.index])
    graph.remove_tasklet(name)
    if not writes:
        return None
    meta = dict(t.meta)
    if "write_modes" in meta:
        meta["write_modes"] = {c: v for c, v in meta["write_modes"].items() if c in body}
    return graph.add_tasklet(name, t.domain, body, reads, {m.connector: (a, m.index, m.accumulate) for a, m in writes},
                             condition=t.condition, source=t.source, backward=t.backward, **meta)
