"""argmax / argmin as two tasklets: the max (min) reduction, then a min
reduction over the positions whose element equals it.

The second tasklet reads the same container the first reduced, so the
equality compares the very values the maximum came from (no recomputation in
another precision).  A NaN counts as equal (numpy returns the first NaN, and
the maximum is NaN then); of equal elements the smallest index wins, numpy's
first-index rule.  The result is int32: it has no gradient and serves as an
index (``x[np.argmax(s)]``, ``np.take_along_axis``).
"""
from __future__ import annotations

import numpy as np
import sympy

from .dispatch import implements
from .emit import domain_symbols, new_array, read, write
from .errors import TraceIndexError, UnsupportedOperationError
from .numeric import isnan
from .reductions import normalize_axes, reduce
from .traced_array import TracedArray
from ..scalar_functions import compare


def arg_extremum(op: str, a, axis, keepdims: bool, accumulate: str) -> TracedArray:
    """The first position of the max (``accumulate="max"``) or min along ``axis``
    (None: of the flattened array, as numpy)."""
    if not isinstance(a, TracedArray):
        raise UnsupportedOperationError(f"numpy.{op}", "needs a traced array (not a value inside an sd.map body)")
    if a.size == 0:
        raise UnsupportedOperationError(f"numpy.{op}", "attempt to get argmax of an empty sequence (numpy "
                                        "raises here too)")
    if axis is not None and not isinstance(axis, (int, np.integer)) or isinstance(axis, (bool, np.bool_)):
        raise TraceIndexError(f"numpy.{op}", f"axis {axis!r} must be an int or None (numpy takes one axis here)")
    if a.dtype_name == "int32":   # the Slang lowering has no int identity for max/min accumulations yet;
        a = a.astype(a.trace.float_dtype)   # both reductions read this one copy (exact below 2**24 / 2**53)
    shape = a.sym_shape
    flat = axis is None
    if flat:
        a, axis = np.reshape(a, -1), 0
    (axis,) = normalize_axes(f"numpy.{op}", axis, a.ndim)
    best = reduce(op.removeprefix("nan").removeprefix("arg"), a, axis, True, accumulate)
    syms = domain_symbols(a.ndim)
    out_shape = tuple(d for k, d in enumerate(a.sym_shape) if k != axis)
    # the positions' minimum accumulates in a float container: the Slang lowering has no int identity
    # for min accumulations yet (exact below 2**24 positions in float32, 2**53 in float64)
    out = new_array(a.trace, out_shape, a.trace.float_dtype, op)
    reads = {}
    x = read(a, syms, "x", reads)
    m = read(best, tuple(0 if k == axis else s for k, s in enumerate(syms)), "m", reads)
    hit = sympy.Or(compare(sympy.Eq, x, m), isnan(x)) if a.dtype_name.startswith("float") else \
        compare(sympy.Eq, x, m)
    body = sympy.Piecewise((syms[axis], hit), (a.sym_shape[axis], True))
    write(op, out, tuple(s for k, s in enumerate(syms) if k != axis),
          tuple((s, 0, d) for s, d in zip(syms, a.sym_shape)), body, reads, "min")
    out = out.astype("int32")
    if not keepdims:
        return out
    return np.reshape(out, (1,) * len(shape) if flat else tuple(1 if k == axis else d for k, d in enumerate(shape)))


@implements(np.argmax)
def argmax(a, axis=None, out=None, *, keepdims=False):
    if out is not None:
        raise UnsupportedOperationError("numpy.argmax", "out= is not supported when tracing")
    return arg_extremum("argmax", a, axis, keepdims, "max")


def _nan_arg(op: str, a, axis, keepdims: bool, accumulate: str) -> TracedArray:
    """nanargmax / nanargmin: NaNs never win (they become -inf / +inf first).
    numpy raises for an all-NaN slice; here that slice gives the first index."""
    if isinstance(a, TracedArray) and a.dtype_name.startswith("float"):
        a = np.where(np.isnan(a), -np.inf if accumulate == "max" else np.inf, a)
    return arg_extremum(op, a, axis, keepdims, accumulate)


@implements(np.nanargmax)
def nanargmax(a, axis=None, out=None, *, keepdims=False):
    if out is not None:
        raise UnsupportedOperationError("numpy.nanargmax", "out= is not supported when tracing")
    return _nan_arg("nanargmax", a, axis, keepdims, "max")


@implements(np.nanargmin)
def nanargmin(a, axis=None, out=None, *, keepdims=False):
    if out is not None:
        raise UnsupportedOperationError("numpy.nanargmin", "out= is not supported when tracing")
    return _nan_arg("nanargmin", a, axis, keepdims, "min")


@implements(np.argmin)
def argmin(a, axis=None, out=None, *, keepdims=False):
    if out is not None:
        raise UnsupportedOperationError("numpy.argmin", "out= is not supported when tracing")
    return arg_extremum("argmin", a, axis, keepdims, "min")
