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

from typing import Mapping, Sequence

import sympy

from symdiff.ir import tasklet_notes as notes
from symdiff.ir.graph import DataflowGraph, Memlet, connector_symbol, index_symbol
from symdiff.ir.graph_notes import GraphNotes
from symdiff.ir.index_analysis import injective
from symdiff.ir.library import is_library

from .activity import Activity, Pair, analyse, latest_versions
from .custom_vjp import active_calls, tagged_tasklets, trace_backward
from .library_rules import trace_vjp
from .derivatives import guarded_product, tasklet_partials
from .derived import (Body, Names, accumulation_helpers, add_forward_reads, check_request, through_accumulation,
                      with_stored_value)
from .push import PushLayout, check_modes, push_layouts
from .transpose import gather_stencils


def add_backward_pass(graph: DataflowGraph, inputs: Sequence[str],
                      outputs: Sequence[str], stencil_gathers: bool = True,
                      accumulate: Mapping[str, str] | None = None) -> dict[str, str]:
    """Add the reverse pass of ``outputs`` w.r.t. ``inputs``; return
    ``{input: gradient_container}``.

    Naming (chosen with ``graph.unique_name``, so a clash gets a suffix):

    * ``seed_<output>``: a new *argument* holding the cotangent of each output
      (its latest version); ``GraphNotes(graph).seeds[output]`` names it.
    * ``grad_<input>``: a new *result* holding the gradient of each input's
      version 0; ``GraphNotes(graph).gradients[input]`` names it.  An input the
      outputs do not depend on gets this container with no writer: it reads as
      zeros and costs no tasklet.
    * ``grad_<container>_<version>``: transient gradient of an intermediate
      version; ``grad_<tasklet>`` the backward tasklet of a forward tasklet,
      marked ``backward=True`` with the notes (``ir.tasklet_notes``)
      ``forward_tasklet`` and ``forward_values`` (``"stored"``: reads forward results such as
      ``exp(x)``'s output; ``"recompute"``: recomputes from the forward inputs;
      ``"none"``); each gradient write is plain where the index map is
      injective and the gradient has a single contributor, else a ``"sum"``
      (its memlet's ``accumulate``).

    ``stencil_gathers``: turn shifted scatter-adds into gathers
    (``symdiff.transpose``); off only to measure what that saves.

    ``accumulate``: ``{input: "sum" | "push"}`` (default ``"sum"``).  A pushed
    input broadcast against a batch gets one gradient per batch element:
    ``grad_<input>`` has the batch axes in front of the input's shape
    (``symdiff.push``).

    Both name maps are merged across calls, so a second (higher-order) pass
    keeps the first pass's seeds.
    """
    inputs = list(dict.fromkeys(inputs))
    outputs = list(dict.fromkeys(outputs))
    check_request(graph, inputs, outputs)
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

    graph_notes = GraphNotes(graph)   # new dicts: a copy of the graph shares the old ones
    graph_notes.seeds = {**(graph_notes.seeds or {}), **seeds}
    graph_notes.gradients = {**(graph_notes.gradients or {}), **gradients}
    return gradients


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
            self.graph.add_container(name, c.shape, c.dtype, "transient")
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
            backward=True, **notes.tasklet_notes({}, forward_tasklet=None))

    def _aux(self, access: str) -> dict[str, str]:
        if access not in self.aux:
            self.aux[access] = accumulation_helpers(self.graph, access, backward=True)
        return self.aux[access]

    def _term(self, body: Body, t, pair: Pair, partial: sympy.Expr) -> tuple[sympy.Expr, bool]:
        """One contribution ``d out/d conn * g`` of a (write, read) pair, and
        whether it reads a stored forward result."""
        g = self.graph
        wm = pair.write
        grad = body.read(g, f"g_{wm.connector}", g.access(self.grad[pair.write_access], 0), wm.index)
        value = t.body[wm.connector]
        if wm.accumulate in (None, "sum"):
            partial, stored = with_stored_value(g, body, pair.write_access, wm, value, partial)
            return guarded_product(grad, partial), stored
        aux = self._aux(pair.write_access)
        return through_accumulation(g, body, aux, pair.write_access, wm, value, guarded_product(grad, partial)), True

    def _backward_tasklet(self, tasklet: str, pairs: list[Pair]) -> None:
        g = self.graph
        t = g.node(tasklet)
        partials = tasklet_partials(t.body, t.inputs)
        body = Body(Names(set(t.inputs) | set(t.body)))
        sums: dict[tuple[str, Memlet], sympy.Expr] = {}
        stored = False
        for p in pairs:
            term, used = self._term(body, t, p, partials[(p.write.connector, p.read.connector)])
            key = (p.read_access, p.read)
            sums[key] = sums.get(key, sympy.S.Zero) + term
            stored |= used
        exprs, writes = {}, {}
        domain = t.index_symbols
        for (access, rm), expr in sums.items():
            conn = body.names(f"d_{rm.connector}")
            exprs[conn] = expr
            index = self.pushed[access].index(tasklet, rm.index) if access in self.pushed else rm.index
            mode = self._mode(access, index, domain)
            writes[conn] = (g.access(self.grad[access], 0), index, mode)
        values = set().union(*(e.free_symbols for e in exprs.values()))
        recomputed = any(sym in values for sym in t.inputs.values())
        add_forward_reads(g, tasklet, body.reads, list(exprs.values()),
                          [index for _, index in body.reads.values()] + [w[1] for w in writes.values()])
        g.add_tasklet(f"grad_{tasklet}", t.domain, exprs, body.reads, writes, condition=t.condition,
                      source=t.source, backward=True, **notes.tasklet_notes(
                          {}, forward_tasklet=tasklet,
                          forward_values="stored" if stored else ("recompute" if recomputed else "none")))
