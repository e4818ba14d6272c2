"""Products that are elementwise over index maps, not contractions: np.kron
(two tiled views multiplied) and np.cross (components of moved-axis views)."""
from __future__ import annotations

import numpy as np
import sympy

from .dispatch import implements
from .elementwise import constant_operand, trace_of
from .errors import ShapeMismatchError
from .indexing import moveaxis, reshape
from .reductions import ordered_axes
from .reshuffle import remap
from .traced_array import TracedArray


def _traced(values) -> list[TracedArray]:
    trace = trace_of(values)
    return [x if isinstance(x, TracedArray) else constant_operand(trace, np.atleast_1d(np.asarray(x)))
            for x in values]


@implements(np.kron)
def kron(a, b):
    """``out[v] = a[v // nb] * b[v % nb]`` along every axis (the lower-rank
    operand padded with leading size-1 axes)."""
    a, b = _traced([a, b])
    ndim = max(a.ndim, b.ndim)
    a = reshape(a, (1,) * (ndim - a.ndim) + a.sym_shape)
    b = reshape(b, (1,) * (ndim - b.ndim) + b.sym_shape)
    shape = tuple(p * q for p, q in zip(a.sym_shape, b.sym_shape))
    outer = remap(a, shape, lambda v: tuple(sympy.floor(p / q) for p, q in zip(v, b.sym_shape)), "numpy.kron")
    inner = remap(b, shape, lambda v: tuple(sympy.Mod(p, q) for p, q in zip(v, b.sym_shape)), "numpy.kron")
    return outer * inner


@implements(np.cross)
def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    """Vectors of 2 or 3 components along ``axisa``/``axisb``; two 2-vectors
    give the scalar z component, as in numpy."""
    op = "numpy.cross"
    a, b = _traced([a, b])
    if axis is not None:
        axisa = axisb = axisc = axis
    a = moveaxis(a, ordered_axes(op, axisa, a.ndim)[0], -1)
    b = moveaxis(b, ordered_axes(op, axisb, b.ndim)[0], -1)
    na, nb = a.shape[-1], b.shape[-1]
    if na not in (2, 3) or nb not in (2, 3):
        raise ShapeMismatchError(op, "incompatible dimensions for cross product (dimension must be 2 or 3)")
    ax, ay = a[..., 0], a[..., 1]
    bx, by = b[..., 0], b[..., 1]
    z = ax * by - ay * bx
    if na == nb == 2:
        return z
    az = a[..., 2] if na == 3 else None
    bz = b[..., 2] if nb == 3 else None
    x = (ay * bz if bz is not None else 0) - (az * by if az is not None else 0)
    y = (az * bx if az is not None else 0) - (ax * bz if bz is not None else 0)
    c = np.stack(np.broadcast_arrays(x, y, z), axis=-1)
    return moveaxis(c, -1, ordered_axes(op, axisc, c.ndim)[0])
