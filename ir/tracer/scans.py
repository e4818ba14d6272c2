"""Scans and differences: cumsum, cumprod, nancumsum, nancumprod,
cumulative_sum, cumulative_prod, diff, ediff1d, trapezoid.

The scans are library ops (``ir.library.scan``): one node doing O(n) work
along one axis, with derivative rules that are scans again (the reverse of a
cumsum is a reversed cumsum; cumprod's needs no division, so its gradient at
zeros is JAX's).  The differences and the trapezoid rule are index maps:
shifted slices subtracted, no scan.

Integer and bool scans give int32 (numpy gives int64; the IR has int32 only).
"""
from __future__ import annotations

import numpy as np

from ..library import scan
from .dispatch import implements
from .elementwise import constant_operand, dtype_name
from .errors import ShapeMismatchError, TraceIndexError, UnsupportedOperationError
from .indexing import broadcast_to, concatenate, reshape
from .reductions import ordered_axes
from .traced_array import TracedArray


def _traced(op: str, a) -> TracedArray:
    if not isinstance(a, TracedArray):
        raise UnsupportedOperationError(op, "needs a traced array (not a value inside an sd.map body)")
    return a


def _no_out(op: str, out) -> None:
    if out is not None:
        raise UnsupportedOperationError(op, "out= is not supported; use the returned array")


def _scan_operand(op: str, a, axis, dtype) -> tuple[TracedArray, int]:
    """``a`` cast as numpy accumulates it (``dtype``, else bool as int) and
    the axis to scan: ``axis=None`` (and a 0-d array) scans the flattened array."""
    a = _traced(op, a)
    if dtype is not None:
        a = a.astype(dtype_name(dtype))
    elif a.dtype_name == "bool":
        a = a.astype("int32")
    if axis is None or a.ndim == 0:
        if a.ndim == 0 and axis is not None:
            ordered_axes(op, axis, 1)  # numpy takes a 0-d array as 1-d: axis 0 or -1
        return reshape(a, -1), 0
    return a, ordered_axes(op, axis, a.ndim)[0]


@implements(np.cumsum)
def cumsum(a, axis=None, dtype=None, out=None):
    _no_out("numpy.cumsum", out)
    x, ax = _scan_operand("numpy.cumsum", a, axis, dtype)
    return scan.cumulative_sum(x, ax)


@implements(np.cumprod)
def cumprod(a, axis=None, dtype=None, out=None):
    _no_out("numpy.cumprod", out)
    x, ax = _scan_operand("numpy.cumprod", a, axis, dtype)
    return scan.cumulative_product(x, ax)


def _nan_as(a, value):
    """``a`` with NaNs replaced by ``value``: they contribute the identity, and get a zero gradient."""
    a = _traced("numpy.nancumsum", a)
    return np.where(np.isnan(a), value, a) if a.dtype_name.startswith("float") else a


@implements(np.nancumsum)
def nancumsum(a, axis=None, dtype=None, out=None):
    return cumsum(_nan_as(a, 0.0), axis, dtype, out)


@implements(np.nancumprod)
def nancumprod(a, axis=None, dtype=None, out=None):
    return cumprod(_nan_as(a, 1.0), axis, dtype, out)


def _cumulative(op: str, scanner, x, axis, dtype, out, include_initial: bool, identity: int):
    """numpy 2's ``cumulative_sum``/``cumulative_prod``: ``axis`` may be None
    only for 1-d input; ``include_initial`` starts the result with the identity."""
    _no_out(op, out)
    x = _traced(op, x)
    if x.ndim == 0:
        raise TraceIndexError(op, "needs an array with at least one dimension")
    if axis is None and x.ndim > 1:
        raise TraceIndexError(op, f"axis must be given for an array with {x.ndim} dimensions")
    y, ax = _scan_operand(op, x, axis, dtype)
    y = scanner(y, ax)
    return concatenate([_slice_of(y, ax, identity), y], ax) if include_initial else y


def _slice_of(like: TracedArray, axis: int, value) -> TracedArray:
    """One slice of ``like`` along ``axis`` holding ``value`` (a scalar,
    traced or not) in ``like``'s dtype: a broadcast view of one element."""
    if not isinstance(value, TracedArray):
        value = constant_operand(like.trace, np.full((1,) * like.ndim, value, dtype=np.result_type(value)))
    if value.dtype_name != like.dtype_name and not value.dtype_name.startswith("float"):
        value = value.astype(like.dtype_name)
    shape = list(like.sym_shape)
    shape[axis] = 1
    return broadcast_to(reshape(value, (1,) * like.ndim), tuple(shape))


@implements(np.cumulative_sum)
def cumulative_sum(x, /, *, axis=None, dtype=None, out=None, include_initial=False):
    return _cumulative("numpy.cumulative_sum", scan.cumulative_sum, x, axis, dtype, out, include_initial, 0)


@implements(np.cumulative_prod)
def cumulative_prod(x, /, *, axis=None, dtype=None, out=None, include_initial=False):
    return _cumulative("numpy.cumulative_prod", scan.cumulative_product, x, axis, dtype, out, include_initial, 1)


def _along(a: TracedArray, axis: int, part: slice) -> TracedArray:
    return a[(slice(None),) * axis + (part,)]


def _edge(op: str, a: TracedArray, value, axis: int, what: str) -> TracedArray:
    """``prepend``/``append`` as numpy reads it: a scalar is one slice along
    ``axis`` (its dtype joins the result's), an array must match ``a`` off that axis."""
    if not isinstance(value, TracedArray):
        value = np.asarray(value)
        if value.dtype.kind == "c":
            raise UnsupportedOperationError(op, f"{what}: complex numbers are not supported by symdiff")
        if value.ndim == 0:
            return _slice_of(a, axis, value[()])
        value = constant_operand(a.trace, value)
    if value.ndim == 0:
        return _slice_of(a, axis, value)
    if value.ndim != a.ndim:
        raise ShapeMismatchError(op, f"{what} has {value.ndim} dimensions; it needs {a.ndim} (or to be a scalar)")
    return value


@implements(np.diff)
def diff(a, n=1, axis=-1, prepend=np._NoValue, append=np._NoValue):
    op = "numpy.diff"
    a = _traced(op, a)
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)):
        raise UnsupportedOperationError(op, f"n must be a Python int, not {type(n).__name__}")
    if n < 0:
        raise UnsupportedOperationError(op, f"order must be non-negative but got {n}")
    if a.ndim == 0:
        raise TraceIndexError(op, "diff requires input that is at least one dimensional")
    ax = ordered_axes(op, axis, a.ndim)[0]
    if n == 0:
        return a
    parts = [_edge(op, a, prepend, ax, "prepend")] if prepend is not np._NoValue else []
    parts.append(a)
    if append is not np._NoValue:
        parts.append(_edge(op, a, append, ax, "append"))
    out = concatenate(parts, ax) if len(parts) > 1 else a
    for _ in range(int(n)):
        later, earlier = _along(out, ax, slice(1, None)), _along(out, ax, slice(None, -1))
        out = later != earlier if out.dtype_name == "bool" else later - earlier
    return out


@implements(np.ediff1d)
def ediff1d(ary, to_end=None, to_begin=None):
    op = "numpy.ediff1d"
    a = reshape(_traced(op, ary), -1)
    parts = [_flat(op, a, to_begin, "to_begin")] if to_begin is not None else []
    parts.append(_along(a, 0, slice(1, None)) - _along(a, 0, slice(None, -1)))
    if to_end is not None:
        parts.append(_flat(op, a, to_end, "to_end"))
    return concatenate(parts, 0) if len(parts) > 1 else parts[0]


def _flat(op: str, a: TracedArray, value, what: str) -> TracedArray:
    """``to_begin``/``to_end``: flattened, in ``a``'s dtype (numpy refuses an unsafe cast)."""
    if isinstance(value, TracedArray):
        return reshape(value, -1) if value.dtype_name == a.dtype_name else reshape(value.astype(a.dtype_name), -1)
    value = np.asarray(value).reshape(-1)
    target = np.dtype(np.float64 if a.dtype_name.startswith("float") else a.dtype_name.replace("bool", "bool_"))
    if not np.can_cast(value, target, casting="same_kind"):
        raise UnsupportedOperationError(op, f"dtype of {what} must be compatible with the input's {a.dtype_name}")
    const = constant_operand(a.trace, value.astype(target))
    return const if const.dtype_name == a.dtype_name else const.astype(a.dtype_name)


def _trapezoid(y, x=None, dx=1.0, axis=-1):
    op = "numpy.trapezoid"
    y = _traced(op, y)
    if y.ndim == 0:
        raise TraceIndexError(op, "needs an array with at least one dimension")
    ax = ordered_axes(op, axis, y.ndim)[0]
    if x is None:
        d = dx
    else:
        if not isinstance(x, TracedArray):
            x = constant_operand(y.trace, np.asarray(x, dtype=np.float64))
        if x.ndim == 1:
            shape = [1] * y.ndim
            shape[ax] = -1
            d = reshape(diff(x), shape)
        else:
            d = diff(x, axis=ax)
    pairs = _along(y, ax, slice(1, None)) + _along(y, ax, slice(None, -1))
    return np.sum(d * pairs / 2.0, axis=ax)


implements(*[f for f in (getattr(np, "trapezoid", None), getattr(np, "trapz", None)) if f is not None])(_trapezoid)
