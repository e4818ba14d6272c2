"""``linalg.cholesky``: ``a = L L^T`` with ``L`` lower triangular (LAPACK
``potrf`` through numpy, which reads the lower triangle).

Rules treat ``a`` as symmetric, as JAX does (its derivative is taken of
``cholesky((a + a^T) / 2)``), with ``phi(X)`` the lower triangle of ``X``
with its diagonal halved:

* JVP: ``dL = L phi(L^-1 sym(da) L^-T)``;
* VJP: ``a_bar = sym(L^-T phi(L^T L_bar) L^-1)``,

each two triangular solves and matmuls (second derivatives go through them).
A matrix that is not positive definite raises numpy's ``LinAlgError`` from
the call that runs the program.
"""
from __future__ import annotations

import numpy as np

from ..emit import call
from ..registry import LibraryOp, register
from .algebra import eye, mT, sym
from .shapes import square
from .solve import solve_triangular


def _shapes(specs, params):
    ((shape, dtype),) = specs
    square("numpy.linalg.cholesky", shape, dtype)
    return [(shape, dtype)]


def _numpy(a: np.ndarray) -> tuple:
    return (np.linalg.cholesky(a),)


def _phi(x):
    """The lower triangle with the diagonal halved."""
    return np.tril(x) - 0.5 * x * eye(x, x.sym_shape[-1])


def _jvp(params, inputs, outputs, tangents):
    (da,) = tangents
    if da is None:
        return [None]
    (L,) = outputs
    left = solve_triangular(L, sym(da), lower=True)             # L^-1 S
    inner = mT(solve_triangular(L, mT(left), lower=True))        # L^-1 S L^-T
    return [L @ _phi(inner)]


def _vjp(params, inputs, outputs, cotangents):
    (g,) = cotangents
    if g is None:
        return [None]
    (L,) = outputs
    p = _phi(mT(L) @ g)
    y = solve_triangular(mT(L), p, lower=False)                  # L^-T P
    z = solve_triangular(mT(L), mT(y), lower=False)              # L^-T P^T L^-1 = (L^-T P L^-1)^T
    return [sym(z)]


CHOLESKY = register(LibraryOp("linalg.cholesky", _shapes, _numpy, _vjp, _jvp, doc="a = L L^T, L lower"))


def cholesky(a):
    return call("linalg.cholesky", a)
