"""``linalg.inv`` (LAPACK ``gesv`` against the identity, through numpy) and
``linalg.pinv`` (through the SVD, numpy's cutoff ``rcond``).

* inv: JVP ``-A^-1 dA A^-1``; VJP ``-A^-T G A^-T``.  A singular matrix raises
  numpy's ``LinAlgError`` from the call that runs the program.
* pinv ``p`` of ``A`` (m x n): JVP ``dp = -p dA p + p p^T dA^T (I - A p)
  + (I - p A) dA^T p^T p``; VJP its transpose, ``-p^T G p^T + (I - A p)
  G^T p p^T + p^T p G^T (I - p A)``.  Valid where the rank does not change
  around ``A`` (a full-rank ``A``, or a fixed rank); at a rank change the
  pseudo-inverse is not continuous and no gradient exists.
"""
from __future__ import annotations

import numpy as np

from ..emit import call
from ..registry import LibraryOp, register
from .algebra import add, mT
from .shapes import matrix, square


def _inv_shapes(specs, params):
    ((shape, dtype),) = specs
    square("numpy.linalg.inv", shape, dtype)
    return [(shape, dtype)]


def _inv_jvp(params, inputs, outputs, tangents):
    (da,) = tangents
    (p,) = outputs
    return [None if da is None else -(p @ da @ p)]


def _inv_vjp(params, inputs, outputs, cotangents):
    (g,) = cotangents
    (p,) = outputs
    return [None if g is None else -(mT(p) @ g @ mT(p))]


INV = register(LibraryOp("linalg.inv", _inv_shapes, lambda a: (np.linalg.inv(a),), _inv_vjp, _inv_jvp,
                         doc="the inverse of a square matrix (stack)"))


def inv(a):
    return call("linalg.inv", a)


def _pinv_shapes(specs, params):
    ((shape, dtype),) = specs
    b, m, n = matrix("numpy.linalg.pinv", shape, dtype)
    return [(b + (n, m), dtype)]


def _pinv_numpy(a: np.ndarray, rcond: float | None = None) -> tuple:
    return (np.linalg.pinv(a) if rcond is None else np.linalg.pinv(a, rcond=rcond),)


def _pinv_jvp(params, inputs, outputs, tangents):
    (da,) = tangents
    if da is None:
        return [None]
    (a,), (p,) = inputs, outputs
    dat = mT(da)
    return [-(p @ da @ p) + (p @ mT(p)) @ (dat - (dat @ a) @ p) + (dat - (p @ a) @ dat) @ (mT(p) @ p)]


def _pinv_vjp(params, inputs, outputs, cotangents):
    (g,) = cotangents
    if g is None:
        return [None]
    (a,), (p,) = inputs, outputs
    gt = mT(g)
    return [add(-(mT(p) @ g @ mT(p)), (gt - a @ (p @ gt)) @ (p @ mT(p)), (mT(p) @ p) @ (gt - (gt @ p) @ a))]


PINV = register(LibraryOp("linalg.pinv", _pinv_shapes, _pinv_numpy, _pinv_vjp, _pinv_jvp,
                          doc="the Moore-Penrose pseudo-inverse of a matrix (stack)"))


def pinv(a, rcond: float | None = None):
    return call("linalg.pinv", a, **({} if rcond is None else {"rcond": float(rcond)}))
