"""Which tasklets the numpy interpreter runs together, a block of rows at a time.

Run one tasklet at a time over its whole domain, ``mean(tanh(x) * x)``'s value
and gradient hold every intermediate at full size at once (the tanh, the
product, the broadcast seed, two gradient terms) plus numpy's temporaries for
the largest expression: 7x the input's bytes at 200M elements, where numpy
itself needs about 2x.  Consecutive tasklets over the same domain can instead
run block by block (loop fusion with strip mining): rows ``[0, r)`` of every
tasklet of a *run*, then rows ``[r, 2r)``, and so on.  A version that the run
writes point for point and only the run reads point for point then lives one
block at a time and is never allocated whole, and numpy's temporaries are
block-sized.

Block ``b`` of a tasklet may only need block ``b`` of what earlier tasklets of
its run wrote, so a tasklet joins the current run only when every version of
the run's that it reads was written with the identity index and no
accumulation and is read with the identity index; otherwise (a shifted read,
a gather, a reduction's result) it starts a new run, after the old one has
finished.  Accumulations into versions read only after the run are fine: each
block adds its part (a different order of float additions than one pass, as
any blocked sum).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np
import sympy

from .graph import DataflowGraph, Memlet, Tasklet
from .library.node import LibraryNode
from .sizes import substitute_sizes

BLOCK_POINTS = int(os.environ.get("SYMDIFF_BLOCK_POINTS", 1 << 18))
"""Points per block (setting: ``SYMDIFF_BLOCK_POINTS``): a float32 temporary is
1 MiB, large enough that numpy's per-call overhead (microseconds per
operation) stays small against the work, small enough to stay in cache."""


@dataclass
class Run:
    """Tasklets run block by block together; ``local``: versions that live one block at a time."""
    tasklets: list[str]
    rows: int  # rows of the domain's first axis per block (all of them: one block)
    extent: int  # rows of the domain's first axis
    local: set[str] = field(default_factory=set)

    def blocks(self) -> list[tuple[int, int] | None]:
        if self.rows >= self.extent:
            return [None]  # the whole domain at once, as a tasklet run alone
        return [(lo, min(lo + self.rows, self.extent)) for lo in range(0, self.extent, self.rows)]


def _domain(t: Tasklet, sizes: Mapping[str, int]) -> tuple[tuple[int, int], ...] | None:
    """The domain as integers, or None where a tasklet cannot run in blocks (a condition
    flattens its points, a scalar domain has no rows)."""
    if t.condition is not sympy.true or not t.domain:
        return None
    bounds = []
    for _, begin, end in t.domain:
        b, e = substitute_sizes(begin, sizes), substitute_sizes(end, sizes)
        if not (b.is_Integer and e.is_Integer):
            return None
        bounds.append((int(b), int(e)))
    return tuple(bounds)


def _pointwise(memlet: Memlet, t: Tasklet) -> bool:
    return tuple(memlet.index) == tuple(t.index_symbols)


def plan_runs(graph: DataflowGraph, sizes: Mapping[str, int], keep: bool) -> list[str | Run]:
    """The interpreter's steps in a topological order: access node ids (allocated when first
    met), library node ids (``ir.library``: run alone, after every run before them) and runs.  With ``keep`` no version is local (every value is returned)."""
    steps: list[str | Run] = []
    current: Run | None = None
    domain = None
    written: dict[str, bool] = {}  # versions the current run writes -> written point for point

    def close() -> None:
        nonlocal current
        if current is not None:
            steps.append(current)
        current = None

    for node_id in graph.topological_order():
        node = graph.node(node_id)
        if isinstance(node, LibraryNode):  # one whole-array step: it needs its inputs complete
            close()
            steps.append(node_id)
            continue
        if not isinstance(node, Tasklet):
            steps.append(node_id)
            continue
        dom = _domain(node, sizes)
        joins = (current is not None and dom is not None and dom == domain
                 and all(written.get(a, True) and (a not in written or _pointwise(m, node))
                         for a, m in graph.reads(node_id)))
        if not joins:
            close()
            domain, written = dom, {}
            extent = dom[0][1] - dom[0][0] if dom else 1
            per_row = int(np.prod([e - b for b, e in dom[1:]])) if dom else 1
            current = Run([], rows=max(1, BLOCK_POINTS // max(per_row, 1)) if dom else 1, extent=max(extent, 0))
        current.tasklets.append(node_id)
        for access, memlet in graph.writes(node_id):
            pointwise = memlet.accumulate is None and _pointwise(memlet, node) and access not in written
            written[access] = pointwise
    close()
    if not keep:
        needed = {graph.latest(r) for r in graph.results}
        for run in (s for s in steps if isinstance(s, Run)):
            members = set(run.tasklets)
            for name in run.tasklets:
                t = graph.node(name)
                for access, memlet in graph.writes(name):
                    readers = graph.readers(access)
                    if (access not in needed and len(graph.writers(access)) == 1
                            and memlet.accumulate is None and _pointwise(memlet, t) and readers
                            and all(r in members and _pointwise(m, graph.node(r)) for r, m in readers)):
                        run.local.add(access)
    return steps
