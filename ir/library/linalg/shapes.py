"""Shape rules shared by the ``np.linalg`` library ops: square matrices,
batch axes broadcast as numpy does, float dtypes only.  They raise the
tracer's errors, which name the user's line."""
from __future__ import annotations

import sympy

from ...graph import FLOAT_DTYPES
from ...tracer.emit import broadcast_shapes, same, shape_str
from ...tracer.errors import ShapeMismatchError, UnsupportedOperationError


def matrix(op: str, shape: tuple, dtype: str, what: str = "its argument") -> tuple:
    """``shape`` as ``(batch, m, n)``; a float matrix or stack of them."""
    if dtype not in FLOAT_DTYPES:
        raise UnsupportedOperationError(op, f"{what} has dtype {dtype}; it needs float32 or float64")
    if len(shape) < 2:
        raise ShapeMismatchError(op, f"{what} has shape {shape_str(shape)}; it needs a matrix (or a stack of "
                                     "matrices: the last two axes)")
    return tuple(shape[:-2]), shape[-2], shape[-1]


def square(op: str, shape: tuple, dtype: str, what: str = "its argument") -> tuple:
    """``(batch, n)`` of a square matrix (stack); a non-square one is refused."""
    batch, m, n = matrix(op, shape, dtype, what)
    if not same(m, n):
        raise ShapeMismatchError(op, f"{what} has shape {shape_str(shape)}; its last two axes must be equal "
                                     "(a square matrix)")
    return batch, n


def batch(op: str, *batches: tuple) -> tuple:
    """The broadcast of several batch shapes (numpy's rule)."""
    return tuple(broadcast_shapes(op, *batches))


def smaller(m, n):
    """``min(m, n)`` of two dimensions (sizes may be symbols)."""
    m, n = sympy.sympify(m), sympy.sympify(n)
    return m if (m - n).is_nonpositive else n if (n - m).is_nonpositive else sympy.Min(m, n)
