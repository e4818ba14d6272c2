"""What the reverse pass (``backward``) and the tangent pass (``forward``) build
their tasklets from: connector names, the reads of a derived tasklet, the
forward values a partial reads stored instead of recomputing, and the
derivative through a ``max``/``min``/``prod`` accumulation (ties split evenly,
products exact with zeros), one rule for both modes.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Sequence

import sympy

from symdiff.ir import op_cost
from symdiff.ir import tasklet_notes as notes
from symdiff.ir.graph import FLOAT_DTYPES, DataflowGraph, Memlet, connector_symbol
from symdiff.ir.scalar_functions import compare

from .errors import DifferentiationError


def check_request(graph: DataflowGraph, inputs: list[str], outputs: list[str]) -> None:
    """Refuse inputs or outputs that are no float container of ``graph``, naming what is."""
    for kind, names in (("input", inputs), ("output", outputs)):
        for name in names:
            if name not in graph.containers:
                raise DifferentiationError(
                    f"{kind} {name!r} is not a container of graph {graph.name!r} "
                    f"(arguments {graph.arguments}, results {graph.results})")
            dtype = graph.containers[name].dtype
            if dtype not in FLOAT_DTYPES:
                raise DifferentiationError(
                    f"{kind} {name!r} has dtype {dtype}; only float containers "
                    f"({', '.join(FLOAT_DTYPES)}) can be differentiated")


@functools.lru_cache(maxsize=None)
def use_stored(partial: sympy.Expr, value: sympy.Expr, stored: sympy.Symbol) -> sympy.Expr:
    """``partial`` with the forward value ``value`` read from its stored result
    where that saves calling a function again (``tanh' = 1 - o**2``; the kinds of
    operation are ``ir.op_cost``'s, which the lowering's cost model prices too)."""
    if not op_cost.calls(value):
        return partial
    replaced = partial.xreplace({value: stored})
    if replaced == partial and isinstance(value, sympy.Pow) and value.exp in (sympy.S.Half, -sympy.S.Half):
        # sqrt(x)' = x**(-1/2)/2 -> 1/(2*o).  Not for other powers: subs writes
        # x**y's y*x**(y-1) as y*o/x, NaN at x = 0 where JAX's is 0 (x**2, x**1.5)
        replaced = partial.subs(value, stored)
    return replaced


class Names:
    """Connector names of one backward tasklet, never clashing with the
    forward connectors it also reads."""

    def __init__(self, taken: set[str]):
        self.taken = set(taken)

    def __call__(self, base: str) -> str:
        name, k = base, 0
        while name in self.taken:
            k += 1
            name = f"{base}_{k}"
        self.taken.add(name)
        return name


@dataclass
class Body:
    """A backward tasklet under construction."""

    names: Names
    reads: dict[str, tuple[str, tuple]] = field(default_factory=dict)  # conn -> (access, index)
    symbols: dict[tuple, sympy.Symbol] = field(default_factory=dict)  # (access, index) -> symbol

    def read(self, graph: DataflowGraph, base: str, access: str, index: tuple) -> sympy.Symbol:
        """The symbol of ``access[index]``, one connector per distinct read."""
        key = (access, index)
        if key not in self.symbols:
            conn = self.names(base)
            self.reads[conn] = (access, index)
            self.symbols[key] = connector_symbol(conn, graph.containers[graph.node(access).container].dtype)
        return self.symbols[key]


def accumulation_helpers(graph: DataflowGraph, access: str, backward: bool) -> dict[str, str]:
    """Helpers of a ``max``/``min``/``prod``-accumulated version, one set per
    derivative pass, shared by all its writers: tie counts, or zero counts and
    the product of the nonzero factors (exact derivatives of a product with
    zeros).  Returns ``{kind: access id}``; the reverse and the tangent pass
    both split a tie evenly with ``count``."""
    g = graph
    node = g.node(access)
    c = g.containers[node.container]
    acc = g.accumulation(access)
    kinds = {"count": "sum"} if acc in ("max", "min") else {"zeros": "sum", "nonzero": "prod"}
    helpers = {}
    for kind, mode in kinds.items():
        name = g.add_container(g.unique_name(f"{kind}_{node.container}_{node.version}"),
                               c.shape, c.dtype, "transient").name
        helpers[kind] = g.access(name, 0)
    for writer, wm in g.writers(access):
        t = g.node(writer)
        value = t.body[wm.connector]
        body = Body(Names(set(t.inputs)))
        body.reads.update({rm.connector: (ra, rm.index) for ra, rm in g.reads(writer)})
        if acc in ("max", "min"):
            stored = body.read(g, "result", access, wm.index)
            exprs = {"count": sympy.Piecewise((1, compare(sympy.Eq, value, stored)), (0, True))}
        else:
            is_zero = sympy.Eq(value, 0)
            exprs = {"zeros": sympy.Piecewise((1, is_zero), (0, True)),
                     "nonzero": sympy.Piecewise((1, is_zero), (value, True))}
        outs = {body.names(k): k for k in exprs}
        g.add_tasklet(f"{next(iter(kinds))}_{writer}", t.domain, {c: exprs[k] for c, k in outs.items()},
                      body.reads, {c: (helpers[k], wm.index, kinds[k]) for c, k in outs.items()},
                      condition=t.condition, backward=backward, **notes.tasklet_notes({}, forward_tasklet=writer))
    return helpers


def add_forward_reads(graph: DataflowGraph, tasklet: str, reads: dict[str, tuple[str, tuple]],
                      exprs: Sequence[sympy.Expr], indices: Sequence[tuple]) -> None:
    """Add to ``reads`` (a derived tasklet's ``{connector: (access, index)}``)
    the forward tasklet's connectors that ``exprs`` and ``indices`` use, closed
    over the indices of gather reads (``a[idx[i]]`` needs ``idx``)."""
    forward = {m.connector: (a, m.index) for a, m in graph.reads(tasklet)}
    needed = set().union(*(e.free_symbols for e in exprs))
    for index in indices:
        needed |= set().union(*(sympy.sympify(i).free_symbols for i in index))
    # in the forward tasklet's order, not a set's: a set of symbols iterates in an order that
    # depends on the process's string hashing (PYTHONHASHSEED), and the order of ``reads`` is
    # the order of the generated loads, so the module's text and its on-disk cache keys would too
    names = {s.name for s in needed}
    pending = [c for c in reversed(forward) if c in names]
    while pending:
        conn = pending.pop()
        if conn in reads:
            continue
        reads[conn] = forward[conn]
        for i in forward[conn][1]:
            pending.extend(sorted((s.name for s in sympy.sympify(i).free_symbols if s.name in forward), reverse=True))




def with_stored_value(graph: DataflowGraph, body: Body, access: str, wm: Memlet, value: sympy.Expr,
                      partial: sympy.Expr) -> tuple[sympy.Expr, bool]:
    """``partial`` of the ``value`` a forward tasklet writes plainly through ``wm``
    to version ``access``, reading that stored result where that saves calling a
    function again (``use_stored``), and whether it does.  An accumulated write
    stores no single point's value."""
    if wm.accumulate is not None or not op_cost.calls(value):
        return partial, False
    out = connector_symbol("__stored__", graph.containers[wm.container].dtype)
    replaced = use_stored(partial, value, out)
    if replaced == partial:
        return partial, False
    return replaced.xreplace({out: body.read(graph, f"f_{wm.connector}", access, wm.index)}), True


def through_accumulation(graph: DataflowGraph, body: Body, helpers: dict[str, str], access: str, wm: Memlet,
                         value: sympy.Expr, contribution: sympy.Expr) -> sympy.Expr:
    """The derivative ``contribution`` of one point's ``value``, carried through
    ``wm``'s ``max``/``min``/``prod`` accumulation into version ``access`` (its
    ``accumulation_helpers`` are ``helpers``): in either mode, the point that
    wins a maximum takes it, split evenly between tied points (JAX's ``[x ==
    max] / count``: a NaN maximum equals no point, the count is 0 and the
    derivative NaN, as in JAX), and a product's is exact with zeros."""
    result = body.read(graph, f"f_{wm.connector}", access, wm.index)
    if wm.accumulate in ("max", "min"):
        count = body.read(graph, "count", helpers["count"], wm.index)
        return contribution * sympy.Piecewise((1, compare(sympy.Eq, value, result)), (0, True)) / count
    zeros = body.read(graph, "zeros", helpers["zeros"], wm.index)
    nonzero = body.read(graph, "nonzero", helpers["nonzero"], wm.index)
    return sympy.Piecewise((contribution * nonzero / value, sympy.Eq(zeros, 0)),
                           (contribution * nonzero, sympy.Eq(value, 0) & sympy.Eq(zeros, 1)),
                           (0, True))
