"""``np.sort``, ``np.argsort`` and the order statistics built on them:
``median``, ``quantile``, ``percentile`` and their NaN-skipping forms.

The sort itself is the ``sort`` library node (``ir.library.sort``), which
gives the sorted values, the permutation and the ranks; the gradient goes
back through the permutation (see there; ties follow the stable order, as
``jax.lax.sort``).  A quantile is then gathers from the sorted values at the
two order statistics around its virtual index ``q (n - 1)``, numpy's default
'linear' method and the 'lower', 'higher', 'midpoint' and 'nearest' ones, as
``jax.numpy.quantile`` computes them: ``v[floor] (1 - f) + v[ceil] f`` with
``f = q (n - 1) - floor``, so the gradient splits between those two elements
(all of it to one when the index is whole).  ``median`` is the 0.5 quantile's
'midpoint' (JAX's definition; the same value and gradient as 'linear').
``q`` may be a number, a list or array of them (their axes come first in the
result) or a traced array (its gradient is ``(v[ceil] - v[floor]) (n - 1)``).
'nearest' rounds a half-way index to even as numpy does (JAX rounds it down).

A slice holding a NaN gives NaN (zero gradient), as numpy and JAX; the nan*
forms count the non-NaN elements of each slice (NaNs sort last) and take the
quantile of those, NaN for an all-NaN slice.
"""
from __future__ import annotations

import numpy as np
import sympy

from ..library.sort import sort_along
from .dispatch import implements
from .errors import UnsupportedOperationError
from .reductions import normalize_axes
from .traced_array import TracedArray

_METHODS = ("linear", "lower", "higher", "midpoint", "nearest")


def _traced(op: str, a) -> TracedArray:
    if not isinstance(a, TracedArray):
        raise UnsupportedOperationError(op, "needs a traced array (not a value inside an sd.map body)")
    return a


def _as_float(a: TracedArray) -> TracedArray:
    return a if a.dtype_name.startswith("float") else a.astype(a.trace.float_dtype)


def _flat_axis(op: str, a: TracedArray, axis) -> tuple[TracedArray, int]:
    """``(a, axis)`` with ``axis=None`` as numpy reads it: the flattened array's only axis."""
    if axis is None:
        return np.reshape(a, -1), 0
    if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, (int, np.integer)):
        raise UnsupportedOperationError(op, f"axis {axis!r} must be an int or None")
    return a, normalize_axes(op, axis, a.ndim)[0]


def _no_order(op: str, order) -> None:
    if order is not None:
        raise UnsupportedOperationError(op, "order= names fields of structured arrays, which symdiff does not trace")


@implements(np.sort)
def sort(a, axis=-1, kind=None, order=None, *, stable=None):
    """Sorted copy along ``axis`` (``kind``/``stable`` accepted: every sort here is stable)."""
    op = "numpy.sort"
    _no_order(op, order)
    a, axis = _flat_axis(op, _traced(op, a), axis)
    values = sort_along(_as_float(a), axis)[0]
    return values if values.dtype_name == a.dtype_name else values.astype(a.dtype_name)


@implements(np.argsort)
def argsort(a, axis=-1, kind=None, order=None, *, stable=None):
    """The stable sorting permutation along ``axis``, int32 (an index: ``np.take_along_axis(a, p, axis)``)."""
    op = "numpy.argsort"
    _no_order(op, order)
    a, axis = _flat_axis(op, _traced(op, a), axis)
    return sort_along(_as_float(a), axis)[1]


def _merged_last(op: str, a: TracedArray, axis) -> tuple[TracedArray, tuple]:
    """``a`` with the axes ``axis`` names moved last and merged into one, and
    the shape ``keepdims`` gives (those axes as 1)."""
    axes = normalize_axes(op, axis, a.ndim)
    rest = [k for k in range(a.ndim) if k not in axes]
    kept = tuple(a.sym_shape[k] for k in rest)
    moved = np.transpose(a, rest + list(axes)) if a.ndim else a
    merged = np.reshape(moved, kept + (sympy.Mul(*(a.sym_shape[k] for k in axes)),))
    return merged, tuple(1 if k in axes else d for k, d in enumerate(a.sym_shape))


def _quantiles(op: str, a, q, axis, method: str, keepdims: bool, skip_nan: bool):
    """The quantiles ``q`` (fractions) of ``a`` over ``axis`` (module docstring)."""
    a = _as_float(_traced(op, a))
    if method not in _METHODS:
        raise UnsupportedOperationError(op, f"method={method!r} is not supported; use one of {', '.join(_METHODS)}")
    if not isinstance(q, TracedArray):
        q = np.asarray(q, dtype=np.float64)
        if not np.all((q >= 0) & (q <= 1)):
            raise UnsupportedOperationError(op, f"quantiles must lie in [0, 1] (percentiles in [0, 100]); got "
                                            f"{q.tolist()}")
    x, keep = _merged_last(op, a, axis)
    if skip_nan:   # as JAX: a NaN's gradient is 0 also where an all-NaN slice reads it
        x = np.where(np.isnan(x), np.nan, x)
    qdims = q.ndim
    values = sort_along(x, x.ndim - 1)[0]
    values = np.reshape(values, (1,) * qdims + values.sym_shape)       # q's axes first
    n = x.sym_shape[-1]
    q = np.reshape(q, tuple(np.shape(q)) + (1,) * x.ndim)
    if skip_nan:
        last = np.sum(~np.isnan(values), axis=-1, keepdims=True).astype(a.dtype_name) - 1
    else:
        last = int(n) - 1 if n.is_Integer else n - 1
    pos = q * last
    low, high = (f(pos) for f in ((np.floor, np.ceil) if method != "nearest" else (np.rint, np.rint)))

    def at(index):
        index = np.clip(index, 0, np.maximum(last, 0)).astype(np.int32)
        return np.take_along_axis(values, index, -1)[..., 0]

    lo, hi = at(low), at(high)
    if method == "linear":
        weight = (pos - low)[..., 0]
        result = lo * (1 - weight) + hi * weight
    elif method == "midpoint":
        result = (lo + hi) * 0.5
    else:
        result = hi if method == "higher" else lo
    if not skip_nan:
        result = np.where(np.isnan(values[..., -1]), np.nan, result)
    return np.reshape(result, result.sym_shape[:qdims] + keep) if keepdims else result


@implements(np.quantile)
def quantile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, *,
             weights=None, interpolation=None):
    return _quantiles("numpy.quantile", a, q, axis, _method("numpy.quantile", out, weights, interpolation, method),
                      keepdims, False)


@implements(np.nanquantile)
def nanquantile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, *,
                weights=None, interpolation=None):
    return _quantiles("numpy.nanquantile", a, q, axis,
                      _method("numpy.nanquantile", out, weights, interpolation, method), keepdims, True)


@implements(np.percentile)
def percentile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, *,
               weights=None, interpolation=None):
    return _quantiles("numpy.percentile", a, _fraction(q), axis,
                      _method("numpy.percentile", out, weights, interpolation, method), keepdims, False)


@implements(np.nanpercentile)
def nanpercentile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, *,
                  weights=None, interpolation=None):
    return _quantiles("numpy.nanpercentile", a, _fraction(q), axis,
                      _method("numpy.nanpercentile", out, weights, interpolation, method), keepdims, True)


@implements(np.median)
def median(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    _method("numpy.median", out, None, None, "midpoint")
    return _quantiles("numpy.median", a, 0.5, axis, "midpoint", keepdims, False)


@implements(np.nanmedian)
def nanmedian(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    _method("numpy.nanmedian", out, None, None, "midpoint")
    return _quantiles("numpy.nanmedian", a, 0.5, axis, "midpoint", keepdims, True)


def _fraction(q):
    return q / 100 if isinstance(q, TracedArray) else np.asarray(q, dtype=np.float64) / 100


def _method(op: str, out, weights, interpolation, method: str) -> str:
    """``method`` after refusing the keywords this tracer has no form for."""
    if out is not None:
        raise UnsupportedOperationError(op, "out= is not supported when tracing; use the returned array")
    if weights is not None:
        raise UnsupportedOperationError(op, "weights= is not supported (numpy takes it only with "
                                        "method='inverted_cdf')")
    if interpolation is not None:
        raise UnsupportedOperationError(op, "interpolation= is numpy's old name; write method=")
    return method
