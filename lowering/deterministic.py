"""Atomic-free programs (``deterministic=True``): owner-computes loops for colliding writes.

Float atomics make a sum's order depend on thread timing, so two runs on a
parallel device can round differently.  With ``deterministic=True`` every
float accumulating write the planner would make atomic (a scatter through an
index array, a non-injective index map, one tasklet writing a version at
several indices) is rewritten before planning into an *owner-computes* loop:
one thread per target element runs over the writer's whole domain in a fixed
order and adds the iterations whose write index is its element.  The sum is
then computed in one order on every run and device.  Stencil-shaped reverse
passes never get here: ``symdiff.transpose`` has already made them gathers.

Cost: target elements x writer iterations instead of writer iterations, so a
scatter into V rows costs about V times its atomic form (long loops are split
in two stages by the planner, still in a fixed order).
"""
from __future__ import annotations

import sympy

from symdiff.ir.graph import ACCUMULATION_IDENTITY, FLOAT_DTYPES, DataflowGraph, Memlet, Tasklet, index_symbol
from symdiff.ir import tasklet_notes as notes
from symdiff.ir.index_analysis import injective, solve_shifts, uses_connectors
from symdiff.ir.rewrite import drop_outputs, needed_reads

from .plan_types import LoweringError, Plan, parallel_symbols
from .rewrites import split_multi_output_tasklets


def colliding_writes(graph: DataflowGraph, t: Tasklet) -> list[Memlet]:
    """Float accumulating writes of ``t`` whose targets collide across threads
    (the planner's atomic writes)."""
    writes = graph.writes(t.name)
    par = parallel_symbols(graph, t)
    out = []
    for access, m in writes:
        if m.accumulate is None or graph.containers[m.container].dtype not in FLOAT_DTYPES:
            continue
        shifted = any(a == access and w.index != m.index for a, w in writes)
        if uses_connectors(m.index, t) or not injective(m.index, par) or shifted:
            out.append(m)
    return out


def owner_computes(graph: DataflowGraph) -> DataflowGraph:
    """A copy of ``graph`` whose colliding float accumulations are owner-computes loops."""
    g = graph.copy()
    split_multi_output_tasklets(g)  # as the planner will: a split write may be a plain reduction
    for t in g.tasklets():
        colliding = colliding_writes(g, t)
        for m in colliding:
            _owner(g, t, m)
        if colliding:
            drop_outputs(g, t.name, {m.connector for m in colliding})
    return g


def _owner(graph: DataflowGraph, t: Tasklet, m: Memlet) -> None:
    """Index components ``s + c`` are solved for ``s`` (no loop over it); the
    owner loops only over the iterations the others (the scatter) leave open."""
    shape = graph.containers[m.container].shape
    owners = tuple(index_symbol(f"owner{k}") for k in range(len(shape)))
    solution, conditions, unsolved = solve_shifts(m.index, t.domain, owners)
    mine = sympy.And(*(sympy.Eq(owners[k], m.index[k]) for k in unsolved))
    body = sympy.Piecewise((t.body[m.connector], mine), (ACCUMULATION_IDENTITY[m.accumulate], True))
    reads = {c: (a, tuple(sympy.sympify(i).xreplace(solution) for i in index))
             for c, (a, index) in needed_reads(graph, t, [body]).items()}
    access = next(a for a, w in graph.writes(t.name) if w == m)
    domain = tuple((o, 0, n) for o, n in zip(owners, shape)) + tuple(r for r in t.domain if r[0] not in solution)
    graph.add_tasklet(f"{t.name}_{m.connector}_owner", domain, {m.connector: body.xreplace(solution)}, reads,
                      {m.connector: (access, owners, m.accumulate)},
                      condition=sympy.And(t.condition.xreplace(solution), *conditions), source=t.source,
                      backward=t.backward, **notes.tasklet_notes(
                          t.meta, strategy="owner-computes",
                          # its data-dependent indices are still checked (lowering.bounds_check)
                          scatter=Memlet(m.container, tuple(sympy.sympify(e).xreplace(solution) for e in m.index),
                                         m.connector)))


def check_atomic_free(plan: Plan) -> None:
    """Raise naming the tasklet if a float write of ``plan`` is still atomic."""
    g = plan.graph
    for kernel in plan.kernels:
        for step in kernel.all_steps:
            for w in step.writes:
                if w.mode == "atomic" and g.containers[w.memlet.container].dtype in FLOAT_DTYPES:
                    t = step.tasklet
                    raise LoweringError(
                        f"deterministic=True: tasklet {notes.origin(t)}"
                        f"{' (' + t.source + ')' if t.source else ''} still needs a float atomic for "
                        f"{w.memlet}; this program cannot be made atomic-free")
