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

Whether a fold pays is the cost model's (``cost_model.CostModel.folds``).
On a target where recomputing beats memory traffic (``recompute_transcendentals``:
GPUs) a producer is cheap with transcendentals too, up to ``Tuning.recompute_ops``
operations, and reads of one element for the whole domain (a row maximum,
a scalar) do not count as added reads: a GPU keeps them in cache.  So
``sum(exp(x - max(x)))`` and ``mean(log1p(exp(x)))`` read ``x`` alone.

A producer that does not fold (its other readers, or its inputs, would cost
more) may still run over a two-stage reduction's chunks (``chunk_producers``):
its kernel and the first stage then share one loop a chunk, and the value
passes in a register instead of a buffer.
"""
from __future__ import annotations

import math

import sympy

from symdiff.ir.graph import DataflowGraph, Memlet, Tasklet
from symdiff.ir.index_analysis import (affine_coefficients, extent, flat_position, holds_on_ranges, injective,
                                       injective_over, replaced, solve_shifts, uses_connectors)
from symdiff.ir.rewrite import map_memlets, remove_version, replace_tasklet

from . import targets
from .cost_model import CostModel
from .host_products import host_product
from .inlining import exact_reads, inline, producer as elementwise_producer
from .plan_types import parallel_symbols
from .rewrites import first_stage


def fold_producers(graph: DataflowGraph, target: "targets.Target | None" = None) -> None:
    """Fold qualifying elementwise producers into every in-thread reduction of a
    bound graph (see the module docstring), removing producers left unread.  A
    product the host's BLAS computes on ``target`` (``host_products``) takes no
    producer: folded, it would be a Slang reduction again (attention's
    ``softmax @ v`` read ``exp / sum`` inside its loop)."""
    model = CostModel.of(target)
    # the results' latest versions: a fold removes no version a result ends in (it keeps those)
    results = {graph.latest(c) for c in graph.results}
    for name in [t.name for t in graph.tasklets()]:
        # (only a reduction takes a producer: the cheap test first)
        while name in graph.nx and _is_reduction(graph, graph.node(name)) \
                and host_product(graph, graph.node(name), target) is None \
                and _fold_one(graph, graph.node(name), model, results):
            pass


def _is_reduction(graph: DataflowGraph, t: Tasklet) -> bool:
    writes = graph.writes(t.name)
    return (bool(writes) and all(m.accumulate is not None and not uses_connectors(m.index, t) for _, m in writes)
            and len(parallel_symbols(graph, t)) < len(t.domain))


def _fold_one(graph: DataflowGraph, t: Tasklet, model: CostModel, results: set[str]) -> bool:
    """Fold one producer into reduction ``t``; whether one was folded (``results``: the
    results' latest versions)."""
    if not _is_reduction(graph, t):
        return False
    symbols = t.index_symbols
    exact = exact_reads(graph, t)
    for access, m in graph.reads(t.name):
        if m.connector in exact or uses_connectors(m.index, t) or not injective(m.index, symbols):
            continue
        producer = elementwise_producer(graph, access)
        if producer is None:
            continue
        # other readers include t itself through another connector (``v @ v[::-1]``):
        # the version must outlive this fold for that read
        others = [r for r, o in graph.readers(access) if r != t.name or o.connector != m.connector]
        keep = bool(others) or access in results
        if not model.folds(graph, t, m, producer, keep):
            continue
        inline(graph, t, m.connector, producer)
        if not keep:
            graph.remove_tasklet(producer.name)
            remove_version(graph, access)
        return True
    return False


# -- elementwise passes over a first stage's chunks -------------------------------------------
def chunk_producers(graph: DataflowGraph) -> None:
    """Run the elementwise tasklets that produce what a two-stage reduction's
    first stage reads over that stage's own domain (chunk, row), when their
    points coincide: ``mean(tanh(x) * x)``'s product is not folded into the
    mean (the fold would read ``tanh`` and ``x`` where it read the product),
    so it was stored, 200M floats, for the first stage to read back.  Over the
    stage's domain the producer's kernel and the first stage share a thread box
    (``plan._place``) and their rows (``rowfusion.fuse_rows``): one loop per
    chunk computes the product, the reverse pass's values at the same point
    and the chunk's partial sum, and the product passes in a register.

    Each producer joins with every elementwise tasklet at the same points it
    passes values to or takes them from (``_same_points``; the reverse pass
    reads the forward's values there), since a tasklet left over the old domain
    would need those values in buffers.  Nothing changes unless every reader of
    what they write is one of them or the first stage, each of their points is
    one of the stage's (same count, a bijection through unit shifts) and the
    stage's chunk is a contiguous run of the producer's elements (a column sum's
    chunk is strided: its loop would not vectorise)."""
    for t in list(graph.tasklets()):
        if first_stage(graph, t):
            for name, at in _same_points(graph, t).items():
                _reindex(graph, name, t.domain, at)


def _same_points(graph: DataflowGraph, stage: Tasklet) -> dict[str, dict]:
    """The tasklets ``chunk_producers`` runs over first stage ``stage``'s domain,
    each with its domain symbols as expressions of the stage's; empty when
    some reader of their values is neither one of them nor the stage."""
    ranges = {s: (b, e) for s, b, e in stage.domain}
    points = math.prod(extent(r) for r in stage.domain)
    row = stage.domain[-1][0]
    members: dict[str, dict] = {}
    for access, m in graph.reads(stage.name):
        writers = graph.writers(access)
        shape = graph.containers[m.container].shape
        flat = flat_position(m.index, shape)
        steps = None if flat is None else affine_coefficients(flat, [s for s, _, _ in stage.domain])
        if len(writers) != 1 or steps is None or steps.get(row) != 1 or \
                not injective_over(m.index, stage.domain, shape):
            continue
        (name, w), = writers
        at = _point(graph, name, w.index, m.index, ranges, points)
        if at is not None:
            members[name] = at
    pending = list(members)
    while pending:
        name = pending.pop()
        at = members[name]
        for access, m in graph.reads(name):  # writers of what it reads, at its points, join
            writers = graph.writers(access)
            if len(writers) == 1 and writers[0][0] not in members:
                (writer, w), = writers
                found = _point(graph, writer, w.index, [replaced(i, at) for i in m.index], ranges, points)
                if found is not None:
                    members[writer] = found
                    pending.append(writer)
        for access, w in graph.writes(name):  # and readers of what it writes must
            for reader, m in graph.readers(access):
                if reader == stage.name or reader in members:
                    continue
                found = _point(graph, reader, m.index, [replaced(i, at) for i in w.index], ranges, points)
                if found is None:
                    return {}
                members[reader] = found
                pending.append(reader)
    return members if all(_reads_same_points(graph, n, members) for n in [*members, stage.name]) else {}


def _point(graph: DataflowGraph, name: str, index, element, ranges: dict, points: int) -> dict | None:
    """Tasklet ``name``'s domain symbols as affine expressions of the stage's
    (``ranges``) for which its access through ``index`` is ``element``; None
    unless it is an elementwise tasklet (unconditional, plain writes each its
    version's only one, no gathers or scatters) with ``points`` points, each
    solved by a unit shift and within its range wherever the stage runs."""
    t = graph.node(name)
    writes = graph.writes(name)
    if (t.condition is not sympy.true or not writes or math.prod(extent(r) for r in t.domain) != points
            or any(m.accumulate is not None or len(graph.writers(a)) != 1 for a, m in writes)
            or any(uses_connectors(m.index, t) for _, m in graph.reads(name) + writes)):
        return None
    at, conditions, unsolved = solve_shifts(index, t.domain, element)
    if len(at) != len(t.domain) or any(sympy.expand(replaced(index[k], at) - element[k]) != 0 for k in unsolved):
        return None
    at = {s: sympy.expand(e) for s, e in at.items()}
    if any(affine_coefficients(e, list(ranges)) is None for e in at.values()):
        return None
    return at if all(holds_on_ranges(c, ranges) for c in conditions) else None


def _reads_same_points(graph: DataflowGraph, name: str, members: dict) -> bool:
    """Whether every read tasklet ``name`` (a member, or the stage: no symbols
    replaced) makes of a member's value is of the element that member writes
    at the same point."""
    at = members.get(name, {})
    return not any(writer in members and any(sympy.expand(replaced(a, at) - replaced(b, members[writer])) != 0
                                             for a, b in zip(m.index, w.index))
                   for access, m in graph.reads(name) for writer, w in graph.writers(access))


def _reindex(graph: DataflowGraph, name: str, domain: tuple, at: dict) -> None:
    """Tasklet ``name`` over ``domain`` instead of its own, its symbols replaced by ``at`` (in
    place: it keeps its position in the graph's order)."""
    t = graph.node(name)
    replace_tasklet(graph, Tasklet(t.name, domain, {k: replaced(e, at) for k, e in t.body.items()},
                                   t.inputs, replaced(t.condition, at), t.source, t.backward, t.meta))
    map_memlets(graph, name, lambda m: Memlet(m.container, tuple(sympy.expand(replaced(i, at)) for i in m.index),
                                              m.connector, m.accumulate))
