"""Elementwise producers folded into the reductions that consume them.

``np.sum(x * x)`` traces to a map tasklet writing ``x * x`` and a reduction
reading it.  Planned as they are, the map is a kernel (or part of one) over
every point that stores the whole intermediate, and the reduction (often its
first stage, ``plan.split_large_reductions``) reads it back: for 16M float32
that is 64 MB written and read again, most of the program's time on lavapipe.
The reduction's box is not the map's, so the planner cannot pass the value in
a register.

Here, before planning, the producer's body is substituted into the
reduction's body and the reduction reads the producer's inputs instead, so the
intermediate is computed inside the reduction's loop and never written.  A
producer qualifies when it is the only, plain, unconditional writer of the
version, covers it one point per element, reads and writes only floats of the
version's dtype (the fused body must round as the two did), and the reduction
reads each element of the version exactly once (an index injective over its
whole domain: a matmul-shaped read would recompute the producer once per
output) and folding does not make it read more distinct elements (a
producer's inputs are often kept in registers by the kernel that computes
them for the reverse pass: read by the reduction, they would become buffers;
``elementwise_chain``'s value_and_grad on lavapipe went 103 -> 176 ms when
its sum was folded up to the ``sin`` in the middle of the chain).  The
producer is then dropped if nothing else reads the version (the reduction's
other reads of it count: ``v @ v[::-1]`` reads ``v`` twice);
otherwise it stays for its other readers and is inlined only when recomputing
it is cheap: arithmetic on a single input element, so the reduction reads no
more than before.  Chains fold one producer at a time until none qualifies.

On a target where recomputing beats memory traffic (``recompute_transcendentals``:
GPUs) a producer is cheap with transcendentals too, up to ``RECOMPUTE_OPS``
operations, and reads of one element for the whole domain (a row maximum,
a scalar) do not count as added reads: a GPU keeps them in cache.  So
``sum(exp(x - max(x)))`` and ``mean(log1p(exp(x)))`` read ``x`` alone.
"""
from __future__ import annotations

import sympy

from symdiff.ir.graph import DataflowGraph, Memlet, Tasklet
from symdiff.ir.index_analysis import injective

from .inlining import cheap, inline, producer as elementwise_producer, producer_point, varies
from .plan import parallel_symbols, uses_connectors



def fold_producers(graph: DataflowGraph, recompute_transcendentals: bool = False) -> None:
    """Fold qualifying elementwise producers into every in-thread reduction of a
    bound graph (see the module docstring), removing producers left unread."""
    for name in [t.name for t in graph.tasklets()]:
        while name in graph.nx and _fold_one(graph, graph.node(name), recompute_transcendentals):
            pass


def _is_reduction(graph: DataflowGraph, t: Tasklet) -> bool:
    writes = graph.writes(t.name)
    return (bool(writes) and all(m.accumulate is not None and not uses_connectors(m.index, t) for _, m in writes)
            and len(parallel_symbols(graph, t)) < len(t.domain))


def _fold_one(graph: DataflowGraph, t: Tasklet, gpu: bool) -> bool:
    """Fold one producer into reduction ``t``; whether one was folded."""
    if not _is_reduction(graph, t):
        return False
    symbols = t.index_symbols
    for access, m in graph.reads(t.name):
        if uses_connectors(m.index, t) or not injective(m.index, symbols):
            continue
        producer = elementwise_producer(graph, access)
        if producer is None:
            continue
        # other readers include t itself through another connector (``v @ v[::-1]``):
        # the version must outlive this fold for that read
        others = [r for r, o in graph.readers(access) if r != t.name or o.connector != m.connector]
        latest_result = any(graph.latest(c) == access for c in graph.results)
        keep = bool(others) or latest_result
        if keep and not cheap(graph, producer, gpu) or _added_reads(graph, t, m, producer, gpu) > 0:
            continue
        inline(graph, t, m.connector, producer)
        if not keep:
            graph.remove_tasklet(producer.name)
            graph.nx.remove_node(access)
        return True
    return False


def _added_reads(graph: DataflowGraph, t: Tasklet, read: Memlet, p: Tasklet, gpu: bool) -> int:
    """How many more distinct elements ``t`` reads once ``p`` replaces its ``read``
    (with ``gpu``, not counting elements read at every point alike)."""
    (_, w), = graph.writes(p.name)
    at = producer_point(p, w, read)
    def element(a: str, index) -> tuple:
        return a, tuple(sympy.expand(sympy.sympify(i).xreplace(at)) for i in index)

    def counted(elements: set) -> set:
        return {e for e in elements if not gpu or varies(e[1])}
    before = {element(a, m.index) for a, m in graph.reads(t.name)}
    after = {element(a, m.index) for a, m in graph.reads(t.name) if m.connector != read.connector}
    after |= {element(a, m.index) for a, m in graph.reads(p.name)}
    return len(counted(after)) - len(counted(before))
