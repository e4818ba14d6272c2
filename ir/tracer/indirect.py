"""Indirect accesses at array level: ``a[idx]``, ``np.take``, ``np.add.at``,
``a[idx] = v`` and ``np.put_along_axis`` with integer index arrays.

Each is one tasklet whose memlet index uses the integer connector reading
``idx`` (graph.py's gather/scatter form), so the reverse pass sees an ordinary
read or accumulating write and transposes it: a gather's gradient is a
scatter-add, a scatter-add's gradient a gather.  Indices must lie in
``[0, n)``: negative indices do not wrap (every device raises
``IndexOutOfRange`` when a program runs with one out of range).
"""
from __future__ import annotations

import numpy as np
import sympy

from .dispatch import implements
from .elementwise import constant_operand
from .emit import (as_arith, broadcast_index, broadcast_shapes, domain_symbols, new_array, read, scalar_expr,
                   shape_str, write)
from .errors import ShapeMismatchError, UnsupportedOperationError
from .reductions import normalize_axes
from .traced_array import TracedArray


def is_index_array(item) -> bool:
    """A traced or numpy integer array used as an index."""
    return (isinstance(item, TracedArray) and item.dtype_name == "int32") or \
        (isinstance(item, np.ndarray) and item.ndim > 0 and np.issubdtype(item.dtype, np.integer))


def _index_array(op: str, idx, trace) -> TracedArray:
    if isinstance(idx, np.ndarray) and is_index_array(idx):
        return constant_operand(trace, idx.astype(np.int32))
    if is_index_array(idx):
        return idx
    kind = (f"a traced {idx.dtype_name} array" if isinstance(idx, TracedArray)
            else f"a {type(idx).__name__}")
    raise UnsupportedOperationError(op, f"indices must be a traced int32 array (an argument such as "
                                    f"idx: sd.i32[n], or np.arange/np.array inside the program); got {kind}")


def gather(op: str, a: TracedArray, idx: TracedArray, axis: int) -> TracedArray:
    """``np.take(a, idx, axis)``: idx's dimensions replace ``axis``."""
    shape = a.sym_shape[:axis] + idx.sym_shape + a.sym_shape[axis + 1:]
    out = new_array(a.trace, shape, a.dtype_name, "gather")
    syms = domain_symbols(len(shape))
    reads: dict = {}
    position = read(idx, syms[axis:axis + idx.ndim], "idx", reads)
    value = read(a, syms[:axis] + (position,) + syms[axis + idx.ndim:], "x", reads)
    write(op, out, syms, tuple((s, 0, d) for s, d in zip(syms, shape)), value, reads)
    return out


@implements(np.take)
def take(a, indices, axis=None, out=None, mode=None):
    if out is not None or mode is not None:
        raise UnsupportedOperationError("numpy.take", "out= and mode= are not supported")
    idx = _index_array("numpy.take", indices, a.trace)
    if axis is None:
        return gather("numpy.take", np.reshape(a, -1), idx, 0)
    return gather("numpy.take", a, idx, normalize_axes("numpy.take", axis, a.ndim)[0])


def _advanced(op: str, arr: TracedArray, items: list) -> tuple:
    """What a read and a store through index arrays share: ``(basic, shape,
    syms, reads, position)``.  ``basic`` is the view the slices and Nones
    make, ``shape`` numpy's result shape with domain symbols ``syms`` (the
    index arrays, and ints, which count as 0-d index arrays then, broadcast
    together; their dimensions replace the indexed ones where those are
    adjacent, else go first), ``position`` the element of ``basic`` a point
    of that domain names, through the index arrays' connectors in ``reads``."""
    from .indexing import _int_index  # noqa: PLC0415 (indexing imports this module)
    advanced = [k for k, item in enumerate(items) if item is not None and not isinstance(item, slice)]
    adjacent = advanced == list(range(advanced[0], advanced[-1] + 1))
    basic = arr[tuple(slice(None) if k in advanced else item for k, item in enumerate(items))]
    arrays = {k: _index_array(op, items[k], arr.trace) for k in advanced if is_index_array(items[k])}
    bshape = broadcast_shapes(op, *(a.sym_shape for a in arrays.values()))
    rest = [k for k in range(len(items)) if k not in advanced]      # basic's dims that stay, in order
    at = sum(1 for k in rest if k < advanced[0]) if adjacent else 0
    shape = tuple(basic.sym_shape[k] for k in rest)
    shape = shape[:at] + bshape + shape[at:]
    syms = domain_symbols(len(shape))
    bsyms = syms[at:at + len(bshape)]
    rest_syms = dict(zip(rest, syms[:at] + syms[at + len(bshape):]))
    reads: dict = {}
    position = []
    for k in range(len(items)):
        if k in arrays:
            position.append(read(arrays[k], broadcast_index(arrays[k].sym_shape, bshape, bsyms), f"idx{k}", reads))
        elif k in advanced:
            position.append(_int_index(op, items[k], basic.sym_shape[k], k))
        else:
            position.append(rest_syms[k])
    return basic, shape, syms, reads, tuple(position)


def getitem_indirect(arr: TracedArray, items: list) -> TracedArray:
    """``arr[...]`` with index arrays among slices, ints and None (one item
    per dimension, plus Nones), as numpy's advanced indexing (``_advanced``):
    basic indexing is a view, the gather one tasklet reading every index
    array through its own connector."""
    op = "getitem"
    basic, shape, syms, reads, position = _advanced(op, arr, items)
    out = new_array(arr.trace, shape, arr.dtype_name, "gather")
    value = read(basic, position, "x", reads)
    write(op, out, syms, tuple((s, 0, d) for s, d in zip(syms, shape)), value, reads)
    return out


def setitem_indirect(arr: TracedArray, items: list, value) -> None:
    """``arr[...] = value`` with index arrays, numpy's buffered store: of
    several points naming one element, the last in C order wins (so
    ``x[idx] += v`` adds once per element, the value of its last occurrence;
    ``np.add.at`` adds them all).  Three steps, each race-free:

    * a scatter with ``"max"`` of each point's C-order number into a float32
      array over the target (``-inf``, the identity, where no point lands):
      the winner of every element (float32, whose compare-and-swap every
      device has; exact up to 2**24 points, more are refused);
    * the value broadcast to the indexed shape, flattened, gathered at the
      winners;
    * ``where(hit, gathered, old)`` stored over the target view.

    The gradient follows: an overwritten element passes none to the old
    array, each winner's value gets its element's cotangent, a losing
    duplicate none (JAX's rule for ``.at[].set`` too)."""
    op = "setitem"
    trace = arr.trace
    basic, shape, syms, reads, position = _advanced(op, arr, items)
    size = sympy.Mul(*shape)
    if size.is_Integer and size > 2 ** 24:
        raise UnsupportedOperationError(op, f"a store through index arrays of {size} points: the winners are "
                                        "numbered in float32, exact up to 2**24 points; split the store")
    winner = new_array(trace, basic.sym_shape, "float32", "store_winner")   # float32: every device has its CAS
    number = sympy.Integer(0)
    for s, d in zip(syms, shape):
        number = number * d + s
    write(op, winner, position, tuple((s, 0, d) for s, d in zip(syms, shape)), number, reads, accumulate="max")
    value = constant_operand(trace, value)
    if isinstance(value, TracedArray):
        if broadcast_shapes(op, value.sym_shape, shape) != tuple(sympy.sympify(d) for d in shape):
            raise ShapeMismatchError(op, f"could not broadcast a value of shape {shape_str(value.sym_shape)} into "
                                     f"the indexed shape {shape_str(shape)}")
        flat = np.reshape(np.broadcast_to(value, shape), -1)
        value = gather(op, flat, np.maximum(winner, 0).astype(np.int32), 0)
    basic[...] = np.where(winner >= 0, value, basic)


@implements("add.at")
def add_at(target, indices, values) -> None:
    """``np.add.at(target, idx, v)``: unbuffered, so repeated indices all add."""
    op = "numpy.add.at"
    if not isinstance(target, TracedArray):
        raise UnsupportedOperationError(op, "the target must be a traced array (np.zeros(...) in the program)")
    if target.trace.map_ranges:  # traced once, it would add once instead of once per iteration
        raise UnsupportedOperationError(op, "np.add.at is an array-level update and is not allowed inside an "
                                        "sd.map body; accumulate one element there (out[idx[i]] += v), or "
                                        "call np.add.at outside the loop")
    if isinstance(indices, tuple):
        if len(indices) != 1:
            raise UnsupportedOperationError(op, "one index array (along axis 0) is supported")
        indices = indices[0]
    idx = _index_array(op, indices, target.trace)
    region = idx.sym_shape + target.sym_shape[1:]
    values = constant_operand(target.trace, values)
    syms = domain_symbols(len(region))
    reads: dict = {}
    position = read(idx, syms[:idx.ndim], "idx", reads)
    if isinstance(values, TracedArray):
        if broadcast_shapes(op, values.sym_shape, region) != tuple(sympy.sympify(d) for d in region):
            raise ShapeMismatchError(op, f"values of shape {shape_str(values.sym_shape)} do not broadcast "
                                     f"to the indexed region {shape_str(region)}")
        value = as_arith(read(values, broadcast_index(values.sym_shape, region, syms), "x", reads),
                         values.dtype_name)
    else:
        value = scalar_expr(values)
    write(op, target, (position,) + syms[idx.ndim:], tuple((s, 0, d) for s, d in zip(syms, region)), value,
          reads, accumulate="sum")


@implements(np.take_along_axis)
def take_along_axis(arr, indices, axis=-1):
    """One gather: output element ``v`` reads ``arr`` at ``indices[v]`` along
    ``axis`` and at ``v`` (broadcast) along the others."""
    op = "numpy.take_along_axis"
    if not isinstance(arr, TracedArray):
        raise UnsupportedOperationError(op, "needs a traced array")
    idx = _index_array(op, indices, arr.trace)
    if axis is None:
        arr, axis = np.reshape(arr, -1), 0
    if idx.ndim != arr.ndim:
        raise ShapeMismatchError(op, f"indices of shape {shape_str(idx.sym_shape)} need as many dimensions as "
                                 f"the array, shape {shape_str(arr.sym_shape)}")
    axis = normalize_axes(op, axis, arr.ndim)[0]
    others = broadcast_shapes(op, *(tuple(s[:axis]) + tuple(s[axis + 1:]) for s in (arr.sym_shape, idx.sym_shape)))
    shape = others[:axis] + (idx.sym_shape[axis],) + others[axis:]
    out = new_array(arr.trace, shape, arr.dtype_name, "take_along_axis")
    syms = domain_symbols(len(shape))
    reads: dict = {}
    position = read(idx, broadcast_index(idx.sym_shape, shape, syms), "idx", reads)
    at = list(broadcast_index(arr.sym_shape, shape, syms))
    at[axis] = position
    write(op, out, syms, tuple((s, 0, d) for s, d in zip(syms, shape)), read(arr, tuple(at), "x", reads), reads)
    return out


@implements(np.put_along_axis)
def put_along_axis(arr, indices, values, axis) -> None:
    """``arr[i0, ..., indices, ..., in] = values`` with iotas along the other
    axes, as numpy builds it: a store through index arrays
    (``setitem_indirect``, differentiable in ``arr`` and ``values``)."""
    op = "numpy.put_along_axis"
    if not isinstance(arr, TracedArray):
        raise UnsupportedOperationError(op, "needs a traced array to store into")
    idx = _index_array(op, indices, arr.trace)
    if axis is None:
        if idx.ndim != 1:
            raise ShapeMismatchError(op, "with axis=None the indices must be 1-d (they index the flattened array)")
        flat = np.reshape(arr, -1)
        if flat.container != arr.container:
            raise UnsupportedOperationError(op, "axis=None stores into the flattened array, which is a copy for "
                                            "this view; pass np.ravel of a contiguous array, or an axis")
        arr, axis = flat, 0
    if idx.ndim != arr.ndim:
        raise ShapeMismatchError(op, f"indices of shape {shape_str(idx.sym_shape)} need as many dimensions as the "
                                 f"array, shape {shape_str(arr.sym_shape)}")
    axis = normalize_axes(op, axis, arr.ndim)[0]
    key = [idx if k == axis else np.arange(int(n)).reshape([-1 if j == k else 1 for j in range(arr.ndim)])
           for k, n in enumerate(arr.shape)]
    setitem_indirect(arr, key, values)
