"""``np.histogram`` with fixed bins: an int count with a ``range`` (or the
data's min and max, as numpy), or an explicit array of edges.

Each bin counts the elements with ``edges[b] <= x < edges[b + 1]``, the last
bin closed on the right, numpy's rule (its fast path for equal bins corrects
its computed bin to exactly these comparisons).  That is one reduction over
``(bins, n)``: O(n * bins) work, no scatter, so no atomics and no order.

The counts are int32 and carry no gradient.  ``weights=`` sums the weights
instead (differentiable in them); ``density=True`` divides by the total and
the bin widths, differentiable in the weights and, when the range comes from
the data, in the data through the edges (as ``jax.numpy.histogram``).
"""
from __future__ import annotations

import numpy as np

from .creation import constant, linspace
from .dispatch import implements
from .errors import ShapeMismatchError, UnsupportedOperationError
from .traced_array import TracedArray

_OP = "numpy.histogram"


def _equal_edges(a: TracedArray, bins: int, range_) -> TracedArray | np.ndarray:
    """``bins + 1`` equally spaced edges over ``range_`` (None: the data's
    min and max); an empty range widens by 0.5 on each side, as numpy."""
    if isinstance(bins, (bool, np.bool_)) or bins < 1:
        raise UnsupportedOperationError(_OP, f"bins={bins!r} must be a positive int")
    if range_ is None:
        lo, hi = np.min(a), np.max(a)
        empty = lo == hi
        return linspace(a.trace, np.where(empty, lo - 0.5, lo), np.where(empty, hi + 0.5, hi), bins + 1)
    if any(isinstance(r, TracedArray) for r in range_):
        raise UnsupportedOperationError(_OP, "range= must be two numbers; for a traced range, pass the edges: "
                                        "bins=np.linspace(lo, hi, n + 1)")
    lo, hi = (float(r) for r in range_)
    if not lo <= hi or not np.isfinite([lo, hi]).all():
        raise UnsupportedOperationError(_OP, f"range={range_!r}: max must be larger than min and both finite")
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    return np.linspace(lo, hi, bins + 1)


def _given_edges(bins) -> TracedArray | np.ndarray:
    if isinstance(bins, str):
        raise UnsupportedOperationError(_OP, f"bins={bins!r}: a bin-width estimator makes the number of bins "
                                        "data-dependent; give an int or the edges")
    edges = bins if isinstance(bins, TracedArray) else np.asarray(bins, dtype=np.float64)
    if edges.ndim != 1 or edges.shape[0] < 2:
        raise ShapeMismatchError(_OP, f"bins of shape {tuple(edges.shape)}: the edges must be a 1-d array of at "
                                 "least two")
    if not isinstance(edges, TracedArray) and np.any(np.diff(edges) < 0):
        raise UnsupportedOperationError(_OP, "bins must increase monotonically")
    return edges


@implements(np.histogram)
def histogram(a, bins=10, range=None, density=None, weights=None):  # noqa: A002 (numpy's keyword)
    """``(hist, bin_edges)``: int32 counts, or float sums of ``weights`` /
    densities (module docstring)."""
    if not isinstance(a, TracedArray):
        raise UnsupportedOperationError(_OP, "needs a traced array")
    x = np.reshape(a if a.dtype_name.startswith("float") else a.astype(a.trace.float_dtype), -1)
    edges = _equal_edges(x, bins, range) if isinstance(bins, (int, np.integer)) else _given_edges(bins)
    if not isinstance(edges, TracedArray):
        edges = constant(a.trace, edges.astype(x.dtype_name), "histogram edges")
    count = edges.shape[0] - 1
    last = constant(a.trace, np.arange(count) == count - 1, "histogram's last bin")[:, None]
    row, low, high = x[None, :], edges[:-1, None], edges[1:, None]
    inside = (row >= low) & np.where(last, row <= high, row < high)
    if weights is not None:
        w = np.reshape(weights, -1)
        if np.shape(w) != np.shape(x):
            raise ShapeMismatchError(_OP, f"weights of shape {np.shape(weights)} must have the data's shape "
                                     f"{a.shape}")
        hist = np.sum(np.where(inside, w[None, :], 0.0), axis=1)
    else:
        hist = np.sum(inside, axis=1, dtype=np.int32)
    if density:
        hist = hist / np.sum(hist) / (edges[1:] - edges[:-1])
    return hist, edges
