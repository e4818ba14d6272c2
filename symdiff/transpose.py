"""Stencil transposition: colliding scatter-adds of the reverse pass become gathers.

The reverse of the reads ``a[i + c]`` of a stencil is one accumulating write
``grad_a[i + c] += ...`` per tap; neighbouring iterations hit the same
element, so on a parallel device these writes need atomics (or lose
updates).  Solving each write index for the iteration that produced it
(``i = o - c``) gives a single tasklet per gradient element ``o`` that sums
the contributions of exactly the iterations that wrote it: one plain write,
no atomic.  The boundaries stay exact because each term is guarded by its
iteration's domain and condition, and a guarded-off term never reads outside
a container because the shifted read indices are clamped into it.

This runs at the end of ``add_backward_pass`` rather than inside kernel
planning: the result is an ordinary graph, so every device (the numpy
interpreter included) runs the same gather, ``backward_graph()`` shows it
(its ``strategy`` note is ``"gather"``, drawn by the renderer) and the planner
needs no special case.
"""
from __future__ import annotations

import functools
from typing import Sequence

import sympy

from symdiff.ir import tasklet_notes as notes
from symdiff.ir.graph import FLOAT_DTYPES, DataflowGraph, Memlet, Tasklet, connector_symbol, index_symbol
from symdiff.ir.index_analysis import apart, holds_on_ranges, solve_shifts, unit_shift
from symdiff.ir.rewrite import drop_outputs



def shift_solution(index: Sequence[sympy.Expr], domain: Sequence[tuple],
                   targets: Sequence[sympy.Symbol]) -> tuple[dict, list] | None:
    """The iteration writing element ``targets`` through ``index``, when every
    component is a constant or ``s + c`` over distinct domain symbols using
    all of them: ``({s: target - c}, [conditions for that iteration to exist])``;
    None for any other index (gathers, strides, reductions)."""
    solution, conditions, unsolved = solve_shifts(index, domain, targets)
    for k in unsolved:
        shift = unit_shift(index[k], [s for s, _, _ in domain])
        if shift is None or shift[0] is not None:
            return None  # a gather, a stride or a repeated symbol
        conditions.append(sympy.Eq(targets[k], shift[1]))
    return (solution, conditions) if len(solution) == len(domain) else None


def gather_stencils(graph: DataflowGraph) -> list[str]:
    """Rewrite every gradient version with at least two shifted accumulating
    writes (``grad[i + c] += ...``) that may meet (``index_analysis.apart``)
    into one gather tasklet; returns the new tasklets' names."""
    made = []
    for node in graph.access_nodes():
        access = node.id
        if graph.containers[node.container].dtype not in FLOAT_DTYPES:
            continue
        targets = tuple(index_symbol(f"o{k}") for k in range(graph.containers[node.container].ndim))
        candidates = []
        for name, m in graph.writers(access):
            t = graph.node(name)
            if t.backward and m.accumulate == "sum":
                solved = shift_solution(m.index, t.domain, targets)
                if solved is not None:
                    candidates.append((t, m, solved))
        # writes that cannot meet need no gather, which would read every one's contribution for every element
        if len(candidates) >= 2 and not apart([m.index for _, m, _ in candidates]):
            made.append(_gather(graph, access, targets, candidates))
    return made


class _GatherReads:
    """The gather tasklet's reads, one connector per distinct (version, index)."""

    def __init__(self, graph: DataflowGraph):
        self.graph = graph
        self.reads: dict[str, tuple[str, tuple]] = {}
        self.symbols: dict[tuple, sympy.Symbol] = {}

    def symbol(self, access: str, index: tuple, base: str) -> sympy.Symbol:
        key = (access, index)
        if key not in self.symbols:
            conn = f"{base}_{len(self.reads)}"
            self.reads[conn] = key
            dtype = self.graph.containers[self.graph.node(access).container].dtype
            self.symbols[key] = connector_symbol(conn, dtype)
        return self.symbols[key]


def _clamped(graph: DataflowGraph, access: str, index: tuple, targets: Sequence[sympy.Symbol],
             target_shape: tuple) -> tuple:
    """``index`` with every component that moves with the gathered element kept
    inside the read container (the term using it is guarded off there)."""
    shape = graph.containers[graph.node(access).container].shape
    out = []
    for e, n in zip(index, shape):
        e = sympy.sympify(e)
        in_range = any(e == o and n == m for o, m in zip(targets, target_shape))
        if e.free_symbols & set(targets) and not in_range:
            e = _clamp(e, n)
        out.append(e)
    return tuple(out)


@functools.lru_cache(maxsize=4096)
def _clamp(e: sympy.Expr, n: sympy.Expr) -> sympy.Expr:
    """``min(max(e, 0), n - 1)``, cached: sympy's Max/Min look for redundant arguments at every
    construction (milliseconds each), and an unrolled loop clamps the same index many times."""
    return sympy.Min(sympy.Max(e, 0), n - 1)


@functools.lru_cache(maxsize=4096)
def _guarded(term: sympy.Expr, valid: sympy.Boolean) -> sympy.Expr:
    """``term`` where ``valid`` holds, else 0; cached: sympy's Piecewise simplifies its
    conditions at every construction (milliseconds), and the steps of an unrolled loop
    gather the same terms (connector names restart in every gather)."""
    return sympy.Piecewise((term, valid), (0, True))


def _term(graph: DataflowGraph, t: Tasklet, m: Memlet, solution: dict, reads: _GatherReads,
          targets: Sequence[sympy.Symbol], target_shape: tuple) -> sympy.Expr:
    """The contribution of ``t``'s write ``m`` to gathered element ``targets``,
    reading (closed over gather indices) what ``t`` read, at shifted indices."""
    conn_of = {sym: conn for conn, sym in t.inputs.items()}
    read_of = {rm.connector: (a, rm.index) for a, rm in graph.reads(t.name)}
    subs = dict(solution)

    def bring(conn: str) -> None:
        sym = t.inputs[conn]
        if sym in subs:
            return
        access, index = read_of[conn]
        for e in index:
            for s in sorted(sympy.sympify(e).free_symbols & conn_of.keys(), key=str):
                bring(conn_of[s])
        shifted = tuple(sympy.sympify(e).xreplace(subs) for e in index)
        subs[sym] = reads.symbol(access, _clamped(graph, access, shifted, targets, target_shape), conn)

    expr = t.body[m.connector]
    for s in sorted(sympy.sympify(expr).free_symbols & conn_of.keys(), key=str):  # stable connector names
        bring(conn_of[s])
    return expr.xreplace(subs)


def _gather(graph: DataflowGraph, access: str, targets: tuple, candidates: list) -> str:
    container = graph.containers[graph.node(access).container]
    reads = _GatherReads(graph)
    total = sympy.S.Zero
    ranges = {o: (0, n) for o, n in zip(targets, container.shape)}
    for t, m, (solution, conditions) in candidates:
        # a shift-0 write over the whole container exists for every gathered element: no guard
        valid = sympy.And(*(c for c in conditions if not holds_on_ranges(c, ranges)), t.condition.xreplace(solution))
        term = _term(graph, t, m, solution, reads, targets, container.shape)
        total += term if valid is sympy.true else _guarded(term, valid)
    sole = len(candidates) == len(graph.writers(access))
    for name in dict.fromkeys(t.name for t, _, _ in candidates):
        drop_outputs(graph, name, {m.connector for u, m, _ in candidates if u.name == name})
    first = candidates[0][0]
    forward = list(dict.fromkeys(notes.forward_tasklet(t) for t, _, _ in candidates))
    values = {notes.forward_values(t) or "none" for t, _, _ in candidates}
    forward_values = next(v for v in notes.FORWARD_VALUES if v in values)  # the first that any term does
    gather = graph.add_tasklet(
        f"gather_{container.name}", tuple((o, 0, n) for o, n in zip(targets, container.shape)),
        {"d": total}, reads.reads, {"d": (access, targets, None if sole else "sum")},
        source=first.source, backward=True, **notes.tasklet_notes(
            {}, strategy="gather", forward_tasklet=forward[0], forward_tasklets=forward, forward_values=forward_values))
    return gather.name
