"""``np.linalg`` on traced arrays, and the functions built from the library
ops (``eigvalsh``, ``svdvals``, ``lstsq``, ``matrix_power``, ``cond``, the
spectral and nuclear norms).  numpy's argument forms are kept: a vector
right-hand side, the named result tuples, ``compute_uv``.  Called on plain
arrays the same functions run numpy (``sd.linalg``)."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
from numpy.linalg._linalg import EighResult, QRResult, SlogdetResult, SVDResult

from ...tracer.dispatch import implements
from ...tracer.errors import ShapeMismatchError, UnsupportedOperationError
from ...tracer.traced_array import TracedArray
from . import cholesky as _cholesky, determinant, inverse, qr as _qr, solve as _solve, spectral
from .algebra import eye, mT


def _traced(op: str, a) -> TracedArray:
    if not isinstance(a, TracedArray):
        raise UnsupportedOperationError(op, "needs a traced array (not a value inside an sd.map body)")
    return a


def _vector_rhs(a, b) -> bool:
    """numpy 2's rule: ``b`` is a vector exactly when it is 1-d."""
    return np.ndim(b) == 1


@implements(np.linalg.solve)
def solve(a, b):
    if _vector_rhs(a, b):
        return _solve.solve(a, b[:, None])[..., 0]
    return _solve.solve(a, b)


def solve_triangular(a, b, trans=0, lower: bool = False, unit_diagonal: bool = False):
    """scipy.linalg.solve_triangular's form (``trans``: 0/'N', 1/'T' or
    2/'C'; ``lower`` defaults to False as there); batched over leading axes;
    ``b`` of shape (..., n, k) or (n,)."""
    transposed = {0: False, "N": False, 1: True, "T": True, 2: True, "C": True}.get(trans)
    if transposed is None:
        raise UnsupportedOperationError("sd.linalg.solve_triangular", f"trans={trans!r}: use 0, 1, 2, 'N', 'T' or 'C'")
    if unit_diagonal:
        strict = np.tril(a, -1) if lower else np.triu(a, 1)
        a = strict + (eye(a, a.shape[-1]) if isinstance(a, TracedArray) else np.eye(np.shape(a)[-1]))
    if transposed:
        a, lower = np.swapaxes(a, -1, -2), not lower
    if np.ndim(b) == 1:
        return _solve.solve_triangular(a, b[:, None], lower)[..., 0]
    return _solve.solve_triangular(a, b, lower)


@implements(np.linalg.inv)
def inv(a):
    return inverse.inv(a)


@implements(np.linalg.pinv)
def pinv(a, rcond=None, hermitian=False, **kwargs):
    if kwargs:
        raise UnsupportedOperationError("numpy.linalg.pinv", f"arguments {sorted(kwargs)} are not supported; "
                                        "use rcond=")
    return inverse.pinv(a, rcond)


@implements(np.linalg.det)
def det(a):
    return determinant.det(a)


@implements(np.linalg.slogdet)
def slogdet(a):
    return SlogdetResult(*determinant.slogdet(a))


@implements(np.linalg.cholesky)
def cholesky(a, /, *, upper: bool = False):
    low = _cholesky.cholesky(a)
    return np.swapaxes(low, -1, -2) if upper else low


@implements(np.linalg.qr)
def qr(a, mode: str = "reduced"):
    if mode not in ("reduced", "r"):
        raise UnsupportedOperationError("numpy.linalg.qr", f"mode={mode!r} is not supported; use 'reduced' or 'r'")
    q, r = _qr.qr(a)
    return r if mode == "r" else QRResult(q, r)


@implements(np.linalg.eigh)
def eigh(a, UPLO: str = "L"):  # noqa: N803 (numpy's keyword)
    return EighResult(*spectral.eigh(a, UPLO))


@implements(np.linalg.eigvalsh)
def eigvalsh(a, UPLO: str = "L"):  # noqa: N803
    return spectral.eigh(a, UPLO)[0]


@implements(np.linalg.svd)
def svd(a, full_matrices: bool = True, compute_uv: bool = True, hermitian: bool = False):
    out = spectral.svd(a, full_matrices, compute_uv)
    return SVDResult(*out) if compute_uv else out


@implements(np.linalg.svdvals)
def svdvals(x, /):
    return spectral.svd(x, False, False)


@implements(np.linalg.matrix_power)
def matrix_power(a, n):
    """Repeated squaring with matmuls (``n < 0``: of the inverse)."""
    a = _traced("numpy.linalg.matrix_power", a)
    if not isinstance(n, (int, np.integer)):
        raise UnsupportedOperationError("numpy.linalg.matrix_power", f"the exponent must be an int, not {n!r}")
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ShapeMismatchError("numpy.linalg.matrix_power", f"needs square matrices; got shape {a.shape}")
    if n == 0:
        return a * 0.0 + eye(a, a.sym_shape[-1])
    if n < 0:
        a, n = inverse.inv(a), -n
    result, power = None, a
    while n:
        if n & 1:
            result = power if result is None else result @ power
        n >>= 1
        if n:
            power = power @ power
    return result


@implements(np.linalg.lstsq)
def lstsq(a, b, rcond=None):
    """``(x, residuals, rank, s)`` as numpy, ``x = pinv(a) b``.  ``residuals``
    (squared 2-norms of ``b - a x`` per column) is computed for a tall ``a``
    (numpy gives it only at full rank: the rank is assumed full); ``rank``
    is a traced int32 count of singular values above the cutoff."""
    a = _traced("numpy.linalg.lstsq", a)
    m, n = a.shape[-2:]
    cutoff = ml_dtypes.finfo(a.dtype).eps * max(m, n) if rcond is None else rcond
    s = spectral.svd(a, False, False)
    x = inverse.pinv(a, cutoff) @ b
    if isinstance(m, int) and isinstance(n, int) and m > n:
        r = a @ x - b
        residuals = np.sum(r * r, axis=0)
        residuals = residuals[None] if np.ndim(b) == 1 else residuals
    else:
        residuals = s[:0]
    rank = np.sum((s > cutoff * s[..., :1]).astype(np.int32))
    return x, residuals, rank, s


def matrix_2norm(x: TracedArray, ord, axes: tuple[int, int], keepdims: bool) -> TracedArray:
    """``norm(x, ord)`` for ord 2 (largest singular value), -2 (smallest) and
    'nuc' (their sum) over the matrix axes ``axes`` (``ir.tracer.norms``)."""
    moved = np.moveaxis(x, axes, (-2, -1))
    s = spectral.svd(moved, False, False)
    out = np.max(s, axis=-1) if ord == 2 else np.min(s, axis=-1) if ord == -2 else np.sum(s, axis=-1)
    if keepdims:
        for ax in sorted(a % x.ndim for a in axes):
            out = np.expand_dims(out, ax)
    return out


@implements(np.linalg.cond)
def cond(x, p=None):
    x = _traced("numpy.linalg.cond", x)
    if p in (None, 2, -2):
        s = spectral.svd(x, False, False)
        big, small = s[..., 0], s[..., -1]
        return small / big if p == -2 else big / small
    if p in ("fro", "nuc", 1, -1, math.inf, -math.inf):
        return (np.linalg.norm(x, p, axis=(-2, -1)) * np.linalg.norm(inverse.inv(x), p, axis=(-2, -1)))
    raise UnsupportedOperationError("numpy.linalg.cond", f"p={p!r} is not a matrix norm order")


__all__ = ["solve", "solve_triangular", "inv", "pinv", "det", "slogdet", "cholesky", "qr", "eigh", "eigvalsh",
           "svd", "svdvals", "matrix_power", "lstsq", "cond", "matrix_2norm", "mT"]
