"""``add_tangent_pass``: extend a dataflow graph with its forward-mode (tangent) pass, in place.

The tangent pass is the reverse pass's mirror, built from the same pieces
(containers, versions, tasklets, memlets) and the same per-tasklet partials
(``derivatives.tasklet_partials``), so it runs on every backend and can itself
be differentiated (reverse-over-forward) or be added to a backward graph
(forward-over-reverse).  Per active forward tasklet ``T`` over domain ``D``
(see ``activity``: only tasklets on a path from an input with a tangent to an
output take part) there is one tangent tasklet over the same ``D`` and
``condition``: it reads the tangent of each active read version at the read
index ``phi(i)`` and the forward values its partials need, and writes
``sum_k d body/d conn_k * t_k`` into the tangent of each written version at
the write index ``psi(i)``.  A plain write stays plain and a ``"sum"``
accumulation stays a ``"sum"``; a ``max``/``min`` accumulation's tangent is
the tangent of the element that wins, split evenly between tied elements (the
reverse pass's and JAX's convention), and a ``prod``'s is exact with zeros.
Reading at the forward tasklet's own points over its own domain, a tangent
tasklet joins the forward tasklet's kernel in the lowering (``lowering.plan``
passes the forward values in registers).
"""
from __future__ import annotations

from typing import Mapping, Sequence

import networkx as nx
import sympy

from symdiff.ir import tasklet_notes as notes
from symdiff.ir.graph import AccessNode, DataflowGraph, connector_symbol, index_symbol
from symdiff.ir.graph_notes import GraphNotes
from symdiff.ir.library import is_library

from .activity import Activity, Pair, analyse, latest_versions
from .derived import (Body, Names, accumulation_helpers, add_forward_reads, check_request, through_accumulation,
                      with_stored_value)
from .library_rules import trace_jvp
from .derivatives import guarded_product, tasklet_partials
from .errors import DifferentiationError


def add_tangent_pass(graph: DataflowGraph, inputs: Sequence[str], outputs: Sequence[str],
                     tangent_names: Mapping[str, str] | None = None) -> dict[str, str]:
    """Add the tangent (Jacobian-vector product) pass of ``outputs`` along the
    tangents of ``inputs``; return ``{output: tangent_container}``.

    Naming (``graph.unique_name`` unless ``tangent_names`` fixes an input's):

    * ``t_<input>``: a new *argument* holding the tangent of each input's
      version 0; ``GraphNotes(graph).tangent_inputs[input]`` names it.  Inputs
      not listed have tangent zero and cost nothing.
    * ``tangent_<output>``: a new *result* holding the tangent of each
      output's latest version; ``GraphNotes(graph).tangents[output]`` names it.
      An output that does not depend on the inputs gets it with no writer
      (zeros, no tasklet).
    * ``tan_<container>_<version>``: transient tangent of an intermediate
      version; ``jvp_<tasklet>`` the tangent tasklet of a forward tasklet,
      with the notes (``ir.tasklet_notes``) ``tangent_of`` naming it and
      ``forward_values`` (``"stored"``, ``"recompute"`` or ``"none"``, as in the reverse pass);
      ``count_``/``zeros_``/``nonzero_`` helpers of a
      max/min/prod reduction (``derived.accumulation_helpers``).

    The name maps are merged across calls.
    """
    inputs = list(dict.fromkeys(inputs))
    outputs = list(dict.fromkeys(outputs))
    check_request(graph, inputs, outputs)
    tangent_names = dict(tangent_names or {})
    input_nodes = {x: graph.access(x, 0) for x in inputs}
    latest = latest_versions(graph)
    output_nodes = {o: latest.get(o) or graph.access(o, 0) for o in outputs}
    _refuse_loops(graph, input_nodes.values())
    activity = analyse(graph, input_nodes.values(), output_nodes.values())

    tangent_inputs = {}
    for x in inputs:
        c = graph.containers[x]
        name = tangent_names.get(x) or graph.unique_name(f"t_{x}")
        if name in graph.containers or name in graph.nx:
            raise DifferentiationError(f"tangent name {name!r} for input {x!r} is already used in graph "
                                       f"{graph.name!r}; pick another")
        tangent_inputs[x] = graph.add_container(name, c.shape, c.dtype, "argument").name
        graph.access(tangent_inputs[x], 0)
    tangents = {}
    for o in outputs:
        c = graph.containers[o]
        tangents[o] = graph.add_container(graph.unique_name(f"tangent_{o}"), c.shape, c.dtype, "result").name
        graph.access(tangents[o], 0)

    _TangentPass(graph, activity, {input_nodes[x]: tangent_inputs[x] for x in inputs},
                 {output_nodes[o]: tangents[o] for o in outputs if output_nodes[o] in activity.versions}).build()
    _release_custom_rules(graph, activity)

    graph_notes = GraphNotes(graph)   # new dicts: a copy of the graph shares the old ones
    graph_notes.tangent_inputs = {**(graph_notes.tangent_inputs or {}), **tangent_inputs}
    graph_notes.tangents = {**(graph_notes.tangents or {}), **tangents}
    return tangents


def _refuse_loops(graph: DataflowGraph, input_nodes) -> None:
    """A loop kept out of the graph (``sd.fori_loop``, ``GraphNotes.loops``)
    hands its state back through new argument containers, which would carry no
    tangent: refuse a loop the tangents reach rather than drop their tangent."""
    loops = GraphNotes(graph).loops
    if not loops:
        return
    reached = set(input_nodes).union(*(nx.descendants(graph.nx, n) for n in input_nodes))
    containers = {graph.node(n).container for n in reached if isinstance(graph.node(n), AccessNode)}
    for loop in loops:
        if containers & set(loop.inputs):
            where = f"{loop.where}: " if getattr(loop, "where", None) else ""
            raise DifferentiationError(
                f"{where}this tangent pass does not go through loop {loop.name!r} (sd.fori_loop / "
                "sd.while_loop), which it would drop; symdiff.loop_runtime.add_tangent_pass (what program.jvp "
                "uses) makes the loop's tangent a loop")


def _release_custom_rules(graph: DataflowGraph, activity: Activity) -> None:
    """Forget the ``sd.custom_vjp`` rules of the calls the tangents went through.

    The tangent pass differentiates such a call's forward tasklets
    automatically, and its tangent tasklets read the call's internal values
    (a softmax's exponentials and sums).  A later reverse pass over this graph
    (reverse-over-forward) must send cotangents back through those internals,
    which a user's backward rule, mapping only the output's cotangent, cannot:
    it would drop them silently.  So the call is differentiated automatically
    there too, consistently with its tangent.  The forward graph keeps its
    rules (graph notes are replaced, never mutated: copies share them)."""
    calls = GraphNotes(graph).custom_vjps
    if calls:
        kept = [call for call in calls if not set(call.tasklets) & activity.pairs.keys()]
        if len(kept) != len(calls):
            GraphNotes(graph).custom_vjps = kept


class _TangentPass:
    def __init__(self, graph: DataflowGraph, activity: Activity, input_tangents: dict[str, str],
                 output_tangents: dict[str, str]):
        self.graph = graph
        self.activity = activity
        self.outputs = output_tangents  # active output version -> tangent result container
        self.tangent: dict[str, str] = dict(input_tangents)  # active version -> tangent container
        self.aux: dict[str, dict[str, str]] = {}

    def build(self) -> None:
        g = self.graph
        for access in [n for n in g.nx.nodes if n in self.activity.versions]:  # graph order: stable names
            if access in self.tangent:
                continue
            if access in self.outputs:
                self.tangent[access] = self.outputs[access]
                continue
            node = g.node(access)
            c = g.containers[node.container]
            name = g.unique_name(f"tan_{node.container}_{node.version}")
            g.add_container(name, c.shape, c.dtype, "transient")
            self.tangent[access] = name
        for tasklet in g.topological_order():
            if tasklet in self.activity.pairs and is_library(g.node(tasklet)):  # its registered rule
                trace_jvp(g, g.node(tasklet), {a: self.tangent[a] for a in self.activity.versions
                                               if a in self.tangent})
            elif tasklet in self.activity.pairs:
                self._tangent_tasklet(tasklet, self.activity.pairs[tasklet])
        for access, result in self.outputs.items():
            if self.tangent[access] != result:  # an output that is an input itself: copy its tangent
                self._copy(self.tangent[access], result)

    def _copy(self, source: str, target: str) -> None:
        shape = self.graph.containers[source].shape
        idx = tuple(index_symbol(f"i{k}") for k in range(len(shape)))
        self.graph.add_tasklet(f"copy_{source}", [(i, 0, n) for i, n in zip(idx, shape)],
                               {"d": connector_symbol("t", "float64")}, {"t": (self.graph.access(source, 0), idx)},
                               {"d": (self.graph.access(target, 0), idx)})

    def _helpers(self, access: str) -> dict[str, str]:
        if access not in self.aux:
            self.aux[access] = accumulation_helpers(self.graph, access, backward=False)
        return self.aux[access]

    def _contribution(self, body: Body, t, wm, pairs: list[Pair], partials: dict) -> tuple[sympy.Expr, bool]:
        """``sum_k d out/d conn_k * t_k`` for one write of ``t``, and whether it
        reads a stored forward result (``tanh' = 1 - o**2`` reads ``o``)."""
        g = self.graph
        write_access = pairs[0].write_access
        value = t.body[wm.connector]
        stored = False
        total = sympy.S.Zero
        for p in pairs:
            partial = partials[(wm.connector, p.read.connector)]
            partial, used = with_stored_value(g, body, write_access, wm, value, partial)
            stored |= used
            tangent = body.read(g, f"t_{p.read.connector}", g.access(self.tangent[p.read_access], 0), p.read.index)
            total += guarded_product(tangent, partial)
        if wm.accumulate in (None, "sum"):
            return total, stored
        return through_accumulation(g, body, self._helpers(write_access), write_access, wm, value, total), True

    def _tangent_tasklet(self, tasklet: str, pairs: list[Pair]) -> None:
        g = self.graph
        t = g.node(tasklet)
        partials = tasklet_partials(t.body, t.inputs)
        body = Body(Names(set(t.inputs) | set(t.body)))
        by_write: dict[tuple, list[Pair]] = {}
        for p in pairs:
            by_write.setdefault((p.write_access, p.write), []).append(p)
        exprs, writes = {}, {}
        stored = False
        for (access, wm), group in by_write.items():
            expr, used = self._contribution(body, t, wm, group, partials)
            stored |= used
            conn = body.names(f"t_{wm.connector}")
            exprs[conn] = expr
            acc = None if wm.accumulate is None else "sum"
            writes[conn] = (g.access(self.tangent[access], 0), wm.index, acc)
        add_forward_reads(g, tasklet, body.reads, list(exprs.values()),
                          [index for _, index in body.reads.values()] + [w[1] for w in writes.values()])
        values = set().union(*(e.free_symbols for e in exprs.values()))
        recomputed = any(sym in values for sym in t.inputs.values())
        g.add_tasklet(f"jvp_{tasklet}", t.domain, exprs, body.reads, writes, condition=t.condition,
                      source=t.source, **notes.tasklet_notes(
                          {}, tangent_of=tasklet,
                          forward_values="stored" if stored else ("recompute" if recomputed else "none")))
