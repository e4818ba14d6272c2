"""``sort``: the library operation behind ``np.sort``, ``np.argsort`` and the
quantiles (``ir.tracer.sorting``).

A sort is no scalar body over a domain, so it is one library node run by
numpy (on the host between compiled kernels on the Slang devices).  It
returns three arrays of the input's shape: the sorted values, the permutation
that sorts (``values = take_along_axis(x, perm, axis)``, numpy's stable
argsort) and its inverse, the rank of each element (``x = take_along_axis(
values, rank, axis)``).  With both at hand each derivative is one gather:

* JVP: ``d values = take_along_axis(dx, perm, axis)``;
* VJP: ``x_bar = take_along_axis(values_bar, rank, axis)`` (the cotangent of
  the k-th smallest goes back to the element that landed there).

The gathers are traced numpy, so second derivatives go through them.  Ties
follow the stable order (equal elements keep their input order), which is
the permutation ``jax.lax.sort`` differentiates through too: the gradient of
the k-th sorted value goes to the k-th of the equal elements in input order,
never split between them.  NaNs sort last, as in numpy and JAX.  The
permutation and the ranks are int32 and carry no derivative.
"""
from __future__ import annotations

import numpy as np

from ..graph import FLOAT_DTYPES
from ..tracer.errors import TraceIndexError, UnsupportedOperationError
from .emit import call
from .registry import LibraryOp, register

NAME = "sort"


def _shapes(specs, params):
    ((shape, dtype),) = specs
    if dtype not in FLOAT_DTYPES:
        raise UnsupportedOperationError("numpy.sort", f"sorts float arrays here; got {dtype}")
    if not -len(shape) <= params["axis"] < len(shape):
        raise TraceIndexError("numpy.sort", f"axis {params['axis']} is out of bounds for {len(shape)} dimensions")
    return [(shape, dtype), (shape, "int32"), (shape, "int32")]


def _numpy(a: np.ndarray, axis: int) -> tuple:
    perm = np.argsort(a, axis=axis, kind="stable")
    positions = np.arange(a.shape[axis]).reshape([-1 if k == axis % a.ndim else 1 for k in range(a.ndim)])
    rank = np.empty_like(perm)
    np.put_along_axis(rank, perm, np.broadcast_to(positions, perm.shape), axis)
    return np.take_along_axis(a, perm, axis), perm, rank


def _jvp(params, inputs, outputs, tangents):
    (dx,) = tangents
    return [None if dx is None else np.take_along_axis(dx, outputs[1], params["axis"]), None, None]


def _vjp(params, inputs, outputs, cotangents):
    g = cotangents[0]
    return [None if g is None else np.take_along_axis(g, outputs[2], params["axis"])]


SORT = register(LibraryOp(NAME, _shapes, _numpy, _vjp, _jvp, nondifferentiable=frozenset({1, 2}),
                          doc="(sorted values, sorting permutation, ranks) along one axis; stable"))


def sort_along(x, axis: int) -> tuple:
    """``(values, perm, rank)`` of the float array ``x`` sorted along ``axis``."""
    return call(NAME, x, axis=axis)
