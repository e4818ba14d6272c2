"""sum / mean / max / min / prod / any / all: one tasklet over the input's whole domain
writing the kept axes with an accumulation (graph.py: the output index does
not use the reduced symbols); var / std composed of those.

``where=`` is a Piecewise in that same tasklet: an element the mask leaves out
contributes the reduction's identity (0 for sum, 1 for prod, ``initial`` for
max/min, which numpy also requires there), so masked reductions cost nothing
extra and differentiate like any Piecewise."""
from __future__ import annotations

import numpy as np
import sympy

from ..graph import FLOAT_DTYPES
from .dispatch import implements
from .creation import constant, full
from .elementwise import dtype_name
from .masks import accepts_selection
from .emit import (as_arith, as_bool, broadcast_index, broadcast_shapes, domain_symbols, new_array, read, same,
                   shape_str, tasklet_to_new, write)
from .errors import ShapeMismatchError, TraceIndexError, UnsupportedOperationError, warn_user
from .traced_array import TracedArray


def ordered_axes(op: str, axis, ndim: int) -> tuple[int, ...]:
    """``axis`` (an int, or a tuple or list of ints, negatives allowed) as
    non-negative axes in the order given; repeats and out-of-range axes are
    errors naming the user's line."""
    axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
    out = []
    for a in axes:
        if isinstance(a, (bool, np.bool_)) or not isinstance(a, (int, np.integer)):
            raise TraceIndexError(op, f"axis {a!r} must be a Python int (a traced value cannot choose an axis)")
        if not -ndim <= a < ndim:
            raise TraceIndexError(op, f"axis {a} is out of range for an array with {ndim} dimensions")
        out.append(int(a) % ndim)
    if len(set(out)) != len(out):
        raise TraceIndexError(op, f"repeated axis in {axis}")
    return tuple(out)


def normalize_axes(op: str, axis, ndim: int) -> tuple[int, ...]:
    """``axis`` (None, int, tuple or list, negatives allowed) as sorted distinct axes."""
    if axis is None:
        return tuple(range(ndim))
    return tuple(sorted(ordered_axes(op, axis, ndim)))


_IDENTITY = {"sum": sympy.Integer(0), "prod": sympy.Integer(1)}


def _mask(op: str, a: TracedArray, where) -> TracedArray | None:
    """``where=`` as a traced bool array that broadcasts to ``a``'s shape (None: no mask)."""
    if where is None or where is True:
        return None
    mask = where if isinstance(where, TracedArray) else constant(a.trace, np.asarray(where), f"numpy.{op} where=")
    if broadcast_shapes(f"numpy.{op}", mask.sym_shape, a.sym_shape) != a.sym_shape:
        raise ShapeMismatchError(f"numpy.{op}", f"where= of shape {shape_str(mask.sym_shape)} does not broadcast "
                                 f"to the array's shape {shape_str(a.sym_shape)}")
    return mask


def reduce(op: str, a, axis, keepdims: bool, accumulate: str, dtype=None, where=None) -> TracedArray:
    """Reduce ``a`` over ``axis`` with ``accumulate``; ``op="mean"`` divides each
    term by the count (one tasklet, no second pass).  ``where``: a bool mask
    broadcasting to ``a`` (see the module docstring; mean divides by the mask's
    count, max/min need ``initial`` applied by the caller)."""
    if not isinstance(a, TracedArray):
        raise UnsupportedOperationError(f"numpy.{op}", "of a value inside an sd.map body: accumulate with "
                                        "s[0] += v instead")
    axes = normalize_axes(f"numpy.{op}", axis, a.ndim)
    mask = _mask(op, a, where)
    if mask is not None:
        return _masked_reduce(op, a, axes, keepdims, accumulate, dtype, mask)
    if accumulate in ("max", "min") and a.dtype_name == "bool":
        return _truth_count(op, a, axes, keepdims, accumulate)
    if dtype is not None:
        out_dtype = dtype_name(dtype)
    elif op == "mean":
        out_dtype = a.dtype_name if a.dtype_name in FLOAT_DTYPES else a.trace.float_dtype
    elif accumulate in ("sum", "prod") and a.dtype_name == "bool":
        out_dtype = "int32"
    else:
        out_dtype = a.dtype_name
    syms = domain_symbols(a.ndim)
    shape = tuple(1 if k in axes else d for k, d in enumerate(a.sym_shape) if keepdims or k not in axes)
    index = tuple(0 if k in axes else s for k, s in enumerate(syms) if keepdims or k not in axes)
    out = new_array(a.trace, shape, out_dtype, op)
    count = sympy.Mul(*(a.sym_shape[k] for k in axes))
    if op == "mean" and count.is_zero:
        warn_user("numpy.mean", "mean of an empty slice is nan (numpy warns \"Mean of empty slice\" too)")
        out_syms = domain_symbols(len(shape), "o")
        write(op, out, out_syms, tuple((s, 0, d) for s, d in zip(out_syms, shape)), sympy.nan, {})
        return out
    reads = {}
    value = read(a, syms, "x", reads)
    body = as_arith(value, a.dtype_name) if accumulate in ("sum", "prod") else value
    if op == "mean":
        body = body / count
    write(op, out, index, tuple((s, 0, d) for s, d in zip(syms, a.sym_shape)), body, reads, accumulate)
    return out


def _masked_reduce(op: str, a: TracedArray, axes: tuple[int, ...], keepdims: bool, accumulate: str, dtype,
                   mask: TracedArray) -> TracedArray:
    """``reduce`` with a mask: a Piecewise of the element and the identity; a
    mean is the masked sum over the mask's count (nan where it counts none, as numpy)."""
    if a.dtype_name == "bool" and accumulate in ("max", "min"):   # any / all
        return reduce(op, (a & mask) if accumulate == "max" else (a | ~mask), axes, keepdims, accumulate)
    if op == "mean":   # nan where the mask counts none; the division never sees 0, so its gradient is 0 there
        total = _masked_reduce("sum", a, axes, keepdims, "sum", dtype, mask)
        count = reduce("sum", np.broadcast_to(mask, a.shape), axes, keepdims, "sum")
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)
    if accumulate in ("max", "min"):
        # the masked-out elements hold the identity in an array of their own: the reverse pass's tie count
        # compares the reduced values with the result, and must see the identity there, not the element
        low, high = (-np.inf, np.inf) if a.dtype_name.startswith("float") else \
            (int(np.iinfo(np.int32).min), int(np.iinfo(np.int32).max))
        filled = np.where(mask, a, low if accumulate == "max" else high)
        return reduce(op, filled, axes, keepdims, accumulate)
    out_dtype = dtype_name(dtype) if dtype is not None else \
        "int32" if a.dtype_name == "bool" and accumulate in ("sum", "prod") else a.dtype_name
    identity = _IDENTITY[accumulate]
    syms = domain_symbols(a.ndim)
    shape = tuple(1 if k in axes else d for k, d in enumerate(a.sym_shape) if keepdims or k not in axes)
    index = tuple(0 if k in axes else s for k, s in enumerate(syms) if keepdims or k not in axes)
    out = new_array(a.trace, shape, out_dtype, op)
    reads = {}
    value = as_arith(read(a, syms, "x", reads), a.dtype_name)
    keep = as_bool(read(mask, broadcast_index(mask.sym_shape, a.sym_shape, syms), "m", reads), mask.dtype_name)
    body = sympy.Piecewise((value, keep), (identity, True))
    write(op, out, index, tuple((s, 0, d) for s, d in zip(syms, a.sym_shape)), body, reads, accumulate)
    return out


def _extremum(op: str, a, axis, keepdims: bool, accumulate: str, initial, where) -> TracedArray:
    """max / min with numpy's ``initial=`` (a floor / ceiling taken with the
    result) and ``where=`` (which numpy allows only with an ``initial``)."""
    axes = normalize_axes(f"numpy.{op}", axis, a.ndim) if isinstance(a, TracedArray) else ()
    if initial is not None and any(same(a.sym_shape[k], 0) for k in axes):   # numpy: initial, not an error
        shape = tuple(1 if k in axes else d for k, d in enumerate(a.sym_shape) if keepdims or k not in axes)
        return full(a.trace, shape, initial, a.dtype_name)
    if where is not None and where is not True and initial is None:
        raise UnsupportedOperationError(f"numpy.{op}", f"where= needs initial= (numpy raises too: {op} has no "
                                        f"identity); e.g. np.{op}(x, where=mask, initial="
                                        f"{'-np.inf' if accumulate == 'max' else 'np.inf'})")
    out = reduce(op, a, axis, keepdims, accumulate, where=where)
    if initial is None:
        return out
    return (np.maximum if accumulate == "max" else np.minimum)(out, initial)


def _truth_count(op: str, a: TracedArray, axes: tuple[int, ...], keepdims: bool, accumulate: str) -> TracedArray:
    """max / min of booleans (any / all): count the true elements (an int32
    sum; no accumulation exists into a bool container) and compare the count
    with 0 (any) or with the number of elements (all: true for none, as numpy)."""
    count = reduce(op, a, axes, keepdims, "sum")
    total = sympy.Mul(*(a.sym_shape[k] for k in axes))
    test = (lambda n: sympy.Gt(n, 0)) if accumulate == "max" else (lambda n: sympy.Eq(n, total))
    return tasklet_to_new(op, a.trace, count.sym_shape, "bool", lambda syms, v: test(v["n"]), {"n": count})


def variance(op: str, a, axis, dtype, ddof, keepdims: bool, where=None) -> TracedArray:
    """numpy's ``var``: ``sum(|a - mean(a)|**2) / (count - ddof)``, composed of
    traced ops so it differentiates like any other program; with ``where`` the
    count is the mask's."""
    if not isinstance(a, TracedArray):
        raise UnsupportedOperationError(f"numpy.{op}", "of a value inside an sd.map body is not supported")
    axes = normalize_axes(f"numpy.{op}", axis, a.ndim)
    centered = a - reduce("mean", a, axes, True, "sum", dtype, where)
    total = reduce("sum", centered * centered, axes, keepdims, "sum", where=where)
    if _mask(op, a, where) is not None:
        count = reduce("sum", np.broadcast_to(_mask(op, a, where), a.shape), axes, keepdims, "sum")
        return total / (count - ddof)
    dof = sympy.Mul(*(a.sym_shape[k] for k in axes)) - ddof
    if dof.is_nonpositive:  # numpy divides by 0 here: inf, or nan for an empty slice
        warn_user(f"numpy.{op}", "degrees of freedom <= 0 for slice: the result is inf or nan (as in numpy)")
    scale = sympy.oo if dof.is_nonpositive else 1 / dof
    return tasklet_to_new(op, a.trace, total.sym_shape, total.dtype_name,
                          lambda syms, v: v["x"] * scale, {"x": total})


def _check_plain(op: str, kwargs: dict) -> None:
    bad = {k: v for k, v in kwargs.items() if v is not None}
    if bad:
        raise UnsupportedOperationError(f"numpy.{op}", f"arguments {sorted(bad)} are not supported when tracing")


def _with_initial(out: TracedArray, initial, combine) -> TracedArray:
    return out if initial is None else combine(out, initial)


@implements(np.sum)
@accepts_selection
def sum_(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None, **kwargs):
    _check_plain("sum", dict(kwargs, out=out))
    return _with_initial(reduce("sum", a, axis, keepdims, "sum", dtype, where), initial, np.add)


@implements(np.mean)
@accepts_selection
def mean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=None, **kwargs):
    _check_plain("mean", dict(kwargs, out=out))
    return reduce("mean", a, axis, keepdims, "sum", dtype, where)


@implements(np.prod)
@accepts_selection
def prod(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None, **kwargs):
    _check_plain("prod", dict(kwargs, out=out))
    return _with_initial(reduce("prod", a, axis, keepdims, "prod", dtype, where), initial,
                         np.multiply)


@implements(np.max, np.amax)
@accepts_selection
def max_(a, axis=None, out=None, keepdims=False, initial=None, where=None, **kwargs):
    _check_plain("max", dict(kwargs, out=out))
    return _extremum("max", a, axis, keepdims, "max", initial, where)


@implements(np.min, np.amin)
@accepts_selection
def min_(a, axis=None, out=None, keepdims=False, initial=None, where=None, **kwargs):
    _check_plain("min", dict(kwargs, out=out))
    return _extremum("min", a, axis, keepdims, "min", initial, where)


@implements(np.any)
@accepts_selection
def any_(a, axis=None, out=None, keepdims=False, *, where=None, **kwargs):
    _check_plain("any", dict(kwargs, out=out))
    return reduce("any", _as_bool(a), axis, keepdims, "max", where=where)


@implements(np.all)
@accepts_selection
def all_(a, axis=None, out=None, keepdims=False, *, where=None, **kwargs):
    _check_plain("all", dict(kwargs, out=out))
    return reduce("all", _as_bool(a), axis, keepdims, "min", where=where)


def _as_bool(a):
    """``a != 0`` unless ``a`` holds booleans already (NaN counts as true, as in numpy)."""
    return a if isinstance(a, TracedArray) and a.dtype_name == "bool" else a != 0


@implements(np.count_nonzero)
def count_nonzero(a, axis=None, *, keepdims=False):
    """The number of true (non-zero) elements, an int32 sum."""
    return reduce("count_nonzero", _as_bool(a), axis, keepdims, "sum")


@implements(np.var)
@accepts_selection
def var(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None, **kwargs):
    _check_plain("var", dict(kwargs, out=out))
    return variance("var", a, axis, dtype, ddof, keepdims, where)


@implements(np.std)
@accepts_selection
def std(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None, **kwargs):
    _check_plain("std", dict(kwargs, out=out))
    return np.sqrt(variance("std", a, axis, dtype, ddof, keepdims, where))

