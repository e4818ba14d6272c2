"""The *stack functions: each lifts its inputs to a common number of
dimensions (views) and concatenates them (indexing.concatenate: one copy
into disjoint regions of a fresh array)."""
from __future__ import annotations

import numpy as np

from .dispatch import implements
from .errors import UnsupportedOperationError
from .indexing import concatenate, reshape
from .reshuffle import atleast_1d, atleast_2d, atleast_3d
from .traced_array import TracedArray


def _arrays(op: str, tup) -> list[TracedArray]:
    arrays = list(tup)
    if not arrays or not all(isinstance(x, TracedArray) for x in arrays):
        raise UnsupportedOperationError(op, "needs a non-empty sequence of traced arrays")
    return arrays


def _lifted(lift, arrays: list) -> list:
    return [lift(x) for x in arrays]


@implements(np.vstack, np.row_stack)
def vstack(tup, *, dtype=None, casting="same_kind"):
    return concatenate(_lifted(atleast_2d, _arrays("numpy.vstack", tup)), 0, dtype=dtype)


@implements(np.hstack)
def hstack(tup, *, dtype=None, casting="same_kind"):
    arrays = _lifted(atleast_1d, _arrays("numpy.hstack", tup))
    return concatenate(arrays, 0 if arrays[0].ndim == 1 else 1, dtype=dtype)


@implements(np.dstack)
def dstack(tup):
    return concatenate(_lifted(atleast_3d, _arrays("numpy.dstack", tup)), 2)


@implements(np.column_stack)
def column_stack(tup):
    arrays = _arrays("numpy.column_stack", tup)
    return concatenate([reshape(x, (-1, 1)) if x.ndim < 2 else x for x in arrays], 1)
