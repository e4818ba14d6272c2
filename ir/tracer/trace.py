"""``trace(fn, *specs)``: run a Python function on traced arrays and return
its dataflow graph (cached per function and argument specs)."""
from __future__ import annotations

import dataclasses
import inspect
import threading
import weakref
from typing import Callable

import networkx as nx
import numpy as np

from ..graph import AccessNode, DataflowGraph
from ..graph_notes import GraphNotes
from ..specs import ArraySpec
from . import context
from .creation import creation_traced
from .elementwise import result_dtype
from .emit import broadcast_index, domain_symbols, read, scalar_expr, write
from .errors import MissingSpecError, TraceError, UnsupportedOperationError, return_location
from .maps import MapValue
from .masks import HINT as MASK_HINT
from .masks import Selection
from .traced_array import TracedArray

_cache: "weakref.WeakKeyDictionary[Callable, dict]" = weakref.WeakKeyDictionary()
_cache_lock = threading.Lock()


def clear_cache() -> None:
    """Forget every traced graph (``sd.clear_caches``): programs keep the
    graphs they hold; a new program object traces again."""
    with _cache_lock:
        _cache.clear()


def _parameters(fn: Callable) -> list[inspect.Parameter]:
    """``fn``'s parameters, with string annotations evaluated where they can be."""
    try:
        signature = inspect.signature(fn, eval_str=True)
    except NameError:
        signature = inspect.signature(fn)
    return list(signature.parameters.values())


def array_parameters(fn: Callable) -> list[str]:
    """The parameters that take arrays when no spec is passed for the trailing
    ones: every parameter but the trailing ones with a default and no spec
    annotation, which keep their defaults (``xp=numpy``, a flag)."""
    params = _parameters(fn)
    while params and params[-1].default is not params[-1].empty and not isinstance(params[-1].annotation, ArraySpec):
        params.pop()
    return [p.name for p in params]


def array_annotations(fn: Callable) -> dict[str, ArraySpec]:
    """The parameters annotated with a spec (``x: sd.f32[16]``), also where the
    annotations are strings (``from __future__ import annotations``)."""
    return {p.name: p.annotation for p in _parameters(fn) if isinstance(p.annotation, ArraySpec)}


def _resolve_specs(fn: Callable, specs: tuple, named_specs: dict) -> tuple[list[str], tuple[ArraySpec, ...]]:
    """One spec per parameter: passed positionally, by name, or from the annotation.
    Trailing parameters with defaults and no spec are not traced: they keep
    their default values (a module, a flag)."""
    params = _parameters(fn)
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.KEYWORD_ONLY):
            raise TraceError(f"trace({fn.__name__})", f"parameter {p.name!r}: *args, **kwargs and keyword-only "
                             "parameters cannot be traced; give each array its own positional parameter")
    names = [p.name for p in params]
    if len(specs) > len(names):
        raise TraceError(f"trace({fn.__name__})", f"{len(specs)} specs for {len(names)} parameters {names}")
    unknown = set(named_specs) - set(names)
    if unknown:
        raise TraceError(f"trace({fn.__name__})", f"specs for unknown parameters {sorted(unknown)}")
    resolved = []
    for k, p in enumerate(params):
        spec = specs[k] if k < len(specs) else named_specs.get(p.name, p.annotation)
        if not isinstance(spec, ArraySpec) and p.default is not p.empty and \
                not any(q.name in named_specs for q in params[k:]):
            return names[:k], tuple(resolved)   # trailing parameters keep their defaults (e.g. xp=numpy)
        if not isinstance(spec, ArraySpec):
            raise MissingSpecError(f"trace({fn.__name__})", f"parameter {p.name!r} has no spec: pass one "
                                   f"(trace(fn, sd.f32[64, 16], ...)) or annotate it ({p.name}: sd.f32[64, 16])")
        resolved.append(spec)
    return names, tuple(resolved)


def trace(fn: Callable, *specs: ArraySpec, strict_broadcasting: bool = False,
          **named_specs: ArraySpec) -> DataflowGraph:
    """The dataflow graph of ``fn`` for arguments of the given specs.

    Parameters without a spec use their ``ArraySpec`` annotation.  The result
    is cached per ``fn`` and specs and shared: copy it before mutating.
    ``strict_broadcasting``: elementwise ops between arrays of different
    ranks are errors unless the broadcast is written (``ir.tracer.strict``).
    """
    names, resolved = _resolve_specs(fn, specs, named_specs)
    key = (resolved, strict_broadcasting)
    with _cache_lock:
        cached = _cache.get(fn, {}).get(key)
    if cached is not None:
        return cached
    graph = _trace(fn, names, resolved, strict_broadcasting)
    with _cache_lock:
        return _cache.setdefault(fn, {}).setdefault(key, graph)


def _trace(fn: Callable, names: list[str], specs: tuple[ArraySpec, ...],
           strict_broadcasting: bool = False, capture: Callable | None = None) -> DataflowGraph:
    """``capture``: see ``context.Trace.capture`` (a loop body's closures); it
    is called with the new trace as its first argument."""
    float_dtype = "float64" if any(s.dtype == "float64" for s in specs) else "float32"
    graph = DataflowGraph(fn.__name__)
    tr = context.Trace(graph, float_dtype, strict_broadcasting)
    if capture is not None:
        tr.capture = lambda outer: capture(tr, outer)
    args = []
    for name, spec in zip(names, specs):
        graph.add_container(name, spec.shape, spec.dtype, role="argument")
        graph.access(name)
        args.append(TracedArray(tr, name, graph.containers[name].shape, spec.dtype))
    context.push(tr)
    try:
        with creation_traced(fn.__globals__):
            try:
                value = fn(*args)
            except Exception as e:
                if tr.hidden_error is not None and not isinstance(e, TraceError):
                    raise tr.hidden_error from e
                raise
        results = _results(tr, value, return_location(fn))
    finally:
        context.pop()
    notes = GraphNotes(graph)
    notes.arg_names, notes.result_names = list(names), results
    return graph


def _results(tr: context.Trace, value, where: str | None) -> list[str]:
    """Result containers ``out`` (one value) or ``out0, out1, ...`` (a tuple).
    ``where``: the user's return line, for errors about the returned value."""
    values = list(value) if isinstance(value, (tuple, list)) else [value]
    bases = ["out"] if not isinstance(value, (tuple, list)) else [f"out{k}" for k in range(len(values))]
    names = []
    for base, v in zip(bases, values):
        name = tr.graph.unique_name(base)
        _result(tr, name, v, where)
        tr.graph.access(name)
        names.append(name)
    return names


def _result(tr: context.Trace, name: str, v, where: str | None) -> None:
    g = tr.graph
    if isinstance(v, MapValue):
        raise TraceError("return", "a value from inside an sd.map body cannot be returned; store it into an "
                         "array in the loop", where)
    if isinstance(v, TracedArray):
        if v.is_whole_container() and g.containers[v.container].role == "transient":
            _rename(g, v.container, name)
            return
        g.add_container(name, v.sym_shape, v.dtype_name, role="result")
        out = TracedArray(tr, name, v.sym_shape, v.dtype_name)
        syms = domain_symbols(v.ndim)
        reads = {}
        body = read(v, broadcast_index(v.sym_shape, v.sym_shape, syms), "x", reads)
        write("result", out, syms, tuple((s, 0, d) for s, d in zip(syms, v.sym_shape)), body, reads)
        return
    if isinstance(v, (bool, int, float, np.generic)):
        dtype = result_dtype(tr, [v], "same")
        g.add_container(name, (), dtype, role="result")
        write("result", TracedArray(tr, name, (), dtype), (), (), scalar_expr(v), {})
        return
    if v is None:
        detail = "the program returned None (is a `return` statement missing?)"
    elif isinstance(v, dict):
        detail = "a dict cannot be returned; return a tuple of arrays (or several values: `return a, b`)"
    elif isinstance(v, Selection):
        raise UnsupportedOperationError("return", f"returning x[mask]: {MASK_HINT}", where)
    else:
        detail = (f"a {type(v).__name__} cannot be returned (numpy arrays made before tracing are not traced)")
    raise UnsupportedOperationError("return", f"{detail}; a traced program returns traced arrays, numbers, "
                                    "or a tuple of them", where)


def _rename(g: DataflowGraph, old: str, new: str) -> None:
    """Turn transient container ``old`` into result container ``new`` (no copy)."""
    c = g.containers.pop(old)
    g.containers[new] = dataclasses.replace(c, name=new, role="result")
    mapping = {n: f"{new}#{g.node(n).version}" for n in list(g.nx.nodes)
               if isinstance(g.node(n), AccessNode) and g.node(n).container == old}
    nx.relabel_nodes(g.nx, mapping, copy=False)
    for node_id in mapping.values():
        g.nx.nodes[node_id]["node"] = AccessNode(new, int(node_id.rsplit("#", 1)[1]))
    for _, _, data in g.nx.edges(data=True):
        if data["memlet"].container == old:
            data["memlet"] = dataclasses.replace(data["memlet"], container=new)
