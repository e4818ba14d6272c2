"""``sd.map``: explicit parallel loops traced once with symbolic indices.

``for i, j in map[1:n-1, 0:m]:`` yields index objects once.  Inside the body,
indexing a traced array with them gives a scalar ``MapValue`` (a sympy
expression over the reads it needs); assigning one to ``out[i, j]`` emits a
tasklet over the loop's domain.  ``out[i] += v`` and ``s[0] += v`` become
``"sum"`` accumulations.

Each statement of the body becomes its own tasklet, and the statements run in
order as whole parallel loops: a read after a write in the same body (even
``out[i - 1]`` after writing ``out[i]``) reads the new version, i.e. the values
all iterations wrote.  Iterations of one statement never see each other.
"""
from __future__ import annotations

import sympy

from ..graph import Range, index_symbol
from ..index_analysis import injective_over
from . import context
from .context import Trace
from .emit import Reads, as_arith, read, scalar_expr, write
from .errors import ScalarConversionError, TraceError, UnsupportedOperationError, user_expr, user_names
from .traced_array import Operators, TracedArray


class MapValue(Operators):
    """One element's value inside an ``sd.map`` body: a sympy expression over
    connector symbols, the reads (connector -> access, index) those stand for,
    and, for a direct read ``a[i]``, where it was read from (to recognise
    ``a[i] += v``)."""

    def __init__(self, trace: Trace, expr, dtype: str, reads: Reads, origin: tuple | None = None):
        self.trace = trace
        self.expr = sympy.sympify(expr)
        self.dtype_name = dtype
        self.reads = dict(reads)
        self.origin = origin

    ndim = 0
    shape = ()

    def __array_function__(self, func, types, args, kwargs):
        from .dispatch import handler
        return handler(func)(*args, **kwargs)

    def _accumulate(self, other, sign: int):
        if self.origin is None:
            return self + other if sign > 0 else self - other
        inc = as_map_operand(self.trace, other)
        return Accumulation(self.trace, self + other if sign > 0 else self - other, self.origin,
                            MapValue(self.trace, sign * as_arith(inc.expr, inc.dtype_name), inc.dtype_name,
                                     inc.reads))

    def __iadd__(self, other): return self._accumulate(other, 1)
    def __isub__(self, other): return self._accumulate(other, -1)

    def __repr__(self) -> str:
        return f"MapValue({self.expr}, {self.dtype_name})"


class Accumulation(MapValue):
    """The value of ``a[i] + v`` that remembers it came from ``a[i] += v``, so that
    the assignment back to ``a[i]`` accumulates ``v`` instead of rewriting."""

    def __init__(self, trace: Trace, value: MapValue, origin: tuple, increment: MapValue):
        super().__init__(trace, value.expr, value.dtype_name, value.reads)
        self.target = origin
        self.increment = increment


class MapIndex(MapValue):
    """A symbolic loop index; integer arithmetic on it stays an index."""

    def __init__(self, trace: Trace, expr):
        super().__init__(trace, expr, "int32", {})

    def _int_op(self, other, fn):
        if isinstance(other, MapIndex):
            return MapIndex(self.trace, fn(self.expr, other.expr))
        if isinstance(other, int) and not isinstance(other, bool):
            return MapIndex(self.trace, fn(self.expr, sympy.Integer(other)))
        return NotImplemented

    def __add__(self, o): return _or(self._int_op(o, lambda a, b: a + b), lambda: super(MapIndex, self).__add__(o))
    def __radd__(self, o): return _or(self._int_op(o, lambda a, b: b + a), lambda: super(MapIndex, self).__radd__(o))
    def __sub__(self, o): return _or(self._int_op(o, lambda a, b: a - b), lambda: super(MapIndex, self).__sub__(o))
    def __rsub__(self, o): return _or(self._int_op(o, lambda a, b: b - a), lambda: super(MapIndex, self).__rsub__(o))
    def __mul__(self, o): return _or(self._int_op(o, lambda a, b: a * b), lambda: super(MapIndex, self).__mul__(o))
    def __rmul__(self, o): return _or(self._int_op(o, lambda a, b: b * a), lambda: super(MapIndex, self).__rmul__(o))
    def __floordiv__(self, o): return _or(self._int_op(o, lambda a, b: sympy.floor(a / b)),
                                          lambda: super(MapIndex, self).__floordiv__(o))
    def __mod__(self, o): return _or(self._int_op(o, sympy.Mod), lambda: super(MapIndex, self).__mod__(o))
    def __neg__(self): return MapIndex(self.trace, -self.expr)

    def __index__(self):
        raise ScalarConversionError("sd.map index", "a loop index is symbolic: it cannot be used where Python "
                                    "needs an int (range(), a list, or a numpy array the tracer cannot see)")

    def __repr__(self) -> str:
        return f"MapIndex({self.expr})"


def _or(result, fallback):
    return fallback() if result is NotImplemented else result


def as_map_operand(trace: Trace, value) -> MapValue:
    """Any operand of a map body statement as a MapValue: 0-d traced arrays are
    read, Python scalars become constants."""
    if isinstance(value, MapValue):
        return value
    if isinstance(value, TracedArray):
        if value.ndim:
            raise UnsupportedOperationError("sd.map", f"an array of shape {value.shape} is used inside an "
                                            "sd.map body; index it down to one element (a[i, j])")
        reads: Reads = {}
        sym = read(value, (), trace.fresh(f"{value.container}_"), reads)
        return MapValue(trace, sym, value.dtype_name, reads)
    expr = scalar_expr(value)
    dtype = ("bool" if isinstance(expr, sympy.logic.boolalg.BooleanAtom)
             else "int32" if expr.is_Integer else trace.float_dtype)
    return MapValue(trace, expr, dtype, {})


def _index_exprs(index: tuple) -> tuple[list[sympy.Expr], Reads]:
    """Index expressions of a map access, and the reads a gather index brings along."""
    reads: Reads = {}
    exprs = []
    for item in index:
        if isinstance(item, MapValue):
            reads.update(item.reads)
            exprs.append(item.expr)
        else:
            exprs.append(sympy.sympify(item))
    return exprs, reads


def map_read(arr: TracedArray, index: tuple) -> MapValue:
    """``arr[index]`` inside a map body: ``index`` holds one int, index
    expression or integer MapValue (gather) per dimension."""
    exprs, reads = _index_exprs(index)
    conn = arr.trace.fresh(f"{arr.container}_")
    sym = read(arr, exprs, conn, reads)
    return MapValue(arr.trace, sym, arr.dtype_name, reads, (arr.container, reads[conn][1]))


def map_write(target: TracedArray, index: tuple, value) -> None:
    """``target[index] = value`` (or the ``+=`` recorded in an Accumulation) over
    the domain of the enclosing ``sd.map`` loops."""
    trace = target.trace
    exprs, reads = _index_exprs(index)
    container_index = target.container_index(exprs)
    accumulate = None
    if isinstance(value, Accumulation) and value.target[0] == target.container and \
            all(sympy.expand(a - b) == 0 for a, b in zip(value.target[1], container_index)):
        value, accumulate = value.increment, "sum"
    value = as_map_operand(trace, value)
    expr = as_arith(value.expr, value.dtype_name) if target.dtype_name != "bool" else value.expr
    reads.update(value.reads)
    used = sympy.sympify(expr).free_symbols.union(*(sympy.sympify(e).free_symbols for e in exprs),
                                                  *(sympy.sympify(e).free_symbols
                                                    for _, idx in reads.values() for e in idx))
    loop_symbols = {s for s in used if s.name.startswith("_m")}   # MapLoop names its symbols _m<n>
    if not loop_symbols <= trace.map_symbols():
        raise TraceError("sd.map", "a value or index from an sd.map loop is used after that loop ended")
    if accumulate is None:
        _check_plain_write(target, exprs, tuple(r for r in trace.map_ranges if r[0] in used))
    write("map_accumulate" if accumulate else "map_write", target, exprs, tuple(trace.map_ranges), expr,
          reads, accumulate)


def _check_plain_write(target: TracedArray, exprs: list, ranges: tuple) -> None:
    """A plain write in a map body must provably hit a different element at
    every iteration of the loops its index or value uses (``ranges``:
    iterations that differ only in other loops write the same value to the
    same element), see ``ir.index_analysis.injective_over``.  Otherwise one of
    several writers would win, which no device defines, and the reverse pass
    would credit every writer.  ``exprs`` index the view written through, not
    its container: a writable view maps distinct elements to distinct
    elements (broadcast views are read-only), and a reshaped view's
    ``floor``/``Mod`` container index is not affine."""
    if injective_over(exprs, ranges):
        return
    names = user_names()
    loops = ", ".join(f"{user_expr(s, names)} in [{b}, {e})" for s, b, e in ranges)
    index = ", ".join(user_expr(e, names) for e in exprs)
    raise UnsupportedOperationError(
        "sd.map", f"plain write {names.get(target.container, target.container)}[{index}] over {loops}: several "
        "iterations may write the "
        "same element (only one would win). Use += to add the contributions up, or index with a loop "
        "variable per iteration (out[i], out[2 * i], out[n - 1 - i])")


class MapLoop:
    """``map[lo:hi, ...]``: iterate it once to get the symbolic indices."""

    def __init__(self, bounds: tuple):
        self.bounds = bounds

    def __iter__(self):
        trace = context.current("sd.map")
        ranges: list[Range] = []
        for b in self.bounds:
            if isinstance(b, slice):
                if b.step not in (None, 1):
                    raise UnsupportedOperationError("sd.map", f"step {b.step}: map ranges have step 1")
                lo, hi = (0 if b.start is None else b.start), b.stop
            else:
                lo, hi = 0, b
            if hi is None:
                raise UnsupportedOperationError("sd.map", "every range needs an end: sd.map[lo:hi]")
            lo, hi = _bound(lo), _bound(hi)
            ranges.append((index_symbol(trace.fresh("_m")), lo, hi))
        start = len(trace.map_ranges)
        trace.map_ranges.extend(ranges)
        try:
            indices = tuple(MapIndex(trace, s) for s, _, _ in ranges)
            yield indices[0] if len(indices) == 1 else indices
        finally:
            del trace.map_ranges[start:]


def _bound(value) -> sympy.Expr:
    if isinstance(value, MapValue):
        raise UnsupportedOperationError("sd.map", "range bounds must not depend on another loop's index")
    expr = sympy.sympify(value)
    if expr.is_Integer and expr < 0:
        raise UnsupportedOperationError("sd.map", f"bound {value} is negative: map ranges do not wrap around")
    return expr


class _MapFactory:
    """The ``sd.map`` object: ``sd.map[1:n-1]`` or ``sd.map[0:n, 0:m]``."""

    def __getitem__(self, key) -> MapLoop:
        return MapLoop(key if isinstance(key, tuple) else (key,))

    def __repr__(self) -> str:
        return "sd.map"


map = _MapFactory()  # noqa: A001 (the public name is sd.map)
