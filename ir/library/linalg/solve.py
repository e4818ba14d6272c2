"""``linalg.solve`` (LU with partial pivoting, LAPACK ``gesv`` through numpy)
and ``linalg.solve_triangular`` (only the named triangle of ``a`` is read).

Both take ``a`` of shape ``(..., n, n)`` and ``b`` of shape ``(..., n, k)``,
batch axes broadcast (``np.linalg.solve`` of a vector ``b`` reshapes it to a
column first: ``linalg.api``).  Rules, for ``x = a^-1 b``:

* JVP: ``dx = a^-1 (db - da x)``;
* VJP: ``b_bar = a^-T x_bar`` (another solve, with ``a`` transposed) and
  ``a_bar = -b_bar x^T`` (restricted to the triangle for a triangular ``a``),
  each summed over the batch axes its argument was broadcast along.

Both rules are traced solves and matmuls, so second derivatives go through
them.  A singular ``a`` raises numpy's ``LinAlgError`` from the call that
runs the program (numpy's behaviour; no ``inf``/``nan`` result).
"""
from __future__ import annotations

import numpy as np

from ...tracer.emit import same, shape_str
from ...tracer.errors import ShapeMismatchError
from ..emit import call
from ..registry import LibraryOp, register
from .algebra import add, mT, unbroadcast
from .shapes import batch, matrix, square


def _shapes(op: str):
    def shapes(specs, params):
        (a_shape, a_dtype), (b_shape, b_dtype) = specs
        a_batch, n = square(op, a_shape, a_dtype, "a")
        b_batch, rows, k = matrix(op, b_shape, b_dtype, "b")
        if not same(rows, n):
            raise ShapeMismatchError(op, f"a has shape {shape_str(a_shape)} and b {shape_str(b_shape)}: b needs "
                                         f"{n} rows, one per row of a")
        return [(batch(op, a_batch, b_batch) + (n, k), a_dtype)]
    return shapes


def _triangle(x, lower: bool):
    return np.tril(x) if lower else np.triu(x)


# -- solve ---------------------------------------------------------------------------
def _solve_numpy(a: np.ndarray, b: np.ndarray) -> tuple:
    return (np.linalg.solve(a, b),)


def _solve_jvp(params, inputs, outputs, tangents):
    a, _ = inputs
    (x,) = outputs
    da, db = tangents
    rhs = add(db, None if da is None else -(da @ x))
    return [None if rhs is None else solve(a, rhs)]


def _solve_vjp(params, inputs, outputs, cotangents):
    a, b = inputs
    (x,) = outputs
    (g,) = cotangents
    if g is None:
        return [None, None]
    b_bar = solve(mT(a), g)
    return [unbroadcast(-(b_bar @ mT(x)), a.sym_shape), unbroadcast(b_bar, b.sym_shape)]


SOLVE = register(LibraryOp("linalg.solve", _shapes("numpy.linalg.solve"), _solve_numpy, _solve_vjp, _solve_jvp,
                           doc="x = a^-1 b for a (..., n, n), b (..., n, k)"))


def solve(a, b):
    """``a^-1 b`` for ``b`` of shape ``(..., n, k)`` (the library op itself)."""
    return call("linalg.solve", a, b)


# -- solve_triangular -----------------------------------------------------------------
def _triangular_numpy(a: np.ndarray, b: np.ndarray, lower: bool = True) -> tuple:
    """LAPACK's ``trtrs`` through scipy where scipy is installed (an optional
    dependency: 512 x 512 with 512 right-hand sides takes 13 ms against numpy's
    general solve's 69 ms here, and the Cholesky rule makes two of them); numpy
    has no triangular solve, so otherwise its general solve of the triangle,
    exact for it but an LU factorisation dearer.  Both raise ``LinAlgError``
    for a zero on the diagonal."""
    if a.ndim == 2 and b.ndim == 2:
        try:
            from scipy.linalg import solve_triangular as trtrs
        except ImportError:
            pass
        else:
            return (trtrs(a, b, lower=lower, check_finite=False),)
    return (np.linalg.solve(np.tril(a) if lower else np.triu(a), b),)


def _triangular_jvp(params, inputs, outputs, tangents):
    a, _ = inputs
    (x,) = outputs
    da, db = tangents
    lower = params.get("lower", True)
    rhs = add(db, None if da is None else -(_triangle(da, lower) @ x))
    return [None if rhs is None else solve_triangular(a, rhs, lower)]


def _triangular_vjp(params, inputs, outputs, cotangents):
    a, b = inputs
    (x,) = outputs
    (g,) = cotangents
    if g is None:
        return [None, None]
    lower = params.get("lower", True)
    b_bar = solve_triangular(mT(a), g, not lower)
    return [unbroadcast(_triangle(-(b_bar @ mT(x)), lower), a.sym_shape), unbroadcast(b_bar, b.sym_shape)]


TRIANGULAR = register(LibraryOp("linalg.solve_triangular", _shapes("sd.linalg.solve_triangular"),
                                _triangular_numpy, _triangular_vjp, _triangular_jvp,
                                doc="x = a^-1 b reading only a's lower (lower=True) or upper triangle"))


def solve_triangular(a, b, lower: bool = True):
    """``a^-1 b`` reading only ``a``'s lower (``lower=True``) or upper triangle."""
    return call("linalg.solve_triangular", a, b, lower=bool(lower))
