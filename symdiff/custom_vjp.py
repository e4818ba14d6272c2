"""``sd.custom_vjp``: a user-supplied backward for a whole traced subgraph.

JAX's shape::

    @sd.custom_vjp
    def softmax(x):                       # the primal, used outside a trace
        e = np.exp(x - np.max(x, axis=-1, keepdims=True))
        return e / np.sum(e, axis=-1, keepdims=True)

    def softmax_fwd(x):                   # -> (output, residuals)
        y = softmax(x)
        return y, y

    def softmax_bwd(y, g):                # (residuals, cotangent) -> one cotangent per argument
        return (y * (g - np.sum(g * y, axis=-1, keepdims=True)),)

    softmax.defvjp(softmax_fwd, softmax_bwd)

Inside a traced program a call traces ``fwd`` into the graph as ordinary
tasklets (they fuse and lower like everything else), each tagged with the
notes (``ir.tasklet_notes``) ``custom_vjp`` (the name) and ``custom_vjp_call``
(the call's id) so views can group them; ``GraphNotes.custom_vjps`` lists the
calls.
``add_backward_pass`` does not differentiate the tagged tasklets: where a
call's outputs are active it traces ``bwd`` into the reverse pass instead,
reading the residuals and the outputs' gradient containers, and adds each
returned cotangent into the gradient of the argument it belongs to (through
the argument's view, so slices and broadcasts get the right elements).

Use it for a whole subgraph whose automatic derivative is wasteful or
numerically poor (a stable softmax's backward should not differentiate
through the max; a relu whose derivative at 0 you want to fix); use
``sd.register_derivative`` for a scalar function's partials.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import sympy

from symdiff.ir import tasklet_notes as notes
from symdiff.ir.graph import DataflowGraph, connector_symbol, index_symbol
from symdiff.ir.graph_notes import GraphNotes
from symdiff.ir.library import library_nodes
from symdiff.ir.tracer import context
from symdiff.ir.tracer.creation import creation_traced, zeros
from symdiff.ir.tracer.errors import TraceError, user_location
from symdiff.ir.tracer.traced_array import TracedArray, placeholders

from .activity import Activity
from .errors import DifferentiationError


class CustomVJPError(TraceError):
    """A custom_vjp whose forward or backward does not fit its call; the
    message names the function, the user's line and what to change."""


@dataclass(frozen=True)
class Ref:
    """A traced array of a call, located through a tagged tasklet's edge
    (``"read"`` or ``"write"`` by ``connector``) so the record survives the
    tracer renaming a returned container; ``index`` is the view's map from
    placeholders to container indices."""

    tasklet: str
    direction: str
    connector: str
    shape: tuple
    dtype: str
    index: tuple

    def access(self, graph: DataflowGraph) -> str:
        edges = graph.reads(self.tasklet) if self.direction == "read" else graph.writes(self.tasklet)
        return next(a for a, m in edges if m.connector == self.connector)


@dataclass(frozen=True)
class CustomCall:
    """One traced call of a custom_vjp function (``GraphNotes.custom_vjps``)."""

    call: str                          # unique id, "<name>#<k>"
    name: str
    tasklets: frozenset
    inputs: tuple                      # per positional argument: Ref, or None (not traced / unused by fwd)
    outputs: tuple                     # Ref per output (whole containers written by the call)
    several_outputs: bool              # fwd returned a tuple of outputs
    residuals: Any                     # the residual structure with Refs in place of traced arrays
    op: "custom_vjp"
    source: str | None


class custom_vjp:  # noqa: N801 (used as a decorator, like jax.custom_vjp)
    """Wrap ``fn`` so that traced programs use a user-supplied backward for it.

    ``f = sd.custom_vjp(f); f.defvjp(fwd, bwd)``: ``fwd(*args)`` returns
    ``(output, residuals)``, ``bwd(residuals, cotangent)`` returns a tuple with
    one cotangent per positional argument (shaped like it, or ``None`` for
    zero).  Outside a traced program the wrapper simply calls ``fn``."""

    def __init__(self, fn: Callable, name: str | None = None):
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.name = name or getattr(fn, "__name__", "custom_vjp")
        self.fwd: Callable | None = None
        self.bwd: Callable | None = None
        self._running = 0   # > 0 while its own fwd/bwd run: a call from there is the primal (as in JAX)

    def defvjp(self, fwd: Callable, bwd: Callable) -> "custom_vjp":
        self.fwd, self.bwd = fwd, bwd
        return self

    def __call__(self, *args, **kwargs):
        trace = context.active()
        if trace is None or self._running or not any(isinstance(a, TracedArray) for a in args):
            return self.fn(*args, **kwargs)
        if kwargs:
            raise CustomVJPError(self.name, "pass the arguments of a custom_vjp function positionally")
        if self.fwd is None:
            raise CustomVJPError(self.name, f"no backward defined: call {self.name}.defvjp(fwd, bwd) before "
                                            "tracing a program that uses it")
        self._running += 1
        try:
            return _trace_call(self, trace, args)
        finally:
            self._running -= 1


def _operations(graph: DataflowGraph) -> list[str]:
    """Tasklets and library nodes (``np.linalg`` in a forward or backward is part of its call)."""
    return [t.name for t in graph.tasklets()] + [n.name for n in library_nodes(graph)]


def _new_tasklets(graph: DataflowGraph, before: set[str]) -> list[str]:
    return [name for name in _operations(graph) if name not in before]


def _trace_call(op: custom_vjp, trace: context.Trace, args: tuple):
    g = trace.graph
    where = user_location(skip=(os.path.dirname(__file__),))
    before = set(_operations(g))
    containers = set(g.containers)
    arg_access = {k: g.access(a.container) for k, a in enumerate(args) if isinstance(a, TracedArray)}
    result = op.fwd(*args)
    if not (isinstance(result, tuple) and len(result) == 2):
        raise CustomVJPError(op.name, f"the forward {getattr(op.fwd, '__name__', 'fwd')} must return (output, "
                                      "residuals), a pair; "
                                      f"it returned {type(result).__name__}", where)
    out, residuals = result
    several = isinstance(out, (tuple, list))
    outs = list(out) if several else [out]
    for k, o in enumerate(outs):
        if not isinstance(o, TracedArray):
            raise CustomVJPError(op.name, f"output {k} of the forward is a {type(o).__name__}; a custom_vjp "
                                          "function returns traced arrays", where)
    region = set(_new_tasklets(g, before))
    # an output must be a whole container the call writes, a residual that or an argument the call
    # reads; anything else (a view, an argument returned as is) is copied inside the call
    outs = [o if _written_by(g, o, region) else o.copy() for o in outs]
    flat, rebuild = _flatten(residuals)
    flat = [r if not isinstance(r, TracedArray) or _written_by(g, r, region)
            or _read_ref(g, r, g.access(r.container), region) else r.copy() for r in flat]
    region = set(_new_tasklets(g, before))
    call = f"{op.name}#{len(GraphNotes(g).custom_vjps)}"
    _check_closed(op, g, region, set(arg_access.values()), containers, where)
    for name in region:
        notes.annotate(g.node(name), custom_vjp=op.name, custom_vjp_call=call)
    inputs = tuple(_read_ref(g, a, arg_access[k], region) if k in arg_access else None
                   for k, a in enumerate(args))
    residual_refs = [(_write_ref(g, r, region) or _read_ref(g, r, g.access(r.container), region))
                     if isinstance(r, TracedArray) else r for r in flat]
    record = CustomCall(call, op.name, frozenset(region), inputs, tuple(_write_ref(g, o, region) for o in outs),
                        several, rebuild(residual_refs), op, where)
    GraphNotes(g).custom_vjps = tuple(GraphNotes(g).custom_vjps) + (record,)   # a new tuple: copies share notes
    return tuple(outs) if several else outs[0]


def _flatten(tree) -> tuple[list, Callable]:
    """Leaves of nested tuples/lists/dicts and a function rebuilding the structure."""
    if isinstance(tree, (tuple, list)):
        parts = [_flatten(x) for x in tree]
        sizes = [len(p[0]) for p in parts]

        def rebuild(leaves, kind=type(tree)):
            out, k = [], 0
            for (_, sub), n in zip(parts, sizes):
                out.append(sub(leaves[k:k + n]))
                k += n
            return kind(out)
        return [x for p in parts for x in p[0]], rebuild
    if isinstance(tree, dict):
        keys = list(tree)
        leaves, sub = _flatten([tree[k] for k in keys])
        return leaves, lambda xs: dict(zip(keys, sub(xs)))
    return [tree], lambda xs: xs[0]


def _written_by(g: DataflowGraph, a: TracedArray, region: set[str]) -> bool:
    access = g.access(a.container)
    return a.is_whole_container() and any(w in region for w, _ in g.writers(access))


def _write_ref(g: DataflowGraph, a: TracedArray, region: set[str]) -> Ref | None:
    access = g.access(a.container)
    for w, m in g.writers(access):
        if w in region:
            return Ref(w, "write", m.connector, a.sym_shape, a.dtype_name, a.index)
    return None


def _read_ref(g: DataflowGraph, a: TracedArray, access: str, region: set[str]) -> Ref | None:
    """The argument ``a`` located through a tagged tasklet that reads it; None
    when the forward never reads it (its cotangent is then zero)."""
    for r, m in g.readers(access):
        if r in region:
            return Ref(r, "read", m.connector, a.sym_shape, a.dtype_name, a.index)
    return None


def _check_closed(op: custom_vjp, g: DataflowGraph, region: set[str], args: set[str], containers: set[str],
                  where: str | None) -> None:
    """The forward reads only its arguments and what it computed itself (a
    traced value captured from the enclosing program would get no gradient)
    and writes only arrays it created (an argument updated in place would
    pass its new value on without a derivative)."""
    made = {a for t in region for a, _ in g.writes(t)}
    for access in made:
        container = g.node(access).container
        if container in containers:
            raise CustomVJPError(op.name, f"the forward writes into {container!r}, an array it did not create; "
                                          "compute new arrays (y = x * 2, not x *= 2)", where)
    for t in region:
        for access, _ in g.reads(t):
            if access not in made and access not in args:
                container = g.node(access).container
                if g.containers[container].role == "argument" or g.writers(access):
                    raise CustomVJPError(op.name, f"the forward reads {container!r}, which is not one of its "
                                                  "arguments (a traced value captured from the enclosing "
                                                  "program); pass it as an argument", where)


def _view(trace: context.Trace, graph: DataflowGraph, ref: Ref) -> TracedArray:
    access = ref.access(graph)
    node = graph.node(access)
    if graph.latest(node.container) != access:
        raise CustomVJPError(ref.tasklet, f"a residual of a custom_vjp call ({node.container!r}) is written "
                                          "again after the call; return a copy from the forward")
    return TracedArray(trace, node.container, ref.shape, ref.dtype, ref.index, writable=False)


def _same_shape(a: Sequence, b: Sequence) -> bool:
    return len(a) == len(b) and all(sympy.simplify(sympy.sympify(x) - sympy.sympify(y)) == 0 for x, y in zip(a, b))


def _shape_str(shape) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def trace_backward(graph: DataflowGraph, record: CustomCall, grads: dict[str, str],
                   mode: Callable[[str, tuple, Sequence], str | None]) -> None:
    """Trace ``record.bwd`` into ``graph`` and add its cotangents into the
    gradient containers ``grads`` (``{access id: container}``) of the call's
    active arguments; ``mode(access, index, domain)`` picks plain or ``"sum"``."""
    before = set(_operations(graph))
    outs = list(record.outputs)
    bwd = record.op.bwd
    dtype = "float64" if any(r.dtype == "float64" for r in outs) else "float32"
    trace = context.Trace(graph, dtype)
    context.push(trace)
    record.op._running += 1   # where bwd calls the function itself, that is its primal
    try:
        with creation_traced(getattr(bwd, "__globals__", {})):
            cts = []
            for r in outs:
                access = r.access(graph)
                if access in grads:
                    cts.append(TracedArray(trace, grads[access], r.shape, graph.containers[grads[access]].dtype))
                else:   # an output nothing downstream depends on: its cotangent is zero
                    cts.append(zeros(trace, tuple(r.shape), r.dtype))
            leaves, rebuild = _flatten(record.residuals)
            residuals = rebuild([_view(trace, graph, x) if isinstance(x, Ref) else x for x in leaves])
            returned = bwd(residuals, tuple(cts) if record.several_outputs else cts[0])
        _add_cotangents(trace, graph, record, returned, grads, mode)
    finally:
        record.op._running -= 1
        context.pop()
    for name in _new_tasklets(graph, before):
        t = graph.node(name)
        t.backward = True
        notes.annotate(t, custom_vjp=record.name, custom_vjp_call=record.call, forward_tasklet=None,
                       forward_values="custom_vjp")


def _add_cotangents(trace: context.Trace, graph: DataflowGraph, record: CustomCall, returned,
                    grads: dict[str, str], mode: Callable) -> None:
    n = len(record.inputs)
    bwd_name = getattr(record.op.bwd, "__name__", "bwd")
    if not isinstance(returned, (tuple, list)) or len(returned) != n:
        got = f"a tuple of {len(returned)}" if isinstance(returned, (tuple, list)) else type(returned).__name__
        raise CustomVJPError(record.name, f"the backward {bwd_name} must return a tuple of {n} cotangent(s), "
                                          f"one per argument of {record.name} (None for zero); it returned {got}",
                             record.source)
    for k, (ref, ct) in enumerate(zip(record.inputs, returned)):
        if ct is None or ref is None:
            continue
        if not isinstance(ct, TracedArray):
            raise CustomVJPError(record.name, f"cotangent {k} returned by {bwd_name} is a {type(ct).__name__}; "
                                              "return an array shaped like the argument, or None for zero",
                                 record.source)
        if not _same_shape(ct.sym_shape, ref.shape):
            raise CustomVJPError(record.name, f"cotangent {k} returned by {bwd_name} has shape "
                                              f"{_shape_str(ct.sym_shape)}, but argument {k} of {record.name} "
                                              f"has shape {_shape_str(ref.shape)}", record.source)
        access = ref.access(graph)
        if access not in grads:
            continue   # the argument is not active
        syms = tuple(index_symbol(f"i{d}") for d in range(len(ref.shape)))
        subs = dict(zip(placeholders(len(ref.shape)), syms))
        index = tuple(sympy.sympify(e).xreplace(subs) for e in ref.index)
        source = graph.access(ct.container)
        domain = tuple((s, 0, d) for s, d in zip(syms, ref.shape))
        graph.add_tasklet(f"grad_{record.call.replace('#', '_')}_{k}", domain,
                          {"d": connector_symbol("g", ct.dtype_name)}, {"g": (source, ct.container_index(syms))},
                          {"d": (graph.access(grads[access], 0), index, mode(access, index, syms))},
                          source=record.source)


def tagged_tasklets(graph: DataflowGraph) -> set[str]:
    """Forward tasklets of every custom_vjp call: the reverse pass skips them."""
    return {t for record in GraphNotes(graph).custom_vjps for t in record.tasklets}


def active_calls(graph: DataflowGraph, activity: Activity) -> list[tuple[CustomCall, list[str]]]:
    """The calls with an active output, each with its active argument versions
    (one entry per argument position: ``f(x, x)`` contributes twice).

    A residual computed inside the forward that is not an output is read by an
    active tasklet outside the call only when a later pass differentiates the
    traced backward (second order): its cotangent would have to flow back
    through the forward's tasklets, which the reverse pass does not
    differentiate, so that is refused, not dropped."""
    active = activity.versions
    reads = [(t, p.read_access) for t, pairs in activity.pairs.items() for p in pairs]
    calls = []
    for record in GraphNotes(graph).custom_vjps:
        outputs = {r.access(graph) for r in record.outputs}
        leaves, _ = _flatten(record.residuals)
        internal = {ref.access(graph) for ref in leaves if isinstance(ref, Ref) and ref.direction == "write"}
        read_outside = {a for t, a in reads if t not in record.tasklets}
        for access in (internal - outputs) & read_outside:
            raise DifferentiationError(
                f"{record.source + ': ' if record.source else ''}{record.name}: differentiating its custom "
                f"backward again needs the derivative of residual {graph.node(access).container!r}, "
                "which the forward computes internally; return only outputs and arguments as residuals "
                "(recompute the rest in the backward) to take higher-order derivatives")
        if any(r.access(graph) in active for r in record.outputs):
            calls.append((record, [r.access(graph) for r in record.inputs
                                   if r is not None and r.access(graph) in active]))
    return calls
