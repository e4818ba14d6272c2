"""Activity analysis: which versions and tasklets lie on a path input -> output.

A version is *active* when some input's version 0 reaches it and it reaches
some output's latest version, following only edges along which a partial
derivative is nonzero (float connectors the output expression actually
depends on).  Only active versions get gradient containers and only active
(read, write) pairs of a tasklet get backward terms, so gradients known to be
zero are never materialised.  Everything here is one linear sweep over edges.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from symdiff.ir.graph import FLOAT_DTYPES, AccessNode, DataflowGraph, Memlet
from symdiff.ir.library import is_library

from .derivatives import tasklet_partials


@dataclass(frozen=True)
class Pair:
    """One differentiable dependence inside a tasklet: write <- read."""

    write_access: str
    write: Memlet
    read_access: str
    read: Memlet


@dataclass
class Activity:
    versions: set[str] = field(default_factory=set)  # active access node ids
    pairs: dict[str, list[Pair]] = field(default_factory=dict)  # tasklet -> active pairs


def latest_versions(graph: DataflowGraph) -> dict[str, str]:
    """``{container: access id of its latest version}`` in one pass (the graph's
    own ``latest`` scans every node per call)."""
    latest: dict[str, AccessNode] = {}
    for node in graph.access_nodes():
        prev = latest.get(node.container)
        if prev is None or node.version > prev.version:
            latest[node.container] = node
    return {c: n.id for c, n in latest.items()}


def _dependent_pairs(graph: DataflowGraph, tasklet: str) -> Iterable[Pair]:
    t = graph.node(tasklet)
    if is_library(t):  # a whole-array op: every float result depends on every float argument
        from .library_rules import library_pairs
        yield from (Pair(*p) for p in library_pairs(graph, t))
        return
    if t.runs_nothing:  # no point runs: nothing flows through it (hand-built graphs; the tracer emits none)
        return
    float_writes = [(wa, wm) for wa, wm in graph.writes(tasklet)
                    if graph.containers[wm.container].dtype in FLOAT_DTYPES]
    if not float_writes:  # comparisons and integer results carry no gradient
        return
    float_outputs = {wm.connector for _, wm in float_writes}
    partials = tasklet_partials({c: e for c, e in t.body.items() if c in float_outputs}, t.inputs)
    for wa, wm in float_writes:
        for ra, rm in graph.reads(tasklet):
            if (wm.connector, rm.connector) in partials:
                yield Pair(wa, wm, ra, rm)


def analyse(graph: DataflowGraph, input_nodes: Iterable[str], output_nodes: Iterable[str]) -> Activity:
    """Active versions and, per tasklet, its active pairs."""
    pairs: dict[str, list[Pair]] = {}
    reached: set[str] = set()
    stack = [n for n in input_nodes if n in graph.nx]
    reached.update(stack)
    while stack:  # forward sweep: partials are computed only for reached tasklets
        access = stack.pop()
        for tasklet in {t for t, _ in graph.readers(access)}:
            if tasklet not in pairs:
                pairs[tasklet] = list(_dependent_pairs(graph, tasklet))
            for p in pairs[tasklet]:
                if p.read_access == access and p.write_access not in reached:
                    reached.add(p.write_access)
                    stack.append(p.write_access)
    active: set[str] = set()
    stack = [n for n in output_nodes if n in reached]
    active.update(stack)
    by_write: dict[str, list[tuple[str, Pair]]] = {}
    for tasklet, plist in pairs.items():
        for p in plist:
            by_write.setdefault(p.write_access, []).append((tasklet, p))
    while stack:  # backward sweep, restricted to forward-reached versions
        access = stack.pop()
        for _, p in by_write.get(access, ()):
            if p.read_access in reached and p.read_access not in active:
                active.add(p.read_access)
                stack.append(p.read_access)
    result = Activity(versions=active)
    for tasklet, plist in pairs.items():
        kept = [p for p in plist if p.read_access in active and p.write_access in active]
        if kept:
            result.pairs[tasklet] = kept
    return result

