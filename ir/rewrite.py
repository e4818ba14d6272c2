"""Graph surgery for rewrites of an existing graph: the one way passes edit a
graph's nodes and memlets after ``DataflowGraph.add_tasklet`` built them
(stencil gathers in ``symdiff.transpose``, owner-computes loops in
``lowering.deterministic``, the planner's recomputation and fusion passes in
``lowering``).  Each edit checks what it can cheaply (a tasklet where one is
expected, memlets whose connectors and containers match), so that a pass's
slip fails at the edit, not as wrong code; ``DataflowGraph.validate`` checks
the whole graph.  Which point writes an element (``solve_shifts``) is index
analysis: ``ir.index_analysis``."""
from __future__ import annotations

from typing import Callable, Iterable

import sympy

from .graph import AccessNode, DataflowGraph, GraphError, Memlet, Tasklet


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
    needed); the tasklet keeps its name and meta.  Returns the rebuilt tasklet,
    None when nothing is left."""
    t = graph.node(name)
    writes = [(a, m) for a, m in graph.writes(name) if m.connector not in connectors]
    body = {m.connector: t.body[m.connector] for _, m in writes}
    reads = needed_reads(graph, t, list(body.values()) + [i for _, m in writes for i in m.index])
    graph.remove_tasklet(name)
    if not writes:
        return None
    return graph.add_tasklet(name, t.domain, body, reads, {m.connector: (a, m.index, m.accumulate) for a, m in writes},
                             condition=t.condition, source=t.source, backward=t.backward, **t.meta)


def replace_tasklet(graph: DataflowGraph, t: Tasklet) -> None:
    """Put ``t`` in place of the tasklet named ``t.name``: it keeps that one's
    position in the graph's order and its memlets, which the caller keeps
    consistent with ``t``'s connectors (``set_reads``, ``remove_write``)."""
    if not isinstance(graph.node(t.name), Tasklet):
        raise GraphError(f"{t.name!r} is no tasklet of graph {graph.name!r}")
    graph.nx.nodes[t.name]["node"] = t


def _check(graph: DataflowGraph, access: str, m: Memlet) -> None:
    node = graph.node(access)
    if not isinstance(node, AccessNode) or node.container != m.container:
        raise GraphError(f"memlet of {m.container!r} ({m.connector}) attached to {access!r}, "
                         f"not a version of that container")


def add_read(graph: DataflowGraph, access: str, name: str, m: Memlet) -> None:
    """Tasklet ``name`` reads version ``access`` through ``m`` (its connector an input of the tasklet)."""
    _check(graph, access, m)
    if m.connector not in graph.node(name).inputs:
        raise GraphError(f"tasklet {name!r} has no input connector {m.connector!r}")
    graph.nx.add_edge(access, name, memlet=m)


def add_write(graph: DataflowGraph, name: str, access: str, m: Memlet) -> None:
    """Tasklet ``name`` writes version ``access`` through ``m`` (its connector an output of the tasklet)."""
    _check(graph, access, m)
    if m.connector not in graph.node(name).body:
        raise GraphError(f"tasklet {name!r} has no output connector {m.connector!r}")
    graph.nx.add_edge(name, access, memlet=m)


def set_reads(graph: DataflowGraph, name: str, reads: Iterable[tuple[str, Memlet]]) -> None:
    """Tasklet ``name`` reads exactly ``reads`` (``(access, memlet)``, in that order)."""
    for a, _, key in list(graph.nx.in_edges(name, keys=True)):
        graph.nx.remove_edge(a, name, key)
    for a, m in reads:
        add_read(graph, a, name, m)


def remove_read(graph: DataflowGraph, access: str, name: str, m: Memlet) -> None:
    """Tasklet ``name`` no longer reads version ``access`` through ``m``."""
    for a, _, key, data in list(graph.nx.in_edges(name, keys=True, data=True)):
        if a == access and data["memlet"] == m:
            graph.nx.remove_edge(a, name, key)


def remove_write(graph: DataflowGraph, name: str, access: str) -> None:
    """Tasklet ``name`` no longer writes version ``access``."""
    for _, a, key in [e for e in graph.nx.out_edges(name, keys=True) if e[1] == access]:
        graph.nx.remove_edge(name, a, key)


def remove_version(graph: DataflowGraph, access: str) -> None:
    """Remove version ``access``, which no tasklet writes any more (a value
    recomputed where it was read, or merged into another); its remaining
    reads go with it."""
    if not isinstance(graph.node(access), AccessNode) or graph.writers(access):
        raise GraphError(f"{access!r} is no version of graph {graph.name!r} that nothing writes")
    graph.nx.remove_node(access)


def map_memlets(graph: DataflowGraph, name: str, f: Callable[[Memlet], Memlet]) -> None:
    """Replace each memlet of tasklet ``name``, reads then writes, by ``f`` of it,
    in place (the memlets keep their order)."""
    for edges in (graph.nx.in_edges(name, data=True, keys=True), graph.nx.out_edges(name, data=True, keys=True)):
        for *_, data in edges:
            data["memlet"] = f(data["memlet"])
