"""Building blocks every op uses: fresh containers, reads with numpy
broadcasting, and SSA-correct writes (new versions, guarded copies,
accumulations) following the rules in ``ir/graph.py``."""
from __future__ import annotations

from typing import Mapping

import numpy as np
import sympy

from ..graph import Range, connector_symbol, empty_domain, index_symbol
from ..index_analysis import Unanalysable, written_elements
from ..scalar_functions import ieee_float
from ..validate import static_bounds_violation
from .context import Trace
from .errors import (ShapeMismatchError, TraceIndexError, UnsupportedOperationError, in_user_names,
                     user_location, user_names)
from .traced_array import TracedArray, placeholders

Reads = dict[str, tuple[str, tuple]]   # connector -> (access node id, container index)
OUT = "y"                              # output connector of every tasklet the tracer emits


def domain_symbols(n: int, prefix: str = "i") -> tuple[sympy.Symbol, ...]:
    return tuple(index_symbol(f"{prefix}{k}") for k in range(n))


def same(a, b) -> bool:
    """Structural equality of two dims or indices (sizes are symbolic at worst)."""
    a, b = sympy.sympify(a), sympy.sympify(b)
    return a == b or sympy.expand(a - b) == 0


def shape_str(shape) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def scalar_expr(value) -> sympy.Expr:
    """A Python or numpy scalar as a sympy constant (ints stay exact)."""
    value = value.item() if isinstance(value, (np.generic, np.ndarray)) else value
    if isinstance(value, (bool, np.bool_)):
        return sympy.true if value else sympy.false
    if isinstance(value, int):
        return sympy.Integer(value)
    if isinstance(value, float):
        if not np.isfinite(value) or (value == 0 and np.signbit(value)):
            return ieee_float(value)   # sympy would fold x + nan to nan, and has no inf or -0.0 literal
        return sympy.Float(value)
    if isinstance(value, complex):
        raise UnsupportedOperationError("constant", f"complex number {value!r}: complex numbers are not supported "
                                        "by symdiff; carry the real and imaginary parts as two float arrays")
    raise UnsupportedOperationError("constant", f"cannot use {type(value).__name__} {value!r} in a traced program")


def new_array(trace: Trace, shape, dtype: str, name: str) -> TracedArray:
    """A fresh transient container (reads as zeros until written)."""
    c = trace.graph.add_container(trace.graph.unique_name(name), shape, dtype)
    return TracedArray(trace, c.name, c.shape, dtype)


def broadcast_shapes(op: str, *shapes) -> tuple[sympy.Expr, ...]:
    """numpy's broadcast of ``shapes``; a ShapeMismatchError showing them otherwise."""
    n = max((len(s) for s in shapes), default=0)
    out = []
    for k in range(n):
        dims = [s[len(s) - n + k] for s in shapes if len(s) - n + k >= 0]
        big = [d for d in dims if not same(d, 1)]
        for d in big[1:]:
            if not same(d, big[0]):
                raise ShapeMismatchError(op, "shapes " + " and ".join(shape_str(s) for s in shapes)
                                         + " do not broadcast")
        out.append(sympy.sympify(big[0] if big else 1))
    return tuple(out)


def broadcast_index(shape, out_shape, syms) -> tuple:
    """Index into an operand of ``shape`` for output element ``syms`` of ``out_shape``:
    leading output dims are skipped, size-1 dims read index 0."""
    lead = len(out_shape) - len(shape)
    return tuple(0 if same(d, 1) and not same(out_shape[lead + k], 1) else syms[lead + k]
                 for k, d in enumerate(shape))


def read(arr: TracedArray, view_index, conn: str, reads: Reads) -> sympy.Symbol:
    """Record a read of ``arr[view_index]`` (latest version) on connector ``conn``;
    returns the connector's symbol for use in a body."""
    access = arr.trace.graph.access(arr.container)
    reads[conn] = (access, arr.container_index(view_index))
    return connector_symbol(conn, arr.dtype_name)


def as_arith(expr: sympy.Basic, dtype: str) -> sympy.Expr:
    """A bool value in arithmetic counts as 0/1, explicitly (sympy relationals
    cannot be multiplied)."""
    return sympy.Piecewise((1, expr), (0, True)) if dtype == "bool" else expr


def as_bool(expr: sympy.Basic, dtype: str) -> sympy.Basic:
    return expr if dtype == "bool" else sympy.Ne(expr, 0)


def _known_zero(trace: Trace, access: str) -> bool:
    """An unwritten version that is not caller data reads as zeros (graph.py)."""
    g = trace.graph
    node = g.node(access)
    return not g.writers(access) and not (node.version == 0 and g.containers[node.container].role == "argument")


def _reshaped(view: TracedArray) -> bool:
    """A view made by reshape/ravel: a container index that mixes the view's
    dimensions (a split) or divides them (floor/Mod of the flat index, a merge)."""
    dims = set(placeholders(view.ndim))
    return any(len(sympy.sympify(e).free_symbols & dims) > 1 or sympy.sympify(e).has(sympy.floor, sympy.Mod)
               for e in view.index)


def _coverage(op: str, target: TracedArray, index: tuple, domain: tuple[Range, ...], shape, tsyms):
    """Which elements of a container of ``shape`` the write ``index`` over ``domain``
    touches: ``(condition over tsyms, covers_everything)``, by
    ``ir.index_analysis.written_elements``; what it cannot invert is refused."""
    try:
        return written_elements(index, domain, shape, tsyms)
    except Unanalysable as err:
        if _reshaped(target):
            name = user_names().get(target.container, target.container)
            raise UnsupportedOperationError(op, f"writing through a reshaped view of {name} is not supported; "
                                                f"reshape a copy ({name}.reshape(...).copy()) or write into "
                                                f"{name} with its own shape") from None
        e = err.component
        detail = {"data-dependent": f"a plain write at a data-dependent index {e} into an array that already "
                                    "has content; accumulate (+=) instead",
                  "several symbols": f"write index {e} mixes several loop indices",
                  "not affine": f"write index {e} is not affine in {err.symbol}"}[err.reason]
        raise UnsupportedOperationError(op, detail) from None


def add_tasklet(trace: Trace, name: str, domain, body, reads: Reads, writes, condition=sympy.true):
    for expr in body.values():
        if sympy.sympify(expr).has(sympy.zoo):
            raise UnsupportedOperationError(name, f"sympy simplifies this value to complex infinity ({expr}): a "
                                                  "function of a value that is 0 by construction (such as "
                                                  "np.log(v - v)); numpy would give inf or NaN here, write that "
                                                  "constant (np.inf, np.nan) instead")
    t = trace.graph.add_tasklet(name, domain, body, reads, writes, condition=condition, source=user_location())
    problem = static_bounds_violation(trace.graph, t)  # ranges are static: refuse now, at the user's line
    if problem:
        op = "sd.map" if name.startswith("map_") else name
        raise TraceIndexError(op, f"{in_user_names(problem, user_names())}; every index must stay inside its "
                                  "array over the whole range (shrink the sd.map range or the slice)")
    return t


def _copy(trace: Trace, src: str, dst: str, accumulate: str | None, condition=sympy.true) -> None:
    c = trace.graph.containers[trace.graph.node(src).container]
    t = domain_symbols(c.ndim, "t")
    reads: Reads = {}
    reads["x"] = (src, t)
    add_tasklet(trace, f"copy_{c.name}", tuple((s, 0, d) for s, d in zip(t, c.shape)),
                {OUT: connector_symbol("x", c.dtype)}, reads, {OUT: (dst, t, accumulate)}, condition)


def write(op: str, target: TracedArray, view_index, domain: tuple[Range, ...], expr, reads: Reads,
          accumulate: str | None = None, disjoint: bool = False) -> None:
    """Emit ``target[view_index] = expr`` (or ``+=`` with ``accumulate="sum"``)
    for every point of ``domain``, as a new version of the target's container
    unless the current version can take the writes as is (graph.py's rules).
    ``disjoint``: the caller built this container and guarantees no other
    writer touches these elements (concatenate, constants), so the current
    version takes them as is."""
    trace = target.trace
    g = trace.graph
    if target.writable is not True:
        made_by = target.writable if isinstance(target.writable, str) else "np.broadcast_to"
        raise UnsupportedOperationError(op, f"cannot write into a read-only view ({made_by}); write into a copy "
                                            "of it (.copy()) instead")
    _materialize_copies(trace, target.container)
    if empty_domain(domain):
        _write_empty(op, target, view_index, domain, accumulate)
        return
    name = target.container
    container = g.containers[name]
    index = target.container_index(view_index)
    cur = g.latest(name)
    read_by_self = any(node == cur for node, _ in reads.values())
    untouched = _known_zero(trace, cur) and not g.readers(cur) and not read_by_self
    if accumulate:
        same_acc = (not g.readers(cur) and not read_by_self and g.writers(cur)
                    and all(m.accumulate == accumulate for _, m in g.writers(cur)))
        if untouched or same_acc:
            dst = cur
        else:
            dst = g.new_version(name)
            if not _known_zero(trace, cur):
                _copy(trace, cur, dst, accumulate)
    else:
        domain = _plain_domain(op, index, domain, expr, reads)
        if untouched or disjoint:
            dst = cur
        else:
            tsyms = domain_symbols(container.ndim, "t")
            cond, full = _coverage(op, target, index, domain, container.shape, tsyms)
            dst = g.new_version(name)
            if not full and not _known_zero(trace, cur):
                _copy(trace, cur, dst, None, sympy.Not(cond))
    add_tasklet(trace, op, domain, {OUT: expr}, reads, {OUT: (dst, index, accumulate)})


def _materialize_copies(trace: Trace, name: str) -> None:
    """Before ``name`` changes: each live read-only view of it that stands for
    a numpy copy (``np.roll``, ``np.tile``...: an index map, no tasklet, as
    long as nothing writes the container) becomes a copy of its current
    values, so it keeps them, as numpy's copy does."""
    for ref in trace.copies.pop(name, ()):
        view = ref()
        if view is None:
            continue
        out = new_array(trace, view.sym_shape, view.dtype_name, "copy")
        syms = domain_symbols(len(view.sym_shape))
        reads: dict = {}
        write("copy", out, syms, tuple((s, 0, d) for s, d in zip(syms, view.sym_shape)),
              read(view, syms, "x", reads), reads)
        view.container, view.index = out.container, out.index


def _write_empty(op: str, target: TracedArray, view_index, domain: tuple[Range, ...],
                 accumulate: str | None) -> None:
    """A write over an empty domain (``x[:0]``, a ``(3, 0) @ (0, 2)`` product)
    emits no tasklet, so no later stage (reverse pass, planner, Slang) ever
    sees a 0-extent domain.  Only a fresh ``prod``/``max``/``min``
    accumulation changes anything: the elements it covers get numpy's value
    for an empty reduction (the product 1) or its error (no maximum of
    nothing).  A fresh ``sum`` already reads as 0."""
    trace = target.trace
    index = target.container_index(view_index)
    empty = {r[0] for r in domain if empty_domain((r,))}
    used = set().union(*(sympy.sympify(e).free_symbols for e in index))
    fresh = _known_zero(trace, trace.graph.latest(target.container))
    if accumulate in (None, "sum") or empty & used or not fresh:
        return  # nothing covered, nothing accumulated, or a 0 that is already there
    if accumulate in ("max", "min"):
        raise UnsupportedOperationError(op, f"zero-size array to reduction operation {op} which has no "
                                        "identity (numpy raises here too)")
    kept = tuple(r for r in domain if r[0] in used)
    write(op, target, view_index, kept, sympy.Integer(1), {})


def _plain_domain(op: str, index, domain, expr, reads: Reads) -> tuple[Range, ...]:
    """The domain of a plain write: loop indices the statement does not use are
    dropped; one the value uses but the target index does not would write one
    element several times, which only an accumulation may do."""
    in_index = set().union(*(sympy.sympify(e).free_symbols for e in index))
    in_value = sympy.sympify(expr).free_symbols.union(
        *(sympy.sympify(e).free_symbols for _, idx in reads.values() for e in idx))
    kept = []
    for s, b, e in domain:
        if s in in_index:
            kept.append((s, b, e))
        elif s in in_value:
            if not same(e - b, 1):
                raise UnsupportedOperationError(op, f"the value depends on loop index {s} but the written "
                                                "element does not, so one element would be written several "
                                                "times; use += to accumulate")
            kept.append((s, b, e))
    return tuple(kept)


def tasklet_to_new(op: str, trace: Trace, shape, dtype: str, body_fn, operands: Mapping[str, TracedArray],
                   name: str | None = None) -> TracedArray:
    """The common elementwise shape: a fresh array of ``shape`` whose element
    ``syms`` is ``body_fn(syms, {conn: symbol})``, each operand read with
    broadcasting."""
    out = new_array(trace, shape, dtype, name or op)
    syms = domain_symbols(len(out.sym_shape))
    reads: Reads = {}
    symbols = {conn: read(arr, broadcast_index(arr.sym_shape, out.sym_shape, syms), conn, reads)
               for conn, arr in operands.items()}
    domain = tuple((s, 0, d) for s, d in zip(syms, out.sym_shape))
    write(op, out, syms, domain, body_fn(syms, symbols), reads)
    return out
