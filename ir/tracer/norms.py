"""np.linalg.norm, vector_norm and matrix_norm in the forms that need no
decomposition: vector orders (any p, 0, inf, -inf) and the matrix orders
'fro', 1, -1, inf, -inf, each composed of traced reductions; the spectral
and nuclear norms (ord 2, -2, 'nuc' of a matrix) take the singular values of
the ``linalg.svd`` library node (``ir.library.linalg.api.matrix_2norm``)."""
from __future__ import annotations

import math

import numpy as np

from .dispatch import implements
from .errors import UnsupportedOperationError
from .indexing import reshape
from .reductions import normalize_axes, ordered_axes
from .traced_array import TracedArray


def _vector(x: TracedArray, ord, axes: tuple[int, ...], keepdims: bool) -> TracedArray:
    if ord is None or ord == 2:
        return np.sqrt(np.sum(x * x, axis=axes, keepdims=keepdims))
    if ord == math.inf:
        return np.max(np.abs(x), axis=axes, keepdims=keepdims)
    if ord == -math.inf:
        return np.min(np.abs(x), axis=axes, keepdims=keepdims)
    if ord == 0:
        return np.sum((x != 0).astype(x.dtype), axis=axes, keepdims=keepdims)
    if ord == 1:
        return np.sum(np.abs(x), axis=axes, keepdims=keepdims)
    if isinstance(ord, str):
        raise UnsupportedOperationError("numpy.linalg.norm", f"ord={ord!r} is a matrix norm; a vector takes numbers")
    return np.sum(np.abs(x) ** ord, axis=axes, keepdims=keepdims) ** (1.0 / ord)


def _matrix(x: TracedArray, ord, axes: tuple[int, int], keepdims: bool) -> TracedArray:
    row, col = axes
    if ord is None or ord == "fro":
        return np.sqrt(np.sum(x * x, axis=axes, keepdims=keepdims))
    if ord in (1, -1, math.inf, -math.inf):
        summed, over = (row, col) if ord in (1, -1) else (col, row)
        sums = np.sum(np.abs(x), axis=summed, keepdims=True)
        pick = np.max if ord > 0 else np.min
        out = pick(sums, axis=over, keepdims=True)
        return out if keepdims else reshape(out, tuple(d for k, d in enumerate(x.sym_shape) if k not in axes))
    if ord in (2, -2, "nuc"):  # singular values: a library node (ir.library.linalg)
        from ..library.linalg.api import matrix_2norm
        return matrix_2norm(x, ord, axes, keepdims)
    raise UnsupportedOperationError("numpy.linalg.norm", f"ord={ord!r} is not a matrix norm order; supported: "
                                    "'fro', 'nuc', 1, -1, 2, -2, inf, -inf")


@implements(np.linalg.norm)
def norm(x, ord=None, axis=None, keepdims=False):
    op = "numpy.linalg.norm"
    if not isinstance(x, TracedArray):
        raise UnsupportedOperationError(op, "needs a traced array")
    if axis is None:
        if ord is None:
            out = _vector(reshape(x, -1), None, (0,), False)
            return reshape(out, (1,) * x.ndim) if keepdims else out
        if x.ndim not in (1, 2):
            raise UnsupportedOperationError(op, "ord= without axis= needs a 1-d or 2-d array (numpy's rule)")
        axis = tuple(range(x.ndim))
    axes = ordered_axes(op, axis, x.ndim)
    if len(axes) == 1:
        return _vector(x, ord, axes, keepdims)
    if len(axes) == 2:
        return _matrix(x, ord, axes, keepdims)
    raise UnsupportedOperationError(op, "axis= must name one or two axes")


@implements(np.linalg.vector_norm)
def vector_norm(x, /, *, axis=None, keepdims=False, ord=2):
    if axis is None:
        out = _vector(reshape(x, -1), ord, (0,), False)
        return reshape(out, (1,) * x.ndim) if keepdims else out
    return _vector(x, ord, normalize_axes("numpy.linalg.vector_norm", axis, x.ndim), keepdims)


@implements(np.linalg.matrix_norm)
def matrix_norm(x, /, *, keepdims=False, ord="fro"):
    return _matrix(x, ord, (x.ndim - 2, x.ndim - 1), keepdims)
