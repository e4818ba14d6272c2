"""``add_backward_pass``: extend a dataflow graph with its reverse pass, in place.

The reverse pass is built from the same pieces as the forward one (containers,
versions, tasklets, memlets), so it runs on every backend and can itself be
differentiated (higher order).  Per active forward tasklet ``T`` over domain
``D`` (see ``activity``) there is one backward tasklet over the same ``D`` and
``condition``: it reads the gradient of each written version at the write
index ``psi(i)``, the forward values its partials need, and adds
``g * d body / d conn`` into the gradient of each read version at the read
index ``phi(i)``.  Reading ``g`` at ``psi(i)`` for every ``i`` turns a forward
``"sum"`` accumulation into a broadcast, and the ``"sum"`` write at ``phi(i)``
turns a forward broadcast (or gather) into a reduction (or scatter-add).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import sympy

from symdiff.ir.graph import FLOAT_DTYPES, DataflowGraph, Memlet, connector_symbol, index_symbol
from symdiff.ir.index_analysis import injective
from symdiff.ir.library import is_library
from symdiff.ir.scalar_functions import compare

from .activity import Activity, Pair, analyse, latest_versions
from .custom_vjp import active_calls, tagged_tasklets, trace_backward
from .library_rules import trace_vjp
from .derivatives import guarded_product, tasklet_partials
from .errors import DifferentiationError
from .push import PushLayout, check_modes, push_layouts
from .transpose import gather_stencils


def add_backward_pass(graph: DataflowGraph, inputs: Sequence[str],
                      outputs: Sequence[str], stencil_gathers: bool = True,
                      accumulate: Mapping[str, str] | None = None) -> dict[str, str]:
    """Add the reverse pass of ``outputs`` w.r.t. ``inputs``; return
    ``{input: gradient_container}``.

    Naming (chosen with ``graph.unique_name``, so a clash gets a suffix):

    * ``seed_<output>``: a new *argument* holding the cotangent of each output
      (its latest version); ``graph.meta["seeds"][output]`` names it.
    * ``grad_<input>``: a new *result* holding the gradient of each input's
      version 0; ``graph.meta["gradients"][input]`` names it.  An input the
      outputs do not depend on gets this container with no writer: it reads as
      zeros and costs no tasklet.
    * ``grad_<container>_<version>``: transient gradient of an intermediate
      version; ``grad_<tasklet>`` the backward tasklet of a forward tasklet,
      marked ``backward=True`` with ``meta["forward_tasklet"]``,
      ``meta["forward_values"]`` (``"stored"``: reads forward results such as
      ``exp(x)``'s output; ``"recompute"``: recomputes from the forward inputs;
      ``"none"``), ``meta["write_modes"]`` (``{connector: "plain"|"sum"}``:
      plain where the index map is injective and the gradient has a single
      contributor).

    ``stencil_gathers``: turn shifted scatter-adds into gathers
    (``symdiff.transpose``); off only to measure what that saves.

    ``accumulate``: ``{input: "sum" | "push"}`` (default ``"sum"``).  A pushed
    input broadcast against a batch gets one gradient per batch element:
    ``grad_<input>`` has the batch axes in front of the input's shape
    (``symdiff.push``).

    Both meta dicts are merged across calls, so a second (higher-order) pass
    keeps the first pass's seeds.
    """
    inputs = list(dict.fromkeys(inputs))
    outputs = list(dict.fromkeys(outputs))
    _check_request(graph, inputs, outputs)
    check_modes(accumulate or {}, inputs)
    input_nodes = {x: graph.access(x, 0) for x in inputs}
    latest = latest_versions(graph)
    output_nodes = {o: latest[o] for o in outputs if o in latest}
    activity = analyse(graph, input_nodes.values(), output_nodes.values())
    pushed = push_layouts(graph, activity, input_nodes, accumulate or {})

    gradients = {}
    for x in inputs:
        c = graph.containers[x]
        batch = pushed[input_nodes[x]].batch if input_nodes[x] in pushed else ()
        gradients[x] = graph.add_container(graph.unique_name(f"grad_{x}"), batch + c.shape, c.dtype,
                                           "result").name
        graph.access(gradients[x], 0)
    seeds = {}
    for o in outputs:
        c = graph.containers[o]
        seeds[o] = graph.add_container(graph.unique_name(f"seed_{o}"), c.shape, c.dtype, "argument").name
        graph.access(seeds[o], 0)

    _ReversePass(graph, activity,
                 {input_nodes[x]: gradients[x] for x in inputs},
                 {output_nodes[o]: seeds[o] for o in output_nodes if output_nodes[o] in activity.versions},
                 pushed).build()
    if stencil_gathers:
        gather_stencils(graph)

    graph.meta.setdefault("seeds", {}).update(seeds)
    graph.meta.setdefault("gradients", {}).update(gradients)
    return gradients


def _check_request(graph: DataflowGraph, inputs: list[str], outputs: list[str]) -> None:
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


def _expensive(expr: sympy.Expr) -> bool:
    """Worth storing rather than recomputing: any function call or root."""
    return any(isinstance(n, sympy.core.function.Application)
               or (isinstance(n, sympy.Pow) and not n.exp.is_Integer)
               for n in sympy.preorder_traversal(expr))


@functools.lru_cache(maxsize=None)
def _use_stored(partial: sympy.Expr, value: sympy.Expr, stored: sympy.Symbol) -> sympy.Expr:
    """``partial`` with the forward value ``value`` read from its stored result
    where that saves recomputing an expensive function (``tanh' = 1 - o**2``)."""
    if not _expensive(value):
        return partial
    replaced = partial.xreplace({value: stored})
    if replaced == partial and isinstance(value, sympy.Pow) and value.exp in (sympy.S.Half, -sympy.S.Half):
        # sqrt(x)' = x**(-1/2)/2 -> 1/(2*o).  Not for other powers: subs writes
        # x**y's y*x**(y-1) as y*o/x, NaN at x = 0 where JAX's is 0 (x**2, x**1.5)
        replaced = partial.subs(value, stored)
    return replaced


class _Names:
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
class _Body:
    """A backward tasklet under construction."""

    names: _Names
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
        body = _Body(_Names(set(t.inputs)))
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
                      condition=t.condition, backward=backward, forward_tasklet=writer)
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


class _ReversePass:
    def __init__(self, graph: DataflowGraph, activity: Activity, input_grads: dict[str, str],
                 seeds: dict[str, str], pushed: dict[str, PushLayout] | None = None):
        self.graph = graph
        self.pushed = pushed or {}  # pushed input version -> where its gradient keeps the batch index
        self.activity = activity
        self.seeds = seeds  # active output version -> seed container
        self.grad: dict[str, str] = dict(input_grads)  # active version -> gradient container
        self.contributors: dict[str, int] = {}
        self.aux: dict[str, dict[str, str]] = {}  # max/min/prod version -> helper access ids

    def build(self) -> None:
        custom = tagged_tasklets(self.graph)  # differentiated by the user's backward (symdiff.custom_vjp)
        active = [n for n in reversed(self.graph.topological_order()) if n in self.activity.pairs and n not in custom]
        library = [n for n in active if is_library(self.graph.node(n))]  # their registered rules (library_rules)
        order = [n for n in active if not is_library(self.graph.node(n))]
        readers = {}
        for tasklet in order + library:
            for p in self.activity.pairs[tasklet]:
                readers.setdefault((p.read_access, p.read.connector, tasklet), p.read_access)
        calls = active_calls(self.graph, self.activity)
        for record, arguments in calls:
            for k, access in enumerate(arguments):
                readers[(access, k, record.call)] = access
        for access in list(readers.values()) + list(self.seeds):
            self.contributors[access] = self.contributors.get(access, 0) + 1
        for access, n in self.contributors.items():
            if access in self.grad:
                continue
            if access in self.seeds and n == 1:
                self.grad[access] = self.seeds[access]  # the cotangent is the gradient itself
                continue
            node = self.graph.node(access)
            c = self.graph.containers[node.container]
            name = self.graph.unique_name(f"grad_{node.container}_{node.version}")
            self.graph.add_container(name, c.shape, c.dtype, "transient", gradient_of=access)
            self.grad[access] = name
        for access, seed in self.seeds.items():
            if self.grad[access] != seed:
                self._copy_seed(access, seed)
        for tasklet in order:
            self._backward_tasklet(tasklet, self.activity.pairs[tasklet])
        for record, _ in calls:
            trace_backward(self.graph, record, self.grad, self._mode)
        for name in library:
            trace_vjp(self.graph, self.graph.node(name), self.grad, self._mode)

    def _mode(self, access: str, index: tuple, domain: Sequence[sympy.Symbol]) -> str | None:
        return None if self.contributors[access] == 1 and injective(index, domain) else "sum"

    def _copy_seed(self, access: str, seed: str) -> None:
        shape = self.graph.containers[seed].shape
        idx = tuple(index_symbol(f"i{k}") for k in range(len(shape)))
        target = self.graph.access(self.grad[access], 0)
        self.graph.add_tasklet(
            f"copy_{seed}", [(i, 0, n) for i, n in zip(idx, shape)], {"d": connector_symbol("g", "float64")},
            {"g": (self.graph.access(seed, 0), idx)},
            {"d": (target, idx, self._mode(access, idx, idx))},
            backward=True, forward_tasklet=None, seed_of=access)

    def _aux(self, access: str) -> dict[str, str]:
        if access not in self.aux:
            self.aux[access] = accumulation_helpers(self.graph, access, backward=True)
        return self.aux[access]

    def _term(self, body: _Body, t, pair: Pair, partial: sympy.Expr) -> tuple[sympy.Expr, bool]:
        """One contribution ``d out/d conn * g`` of a (write, read) pair, and
        whether it reads a stored forward result."""
        g = self.graph
        wm = pair.write
        grad = body.read(g, f"g_{wm.connector}", g.access(self.grad[pair.write_access], 0), wm.index)
        value = t.body[wm.connector]
        acc = wm.accumulate
        if acc in (None, "sum"):
            stored = False
            if acc is None and _expensive(value):
                out = connector_symbol("__stored__", g.containers[wm.container].dtype)
                replaced = _use_stored(partial, value, out)
                if replaced != partial:
                    sym = body.read(g, f"f_{wm.connector}", pair.write_access, wm.index)
                    partial, stored = replaced.xreplace({out: sym}), True
            return guarded_product(grad, partial), stored
        aux = self._aux(pair.write_access)
        stored_value = body.read(g, f"f_{wm.connector}", pair.write_access, wm.index)
        contribution = guarded_product(grad, partial)
        if acc in ("max", "min"):
            # JAX's form: g [x == max] / count.  A NaN maximum equals no element,
            # so count is 0 and every element's gradient is NaN, as in JAX.
            count = body.read(g, "count", aux["count"], wm.index)
            return contribution * sympy.Piecewise((1, compare(sympy.Eq, value, stored_value)), (0, True)) / count, True
        zeros = body.read(g, "zeros", aux["zeros"], wm.index)
        nonzero = body.read(g, "nonzero", aux["nonzero"], wm.index)
        return sympy.Piecewise((contribution * nonzero / value, sympy.Eq(zeros, 0)),
                               (contribution * nonzero, sympy.Eq(value, 0) & sympy.Eq(zeros, 1)),
                               (0, True)), True

    def _backward_tasklet(self, tasklet: str, pairs: list[Pair]) -> None:
        g = self.graph
        t = g.node(tasklet)
        partials = tasklet_partials(t.body, t.inputs)
        body = _Body(_Names(set(t.inputs) | set(t.body)))
        sums: dict[tuple[str, Memlet], sympy.Expr] = {}
        stored = False
        for p in pairs:
            term, used = self._term(body, t, p, partials[(p.write.connector, p.read.connector)])
            key = (p.read_access, p.read)
            sums[key] = sums.get(key, sympy.S.Zero) + term
            stored |= used
        exprs, writes, modes = {}, {}, {}
        domain = t.index_symbols
        for (access, rm), expr in sums.items():
            conn = body.names(f"d_{rm.connector}")
            exprs[conn] = expr
            index = self.pushed[access].index(tasklet, rm.index) if access in self.pushed else rm.index
            mode = self._mode(access, index, domain)
            writes[conn] = (g.access(self.grad[access], 0), index, mode)
            modes[conn] = mode or "plain"
        values = set().union(*(e.free_symbols for e in exprs.values()))
        recomputed = any(sym in values for sym in t.inputs.values())
        add_forward_reads(g, tasklet, body.reads, list(exprs.values()),
                          [index for _, index in body.reads.values()] + [w[1] for w in writes.values()])
        g.add_tasklet(f"grad_{tasklet}", t.domain, exprs, body.reads, writes, condition=t.condition,
                      source=t.source, backward=True, forward_tasklet=tasklet,
                      forward_values="stored" if stored else ("recompute" if recomputed else "none"),
                      write_modes=modes)
