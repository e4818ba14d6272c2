"""``linalg.qr`` in numpy's ``mode='reduced'``: ``a = Q R`` with ``Q``
(..., m, k) orthonormal columns and ``R`` (..., k, n) upper triangular,
``k = min(m, n)`` (Householder, LAPACK ``geqrf``/``orgqr`` through numpy).

Rules for ``m >= n`` (J. Townsend's derivation, as JAX's), with
``X = dA R^-1``, ``C = Q^T X`` and ``W = tril(C, -1) - tril(C, -1)^T``:

* JVP: ``dQ = Q (W - C) + X``, ``dR = (C - W) R``;
* VJP: with ``E = R_bar R^T - Q^T Q_bar`` and
  ``C_bar = E - tril(E - E^T, -1)``: ``a_bar = (Q_bar + Q C_bar) R^-T``.

A wide matrix (``m < n``) has no rule here (its ``R`` is not invertible):
differentiating through it is refused.  R's diagonal may be negative
(LAPACK's sign convention, as numpy and JAX).
"""
from __future__ import annotations

import numpy as np

from ...tracer.errors import UnsupportedOperationError
from ..emit import call
from ..registry import LibraryOp, register
from .algebra import add, mT
from .shapes import matrix, smaller
from .solve import solve_triangular


def _shapes(specs, params):
    ((shape, dtype),) = specs
    b, m, n = matrix("numpy.linalg.qr", shape, dtype)
    k = smaller(m, n)
    return [(b + (m, k), dtype), (b + (k, n), dtype)]


def _numpy(a: np.ndarray) -> tuple:
    q, r = np.linalg.qr(a, mode="reduced")
    return q, r


def _tall(a) -> None:
    m, n = a.sym_shape[-2:]
    if (m - n).is_negative:
        raise UnsupportedOperationError("numpy.linalg.qr", f"the derivative of the QR decomposition of a wide "
                                        f"matrix ({m} x {n}, fewer rows than columns) is not defined here; "
                                        "differentiate the QR of its transpose")


def _jvp(params, inputs, outputs, tangents):
    (da,) = tangents
    if da is None:
        return [None, None]
    (a,), (q, r) = inputs, outputs
    _tall(a)
    x = mT(solve_triangular(mT(r), mT(da), lower=True))    # dA R^-1
    c = mT(q) @ x
    low = np.tril(c, -1)
    w = low - mT(low)
    return [q @ (w - c) + x, (c - w) @ r]


def _vjp(params, inputs, outputs, cotangents):
    gq, gr = cotangents
    if gq is None and gr is None:
        return [None]
    (a,), (q, r) = inputs, outputs
    _tall(a)
    e = add(None if gr is None else gr @ mT(r), None if gq is None else -(mT(q) @ gq))
    c_bar = e - np.tril(e - mT(e), -1)
    x_bar = add(gq, q @ c_bar)
    return [mT(solve_triangular(r, mT(x_bar), lower=False))]  # X_bar R^-T


QR = register(LibraryOp("linalg.qr", _shapes, _numpy, _vjp, _jvp, doc="a = Q R (reduced)"))


def qr(a):
    return call("linalg.qr", a)
