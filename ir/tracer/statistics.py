"""average (weights, returned), cov (rowvar, bias, ddof, fweights, aweights)
and corrcoef, composed of traced reductions and products so each
differentiates like the program a user would write by hand."""
from __future__ import annotations

import numpy as np

from .dispatch import implements
from .elementwise import constant_operand
from .emit import shape_str
from .errors import ShapeMismatchError, UnsupportedOperationError
from .reductions import ordered_axes
from .traced_array import TracedArray


def _array(op: str, x, trace) -> TracedArray:
    x = constant_operand(trace, x)
    if not isinstance(x, TracedArray):
        raise UnsupportedOperationError(op, f"needs an array (got {type(x).__name__})")
    return x


def _aligned_weights(op: str, a: TracedArray, w: TracedArray, axis) -> TracedArray:
    """``w`` shaped to broadcast against ``a``: the same shape, or one dimension
    per reduced axis, in the order ``axis`` names them (numpy 2)."""
    if w.shape == a.shape:
        return w
    if axis is None:
        raise ShapeMismatchError(op, f"weights of shape {shape_str(w.sym_shape)} differ from the array's "
                                 f"{shape_str(a.sym_shape)}; give axis= for 1-d weights")
    axes = ordered_axes(op, axis, a.ndim)
    if w.ndim != len(axes) or any(w.sym_shape[k] != a.sym_shape[ax] for k, ax in enumerate(axes)):
        raise ShapeMismatchError(op, f"weights of shape {shape_str(w.sym_shape)} must have the array's shape "
                                 f"{shape_str(a.sym_shape)} or its shape along axis {axis}")
    w = np.transpose(w, sorted(range(len(axes)), key=lambda k: axes[k]))   # into the array's axis order
    return np.reshape(w, tuple(a.sym_shape[k] if k in axes else 1 for k in range(a.ndim)))


@implements(np.average)
def average(a, axis=None, weights=None, returned=False, *, keepdims=False):
    """``sum(a * w) / sum(w)`` over ``axis``; ``returned`` adds ``sum(w)``
    broadcast to the average's shape (the count without weights), as numpy."""
    op = "numpy.average"
    trace = a.trace if isinstance(a, TracedArray) else getattr(weights, "trace", None)
    a = _array(op, a, trace)
    if weights is None:
        avg = np.mean(a, axis=axis, keepdims=keepdims)
        scale = np.sum(np.ones_like(a), axis=axis, keepdims=keepdims)
    else:
        w = _aligned_weights(op, a, _array(op, weights, trace), axis)
        scale = np.sum(np.broadcast_to(w, a.shape), axis=axis, keepdims=keepdims)
        avg = np.sum(a * w, axis=axis, keepdims=keepdims) / scale
    if not returned:
        return avg
    return avg, np.broadcast_to(scale, avg.shape) * 1.0


def _variables(op: str, m, rowvar: bool, trace) -> TracedArray:
    """``m`` as (variables, observations)."""
    x = _array(op, m, trace)
    if x.ndim > 2:
        raise ShapeMismatchError(op, f"m has {x.ndim} dimensions; at most 2 are allowed")
    x = np.atleast_2d(x)
    return x.T if not rowvar and x.shape[0] != 1 else x


@implements(np.cov)
def cov(m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, aweights=None, *, dtype=None):
    """numpy's estimate, step by step: weighted means, centred variables, one
    product, divided by the weighted degrees of freedom; squeezed, so one
    variable gives a 0-d result."""
    op = "numpy.cov"
    if dtype is not None:
        raise UnsupportedOperationError(op, "dtype= is not supported when tracing")
    trace = next(v.trace for v in (m, y, fweights, aweights) if isinstance(v, TracedArray))
    x = _variables(op, m, rowvar, trace)
    if y is not None:
        x = np.concatenate([x, _variables(op, y, rowvar, trace)], axis=0)
    if ddof is None:
        ddof = 0 if bias else 1
    w = None
    for weights, what in ((fweights, "fweights"), (aweights, "aweights")):
        if weights is not None:
            weights = _array(op, weights, trace)
            if weights.ndim != 1 or weights.sym_shape[0] != x.sym_shape[1]:
                raise ShapeMismatchError(op, f"{what} of shape {shape_str(weights.sym_shape)} must be 1-d with one "
                                         f"weight per observation ({x.shape[1]})")
            w = weights if w is None else w * weights
    avg, w_sum = average(x, axis=1, weights=w, returned=True)
    w_sum = w_sum[0]
    if w is None:
        fact = x.shape[1] - ddof
    elif ddof == 0:
        fact = w_sum
    elif aweights is None:
        fact = w_sum - ddof
    else:
        fact = w_sum - ddof * np.sum(w * _array(op, aweights, trace)) / w_sum
    centred = x - avg[:, None]
    c = centred @ (centred if w is None else centred * w).T
    return np.squeeze(c * (1.0 / fact if fact > 0 else np.inf) if not isinstance(fact, TracedArray) else c / fact)


@implements(np.corrcoef)
def corrcoef(x, y=None, rowvar=True, *, dtype=None):
    """``cov / (std_i std_j)``, clipped to [-1, 1] as numpy does."""
    c = cov(x, y, rowvar, dtype=dtype)
    if c.ndim == 0:
        return c / c
    stddev = np.sqrt(np.diagonal(c))
    return np.clip(c / stddev[:, None] / stddev[None, :], -1, 1)
