"""nansum / nanprod / nanmean / nanvar / nanstd / nanmax / nanmin: the plain
reductions with ``where=~isnan(a)`` (and the caller's own ``where``), so a NaN
contributes the identity and gets a zero gradient, as in numpy and JAX."""
from __future__ import annotations

import numpy as np

from .dispatch import implements
from .masks import accepts_selection
from .reductions import _check_plain, max_, mean, min_, prod, reduce, std, sum_, var
from .traced_array import TracedArray


def _not_nan(a, where):
    keep = ~np.isnan(a) if isinstance(a, TracedArray) and a.dtype_name.startswith("float") else None
    if keep is None:
        return where
    return keep if where is None or where is True else keep & where


def _zeroed(a):
    """``a`` with its NaNs replaced by 0: var squares the centred values
    before the mask applies, and a NaN there would make the gradient
    ``0 * NaN``; the mask still leaves those elements out."""
    if not isinstance(a, TracedArray) or not a.dtype_name.startswith("float"):
        return a
    return np.where(np.isnan(a), 0.0, a)


@implements(np.nansum)
@accepts_selection
def nansum(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    return sum_(a, axis, dtype, out, keepdims, initial, _not_nan(a, where))


@implements(np.nanprod)
@accepts_selection
def nanprod(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    return prod(a, axis, dtype, out, keepdims, initial, _not_nan(a, where))


@implements(np.nanmean)
@accepts_selection
def nanmean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=None):
    return mean(a, axis, dtype, out, keepdims, where=_not_nan(a, where))


@implements(np.nanvar)
@accepts_selection
def nanvar(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None, **kwargs):
    _check_plain("nanvar", kwargs)
    return var(_zeroed(a), axis, dtype, out, ddof, keepdims, where=_not_nan(a, where))


@implements(np.nanstd)
@accepts_selection
def nanstd(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None, **kwargs):
    _check_plain("nanstd", kwargs)
    return std(_zeroed(a), axis, dtype, out, ddof, keepdims, where=_not_nan(a, where))


def _nan_extremum(extremum, op: str, a, axis, out, keepdims, initial, where, fill: float):
    """The extremum over the non-NaN elements; NaN where a slice has none
    (numpy warns "All-NaN slice" there), unless ``initial`` gives a value."""
    keep = _not_nan(a, where)
    if keep is where:   # integers: no NaN to skip
        return extremum(a, axis, out, keepdims, initial, where)
    if initial is not None:
        return extremum(a, axis, out, keepdims, initial, keep)
    value = reduce(op, a, axis, keepdims, "max" if fill < 0 else "min", where=keep)  # masked: +-inf, no initial
    counted = np.any(np.broadcast_to(keep, a.shape), axis=axis, keepdims=keepdims)
    return np.where(counted, value, np.nan)


@implements(np.nanmax)
@accepts_selection
def nanmax(a, axis=None, out=None, keepdims=False, initial=None, where=None):
    return _nan_extremum(max_, "nanmax", a, axis, out, keepdims, initial, where, -np.inf)


@implements(np.nanmin)
@accepts_selection
def nanmin(a, axis=None, out=None, keepdims=False, initial=None, where=None):
    return _nan_extremum(min_, "nanmin", a, axis, out, keepdims, initial, where, np.inf)
