"""``linalg.det`` and ``linalg.slogdet`` (LU through numpy).

With ``tr(A^-1 dA) = sum(A^-T * dA)``:

* det ``d``: JVP ``d * tr(A^-1 dA)``; VJP ``g d A^-T``;
* slogdet ``(sign, logabsdet)``: JVP of logabsdet ``tr(A^-1 dA)``, VJP
  ``g A^-T``; the sign is piecewise constant (no derivative).

Both rules go through ``linalg.inv``, so second derivatives exist; at a
singular ``A`` the value is numpy's (``det`` 0, ``slogdet`` ``(0, -inf)``)
but the derivative's inverse raises ``LinAlgError`` (the derivative of det
there is the adjugate, which this rule does not compute).
"""
from __future__ import annotations

import numpy as np

from ..emit import call
from ..registry import LibraryOp, register
from .algebra import mT
from .inverse import inv
from .shapes import square


def _scalar_shapes(op: str, count: int):
    def shapes(specs, params):
        ((shape, dtype),) = specs
        b, _ = square(op, shape, dtype)
        return [(b, dtype)] * count
    return shapes


def _trace_of_solve(a, da):
    return np.sum(mT(inv(a)) * da, axis=(-2, -1))


def _det_jvp(params, inputs, outputs, tangents):
    (da,) = tangents
    return [None if da is None else outputs[0] * _trace_of_solve(inputs[0], da)]


def _det_vjp(params, inputs, outputs, cotangents):
    (g,) = cotangents
    return [None if g is None else (g * outputs[0])[..., None, None] * mT(inv(inputs[0]))]


DET = register(LibraryOp("linalg.det", _scalar_shapes("numpy.linalg.det", 1), lambda a: (np.linalg.det(a),),
                         _det_vjp, _det_jvp, doc="the determinant of a square matrix (stack)"))


def _slogdet_numpy(a: np.ndarray) -> tuple:
    sign, logabs = np.linalg.slogdet(a)
    return sign, logabs


def _slogdet_jvp(params, inputs, outputs, tangents):
    (da,) = tangents
    return [None, None if da is None else _trace_of_solve(inputs[0], da)]


def _slogdet_vjp(params, inputs, outputs, cotangents):
    _, g = cotangents
    return [None if g is None else g[..., None, None] * mT(inv(inputs[0]))]


SLOGDET = register(LibraryOp("linalg.slogdet", _scalar_shapes("numpy.linalg.slogdet", 2), _slogdet_numpy,
                             _slogdet_vjp, _slogdet_jvp, nondifferentiable=frozenset({0}),
                             doc="(sign, log|det|) of a square matrix (stack)"))


def det(a):
    return call("linalg.det", a)


def slogdet(a):
    return call("linalg.slogdet", a)
