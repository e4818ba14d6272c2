"""Differentiating library nodes (``ir.library``): their registered rules,
traced into the reverse or tangent pass.

A library node is opaque to sympy, so the passes do not differentiate its
body (it has none); instead, where the node is active, its op's ``vjp`` (or
``jvp``) is called on traced arrays standing for the node's primal inputs
and outputs and the cotangents (tangents) of its active results, and what it
returns is added into the gradient (tangent) containers.  The rule's
operations become ordinary tasklets and library nodes of the graph, marked
``backward`` like the pass's own, so a later pass differentiates them in
turn: the gradient of ``solve``'s gradient goes through the ``solve`` its
rule traced.

The primal values are read at the exact versions the node read and wrote; a
container written again after the node is first copied from that version
(a traced array always reads a container's latest version).
"""
from __future__ import annotations

from typing import Callable, Iterable, Sequence

import sympy

from symdiff.ir import tasklet_notes as notes
from symdiff.ir.graph import FLOAT_DTYPES, DataflowGraph, connector_symbol, index_symbol
from symdiff.ir.library import LibraryNode, lookup, ordered_edges
from symdiff.ir.tracer import context
from symdiff.ir.tracer.traced_array import TracedArray

from .errors import DifferentiationError


def library_pairs(graph: DataflowGraph, node: LibraryNode) -> Iterable[tuple]:
    """``(write access, write memlet, read access, read memlet)`` for every
    float result (other than the op's non-differentiable ones) and float
    argument: a library node's results depend on all of its arguments."""
    skip = lookup(node.op).nondifferentiable
    reads, writes = graph.reads(node.name), graph.writes(node.name)
    for wa, wm in writes:
        if node.outputs.index(wm.connector) in skip or graph.containers[wm.container].dtype not in FLOAT_DTYPES:
            continue
        for ra, rm in reads:
            if graph.containers[rm.container].dtype in FLOAT_DTYPES:
                yield wa, wm, ra, rm


def _new_nodes(graph: DataflowGraph, before: set[str]) -> list[str]:
    return [n for n in graph.nx.nodes if n not in before and not hasattr(graph.node(n), "container")]


def _array(trace: context.Trace, graph: DataflowGraph, access: str) -> TracedArray:
    """The value of version ``access`` as a traced array (copied when the
    container has a later version)."""
    node = graph.node(access)
    c = graph.containers[node.container]
    if graph.latest(node.container) != access:
        copy = graph.add_container(graph.unique_name(f"{node.container}_v{node.version}"), c.shape, c.dtype).name
        idx = tuple(index_symbol(f"i{k}") for k in range(len(c.shape)))
        graph.add_tasklet(f"keep_{node.container}", [(i, 0, n) for i, n in zip(idx, c.shape)],
                          {"y": connector_symbol("x", c.dtype)}, {"x": (access, idx)},
                          {"y": (graph.access(copy, 0), idx)})
        return TracedArray(trace, copy, c.shape, c.dtype)
    return TracedArray(trace, c.name, c.shape, c.dtype)


def _add_into(graph: DataflowGraph, node: LibraryNode, value, target: str, mode: str | None, what: str) -> None:
    """Copy (``mode`` None) or add (``"sum"``) the traced ``value`` into the
    whole container ``target`` (a gradient or tangent container)."""
    c = graph.containers[target]
    if not isinstance(value, TracedArray) or tuple(value.sym_shape) != tuple(c.shape):
        got = getattr(value, "sym_shape", type(value).__name__)
        raise DifferentiationError(f"{node.source + ': ' if node.source else ''}library op {node.op}: its {what} "
                                   f"rule returned {got} where an array of shape {tuple(c.shape)} belongs")
    idx = tuple(index_symbol(f"i{k}") for k in range(len(c.shape)))
    graph.add_tasklet(f"{what}_{node.name}", [(i, 0, n) for i, n in zip(idx, c.shape)],
                      {"d": connector_symbol("g", value.dtype_name)},
                      {"g": (graph.access(value.container), value.container_index(idx))},
                      {"d": (graph.access(target, 0), idx, mode)}, source=node.source)


def _traced_rule(graph: DataflowGraph, node: LibraryNode, backward: bool, run: Callable[[context.Trace], None]):
    dtypes = {graph.containers[m.container].dtype for _, m in graph.writes(node.name)}
    trace = context.Trace(graph, "float64" if "float64" in dtypes else "float32")
    before = set(graph.nx.nodes)
    context.push(trace)
    try:
        run(trace)
    finally:
        context.pop()
    for name in _new_nodes(graph, before):
        n = graph.node(name)
        if backward:
            n.backward = True
            notes.annotate(n, forward_tasklet=None, forward_values="stored")  # reads the primal values
        else:
            notes.annotate(n, tangent_of=node.name)


def trace_vjp(graph: DataflowGraph, node: LibraryNode, grads: dict[str, str],
              mode: Callable[[str, tuple, Sequence], str | None]) -> None:
    """Trace ``node``'s VJP rule and add each argument's cotangent into
    ``grads[access]`` (active versions only)."""
    op = lookup(node.op)
    if op.vjp is None:
        raise DifferentiationError(f"{node.source + ': ' if node.source else ''}library op {node.op} has no "
                                   "backward (vjp) rule")
    reads, writes = ordered_edges(graph, node)

    def run(trace: context.Trace) -> None:
        inputs = [_array(trace, graph, a) for a in reads]
        outputs = [_array(trace, graph, a) for a in writes]
        cts = [TracedArray(trace, grads[a], graph.containers[grads[a]].shape, graph.containers[grads[a]].dtype)
               if a in grads else None for a in writes]
        returned = op.vjp(dict(node.params), inputs, outputs, cts)
        if len(returned) != len(reads):
            raise DifferentiationError(f"library op {node.op}: its vjp returned {len(returned)} cotangents for "
                                       f"{len(reads)} arguments")
        for access, ct in zip(reads, returned):
            if ct is not None and access in grads:
                shape = graph.containers[grads[access]].shape
                idx = tuple(index_symbol(f"i{k}") for k in range(len(shape)))
                _add_into(graph, node, ct, grads[access], mode(access, idx, idx), "grad")
    _traced_rule(graph, node, True, run)


def trace_jvp(graph: DataflowGraph, node: LibraryNode, tangents: dict[str, str]) -> None:
    """Trace ``node``'s JVP rule from the tangents of its active arguments
    (``tangents[access]``) into the tangent containers of its results."""
    op = lookup(node.op)
    if op.jvp is None:
        raise DifferentiationError(f"{node.source + ': ' if node.source else ''}library op {node.op} has no "
                                   "forward-mode (jvp) rule")
    reads, writes = ordered_edges(graph, node)

    def run(trace: context.Trace) -> None:
        inputs = [_array(trace, graph, a) for a in reads]
        outputs = [_array(trace, graph, a) for a in writes]
        ts = [TracedArray(trace, tangents[a], graph.containers[tangents[a]].shape,
                          graph.containers[tangents[a]].dtype) if a in tangents else None for a in reads]
        returned = op.jvp(dict(node.params), inputs, outputs, ts)
        if len(returned) != len(writes):
            raise DifferentiationError(f"library op {node.op}: its jvp returned {len(returned)} tangents for "
                                       f"{len(writes)} results")
        for access, t in zip(writes, returned):
            if t is not None and access in tangents:
                _add_into(graph, node, t, tangents[access], None, "jvp")
    _traced_rule(graph, node, False, run)
