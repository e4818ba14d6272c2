"""Traced building blocks of the derivative rules: transposes of the last
two axes, symmetric parts, diagonals, and sums over broadcast batch axes.
Everything here is ordinary traced numpy, so a rule built from it is itself
differentiable."""
from __future__ import annotations

import numpy as np

from ...tracer.creation import eye as _eye
from ...tracer.traced_array import TracedArray


def mT(x: TracedArray) -> TracedArray:  # noqa: N802 (numpy's name for the matrix transpose)
    """The last two axes swapped (a view: no tasklet)."""
    return np.swapaxes(x, -1, -2)


def sym(x: TracedArray) -> TracedArray:
    """``(x + x^T) / 2``: the symmetric part, what a rule for a symmetric
    argument returns (JAX's ``symmetrize_input`` convention)."""
    return (x + mT(x)) * 0.5


def eye(like: TracedArray, n) -> TracedArray:
    return _eye(like.trace, n, dtype=like.dtype)


def diagonal(x: TracedArray) -> TracedArray:
    """``x[..., i, i]``."""
    return np.diagonal(x, axis1=-2, axis2=-1)


def diag_embed(v: TracedArray) -> TracedArray:
    """A stack of diagonal matrices with ``v[..., i]`` on the diagonal."""
    n = v.sym_shape[-1]
    return v[..., None] * eye(v, n)


def add(*terms):
    """The sum of the terms that are not None (a zero cotangent is None); None if all are."""
    present = [t for t in terms if t is not None]
    if not present:
        return None
    total = present[0]
    for t in present[1:]:
        total = total + t
    return total


def unbroadcast(x: TracedArray | None, shape: tuple) -> TracedArray | None:
    """``x`` summed over the axes numpy's broadcasting added to an argument of
    ``shape`` (leading axes, and axes of extent 1 that were stretched): the
    cotangent of a broadcast argument."""
    if x is None:
        return None
    extra = x.ndim - len(shape)
    if extra:
        x = np.sum(x, axis=tuple(range(extra)))
    stretched = tuple(k for k, d in enumerate(shape) if d == 1 and x.sym_shape[k] != 1)
    if stretched:
        x = np.sum(x, axis=stretched, keepdims=True)
    return x
