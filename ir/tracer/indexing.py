"""Indexing and views: basic slicing, integer and None indexing, transpose,
reshape, broadcast_to, expand_dims, squeeze (all free: they compose index
maps), plus stores (``a[key] = v``, ``a += v``), concatenate and stack."""
from __future__ import annotations

import numpy as np
import sympy

from .dispatch import implements
from .elementwise import constant_operand, result_dtype
from .elementwise import copy as copy_array
from .emit import (as_arith, as_bool, broadcast_index, broadcast_shapes, domain_symbols, new_array, read, same,
                   scalar_expr, shape_str, write)
from .errors import ShapeMismatchError, TraceIndexError, UnsupportedOperationError
from .indirect import getitem_indirect, is_index_array, setitem_indirect
from .maps import MapValue, as_map_operand, map_read, map_write
from .masks import HINT as MASK_HINT
from .masks import is_mask, select, store
from .reductions import normalize_axes, ordered_axes
from .traced_array import TracedArray, placeholders


def _is_int(x) -> bool:
    return (isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))) or \
        (isinstance(x, sympy.Expr) and x.is_integer is not False)


def _expand_key(op: str, key, ndim: int) -> list:
    """The key as one item per dimension plus None items (new axes)."""
    items = list(key) if isinstance(key, tuple) else [key]
    for item in items:
        if not (item is None or item is Ellipsis or isinstance(item, (slice, MapValue)) or _is_int(item)
                or is_index_array(item)):
            kind = "boolean/array indexing" if hasattr(item, "shape") or isinstance(item, list) else \
                f"an index of type {type(item).__name__}"
            raise UnsupportedOperationError(op, f"{kind} is not traceable; use basic slicing, integers, "
                                            "None, an int32 index array or an sd.map loop")
    if sum(item is Ellipsis for item in items) > 1:
        raise TraceIndexError(op, "an index can only have a single ellipsis")
    consuming = sum(item is not None and item is not Ellipsis for item in items)
    if consuming > ndim:
        raise TraceIndexError(op, f"too many indices: {consuming} for an array with {ndim} dimensions")
    fill = [slice(None)] * (ndim - consuming)
    at = next((k for k, item in enumerate(items) if item is Ellipsis), None)
    if at is not None:
        return items[:at] + fill + items[at + 1:]
    return items + fill


def _int_index(op: str, i, extent: sympy.Expr, axis: int) -> sympy.Expr:
    i = sympy.sympify(int(i) if isinstance(i, np.integer) else i)
    if i.is_Integer and extent.is_Integer:
        if not -extent <= i < extent:
            raise TraceIndexError(op, f"index {i} is out of range for axis {axis} with size {extent}")
        return i % extent
    return extent + i if i.is_Integer and i < 0 else i


def _slice(op: str, s: slice, extent: sympy.Expr):
    """``(start, step, length)`` of a basic slice; symbolic extents are not clamped."""
    if any(isinstance(b, (TracedArray, MapValue)) for b in (s.start, s.stop, s.step)):
        raise UnsupportedOperationError(op, "slice bounds must be Python ints or size symbols; x[lo:hi] with a "
                                        "bound read from an array has a data-dependent shape, which cannot be "
                                        "traced; keep the full shape and mask it: i = np.arange(n); "
                                        "np.where((i >= lo) & (i < hi), x, 0), or reduce with "
                                        "np.sum(x, where=(i >= lo) & (i < hi))")
    step = 1 if s.step is None else s.step
    if not isinstance(step, (int, np.integer)) or step == 0:
        raise UnsupportedOperationError(op, f"slice step {s.step!r}: steps must be non-zero integers")
    bounds = [b for b in (s.start, s.stop) if b is not None]
    if extent.is_Integer and all(isinstance(b, (int, np.integer)) for b in bounds):
        start, stop, step = slice(s.start, s.stop, step).indices(int(extent))
        return sympy.Integer(start), step, sympy.Integer(len(range(start, stop, step)))

    def norm(v, default):
        if v is None:
            return default
        v = sympy.sympify(v)
        return extent + v if v.is_Integer and v < 0 else v

    if step > 0:
        start, stop = norm(s.start, sympy.Integer(0)), norm(s.stop, extent)
    else:
        start, stop = norm(s.start, extent - 1), norm(s.stop, sympy.Integer(-1))
    length = (stop - start) * step if abs(step) == 1 else sympy.ceiling((stop - start) / step)
    return start, step, sympy.expand(length)


def _mask_key(op: str, key):
    """The boolean mask of ``x[mask]`` / ``x[mask, ...]`` (None for other keys);
    a mask combined with other indices is refused with the where form."""
    items = list(key) if isinstance(key, tuple) else [key]
    items = [np.array(item) if isinstance(item, list) and item and all(isinstance(v, (bool, np.bool_)) for v in item)
             else item for item in items]   # x[[True, False, True]]
    masks = [k for k, item in enumerate(items) if is_mask(item)]
    if not masks:
        return None
    if masks != [0] or any(item is not Ellipsis for item in items[1:]):
        raise UnsupportedOperationError(op, "a boolean mask combined with other indices; " + MASK_HINT)
    return items[0]


@implements("getitem")
def getitem(arr: TracedArray, key):
    op = "getitem"
    mask = _mask_key(op, key)
    if mask is not None:
        return select(op, arr, mask)
    items = _expand_key(op, key, arr.ndim)
    if any(isinstance(item, MapValue) for item in items):
        if any(item is None or isinstance(item, slice) for item in items):
            raise UnsupportedOperationError(op, "inside an sd.map body, index every dimension with one "
                                            "index (a[i, j]); slices and None are not allowed there")
        return map_read(arr, _scalar_key(op, arr, items))
    if any(is_index_array(item) for item in items):
        return getitem_indirect(arr, items)
    old = placeholders(arr.ndim)
    new = iter(placeholders(len(items)))
    sub, shape, dim = {}, [], 0
    for item in items:
        if item is None:
            next(new)
            shape.append(sympy.Integer(1))
            continue
        extent = arr.sym_shape[dim]
        if isinstance(item, slice):
            start, step, length = _slice(op, item, extent)
            sub[old[dim]] = start + step * next(new)
            shape.append(length)
        else:
            sub[old[dim]] = _int_index(op, item, extent, dim)
        dim += 1
    index = tuple(e.xreplace(sub) for e in arr.index)
    scalar_copy = arr.ndim > 0 and not shape and all(item is not None for item in items)
    return arr.view(shape, index, scalar_copy=scalar_copy)


def _scalar_key(op: str, arr: TracedArray, items) -> tuple:
    return tuple(item if isinstance(item, MapValue) else _int_index(op, item, arr.sym_shape[d], d)
                 for d, item in enumerate(items))


@implements("setitem")
def setitem(arr: TracedArray, key, value) -> None:
    op = "setitem"
    mask = _mask_key(op, key)
    if mask is not None:
        store(arr, mask, value)
        return
    items = _expand_key(op, key, arr.ndim)
    if any(is_index_array(item) for item in items) and not any(isinstance(item, MapValue) for item in items):
        setitem_indirect(arr, items, value)
        return
    if isinstance(value, MapValue) or any(isinstance(item, MapValue) for item in items):
        if any(item is None or isinstance(item, slice) for item in items):
            raise UnsupportedOperationError(op, "inside an sd.map body, write one element (out[i, j] = v); "
                                            "slices are not allowed there")
        map_write(arr, _scalar_key(op, arr, items), value)
        return
    target = getitem(arr, key)
    if isinstance(value, TracedArray) and value.container == target.container and \
            value.index == target.index and value.sym_shape == target.sym_shape:
        return  # the store half of an in-place operator on a view: already written
    value = constant_operand(arr.trace, value)
    syms = domain_symbols(target.ndim)
    domain = tuple((s, 0, d) for s, d in zip(syms, target.sym_shape))
    convert = as_bool if target.dtype_name == "bool" else as_arith
    reads = {}
    if isinstance(value, TracedArray):
        if broadcast_shapes(op, value.sym_shape, target.sym_shape) != target.sym_shape:
            raise ShapeMismatchError(op, f"could not broadcast a value of shape {shape_str(value.sym_shape)} "
                                     f"into a region of shape {shape_str(target.sym_shape)}")
        body = convert(read(value, broadcast_index(value.sym_shape, target.sym_shape, syms), "x", reads),
                       value.dtype_name)
    else:
        body = convert(scalar_expr(value), result_dtype(arr.trace, [value], "arith"))
    write(op, target, syms, domain, body, reads)


@implements("inplace")
def inplace(arr: TracedArray, ufunc: np.ufunc, other):
    """``a op= b``: numpy updates ``a`` in place (and every view of it sees
    that), except that ``a[0]`` of a 1-d array is a scalar copy, whose updated
    value the enclosing ``a[0] op= b`` stores back.  Inside an sd.map body,
    ``s[0] += v`` accumulates, once per iteration also when ``v`` does not
    depend on the loop indices (a plain update there would run once)."""
    if isinstance(other, MapValue) or arr.trace.map_ranges:
        other = as_map_operand(arr.trace, other)
        if arr.ndim:
            raise UnsupportedOperationError("sd.map", f"an array of shape {arr.shape} is updated inside an "
                                            "sd.map body; update one element (out[i] += v)")
        current = map_read(arr, ())
        if ufunc in (np.add, np.subtract):
            result = current._accumulate(other, 1 if ufunc is np.add else -1)
        else:
            result = ufunc(current, other)
        if arr.scalar_copy:
            return result
        map_write(arr, (), result)
        return arr
    result = ufunc(arr, other)
    if arr.scalar_copy:
        return result
    arr[...] = result
    return arr


def _view_map(a: TracedArray, sub: dict) -> tuple:
    """``a``'s index map with its placeholders replaced by ``sub`` (simultaneously)."""
    return tuple(e.xreplace(sub) for e in a.index)


@implements(np.transpose)
def transpose(a, axes=None):
    axes = tuple(reversed(range(a.ndim))) if axes is None else tuple(axes)
    perm = normalize_axes("numpy.transpose", axes, a.ndim)
    if len(axes) != a.ndim or len(perm) != a.ndim:
        raise TraceIndexError("numpy.transpose", f"axes {axes} are not a permutation of {a.ndim} dimensions")
    axes = tuple(ax % a.ndim for ax in axes)
    old, new = placeholders(a.ndim), placeholders(a.ndim)
    sub = {old[axes[k]]: new[k] for k in range(a.ndim)}
    return a.view(tuple(a.sym_shape[ax] for ax in axes), _view_map(a, sub))


@implements(np.swapaxes)
def swapaxes(a, axis1, axis2):
    x, y = normalize_axes("numpy.swapaxes", axis1, a.ndim)[0], normalize_axes("numpy.swapaxes", axis2, a.ndim)[0]
    perm = list(range(a.ndim))
    perm[x], perm[y] = perm[y], perm[x]
    return transpose(a, perm)


@implements(np.moveaxis)
def moveaxis(a, source, destination):
    src = ordered_axes("numpy.moveaxis", source, a.ndim)
    dst = ordered_axes("numpy.moveaxis", destination, a.ndim)
    if len(src) != len(dst):
        raise TraceIndexError("numpy.moveaxis", "source and destination must have the same number of axes")
    perm = [k for k in range(a.ndim) if k not in src]
    for d, s in sorted(zip(dst, src)):
        perm.insert(d, s)
    return transpose(a, perm)


@implements(np.broadcast_to)
def broadcast_to(a, shape, subok=False):
    shape = tuple(sympy.sympify(s) for s in (shape if isinstance(shape, tuple) else (shape,)))
    if len(shape) < a.ndim or broadcast_shapes("numpy.broadcast_to", a.sym_shape, shape) != shape:
        raise ShapeMismatchError("numpy.broadcast_to", f"cannot broadcast shape {shape_str(a.sym_shape)} "
                                 f"to {shape_str(shape)}")
    old, new = placeholders(a.ndim), placeholders(len(shape))
    sub = dict(zip(old, broadcast_index(a.sym_shape, shape, new)))
    return a.view(shape, _view_map(a, sub), writable=False)


@implements(np.expand_dims)
def expand_dims(a, axis):
    ndim = a.ndim + (len(axis) if isinstance(axis, (tuple, list)) else 1)
    axes = normalize_axes("numpy.expand_dims", axis, ndim)
    key = []
    for k in range(ndim):
        key.append(None if k in axes else slice(None))
    return a[tuple(key)]


@implements(np.squeeze)
def squeeze(a, axis=None):
    axes = [k for k, d in enumerate(a.sym_shape) if same(d, 1)] if axis is None else \
        normalize_axes("numpy.squeeze", axis, a.ndim)
    for k in axes:
        if not same(a.sym_shape[k], 1):
            raise ShapeMismatchError("numpy.squeeze", f"axis {k} of shape {shape_str(a.sym_shape)} is not 1")
    return a[tuple(0 if k in axes else slice(None) for k in range(a.ndim))]


@implements(np.ndim)
def ndim(a):
    return a.ndim


@implements(np.shape)
def shape(a):
    return a.shape


@implements(np.size)
def size(a, axis=None):
    return a.size if axis is None else a.shape[axis]


def _reshape_groups(old: list, new: list):
    """Pair runs of old and new dims with equal products (split, merge or both);
    None when symbolic sizes prevent it."""
    groups, i, j = [], 0, 0
    while i < len(old) and j < len(new):
        gi, gj = [i], [j]
        po, pn = old[i], new[j]
        i, j = i + 1, j + 1
        while not same(po, pn):
            if not (po.is_Integer and pn.is_Integer):
                return None
            if po < pn and i < len(old):
                gi.append(i)
                po, i = po * old[i], i + 1
            elif pn < po and j < len(new):
                gj.append(j)
                pn, j = pn * new[j], j + 1
            else:
                return None
        groups.append((gi, gj))
    return groups if i == len(old) and j == len(new) else None


def _strides(a: TracedArray) -> list[sympy.Expr] | None:
    """Each view dimension's step through its container's C-order elements;
    None where the view's index map is not affine (a merged view)."""
    shape = a.trace.graph.containers[a.container].shape
    flat, step = sympy.Integer(0), sympy.Integer(1)
    for dim, e in reversed(list(zip(shape, a.index))):
        flat, step = flat + step * sympy.sympify(e), step * dim
    dims = placeholders(a.ndim)
    flat = sympy.expand(flat)
    if not dims:
        return []
    if not flat.is_polynomial(*dims) or sympy.Poly(flat, *dims).total_degree() > 1:
        return None
    return [flat.coeff(p) for p in dims]


def _merges_strided_dims(a: TracedArray, groups, old_pos: list[int]) -> bool:
    """numpy's reshape copies (rather than returning a view) when it merges
    dimensions that are not contiguous relative to each other, as those of
    ``A.T`` or ``A[:, :2]``; a write into the result then leaves ``A`` as is."""
    strides = _strides(a)
    if strides is None:
        return False
    dims = a.sym_shape
    return any(not same(strides[old_pos[k]], dims[old_pos[k + 1]] * strides[old_pos[k + 1]])
               for gi, _ in groups for k in gi[:-1])


@implements(np.reshape)
def reshape(a, shape=None, order="C", *, newshape=None, copy=None):
    """A view whose index map splits (affine) or merges (floor/Mod of the flat
    index) dimension runs, in C order; a copy where numpy's is one (merging
    dimensions that are not contiguous: ``_merges_strided_dims``)."""
    shape = newshape if shape is None else shape
    if order != "C":
        raise UnsupportedOperationError("numpy.reshape", f"order={order!r}: only C order is traceable")
    shape = [sympy.sympify(s) for s in (shape if isinstance(shape, (tuple, list)) else (shape,))]
    total = sympy.Mul(*a.sym_shape)
    if sum(s == -1 for s in shape) > 1:
        raise ShapeMismatchError("numpy.reshape", "can only specify one unknown dimension")
    if -1 in shape:
        known = sympy.Mul(*(s for s in shape if s != -1))
        shape[shape.index(-1)] = sympy.simplify(total / known)
    if not same(sympy.Mul(*shape), total) or any(s.is_integer is False for s in shape):
        raise ShapeMismatchError("numpy.reshape", f"cannot reshape an array of shape {shape_str(a.sym_shape)} "
                                 f"into shape {shape_str(shape)}")
    old_pos = [k for k, d in enumerate(a.sym_shape) if not same(d, 1)]
    new_pos = [k for k, d in enumerate(shape) if not same(d, 1)]
    old_dims = [a.sym_shape[k] for k in old_pos]
    new_dims = [shape[k] for k in new_pos]
    groups = _reshape_groups(old_dims, new_dims) or [(list(range(len(old_dims))), list(range(len(new_dims))))]
    if _merges_strided_dims(a, groups, old_pos):
        a = copy_array(a)
    old_ph, new_ph = placeholders(a.ndim), placeholders(len(shape))
    sub = {old_ph[k]: sympy.Integer(0) for k, d in enumerate(a.sym_shape) if same(d, 1)}
    for gi, gj in groups:
        flat = sympy.Integer(0)
        for j in gj:
            flat = flat * new_dims[j] + new_ph[new_pos[j]]
        stride = sympy.Integer(1)
        for i in reversed(gi):
            value = flat if len(gi) == 1 else sympy.floor(flat / stride)
            if i != gi[0]:
                value = sympy.Mod(value, old_dims[i])
            sub[old_ph[old_pos[i]]] = value
            stride = stride * old_dims[i]
    return a.view(tuple(shape), _view_map(a, sub))


@implements(np.ravel)
def ravel(a, order="C"):
    return reshape(a, -1, order)


@implements(np.concatenate)
def concatenate(arrays, axis=0, out=None, dtype=None, casting=None):
    """Each part is copied into its own region of a fresh array (disjoint writes)."""
    if out is not None or dtype is not None:
        raise UnsupportedOperationError("numpy.concatenate", "out= and dtype= are not supported")
    arrays = list(arrays)
    if not arrays or not all(isinstance(x, TracedArray) for x in arrays):
        raise UnsupportedOperationError("numpy.concatenate", "needs a non-empty sequence of traced arrays")
    first = arrays[0]
    if first.ndim == 0:
        raise ShapeMismatchError("numpy.concatenate", "zero-dimensional arrays cannot be concatenated")
    axis = normalize_axes("numpy.concatenate", axis, first.ndim)[0]
    for x in arrays[1:]:
        if x.ndim != first.ndim or any(not same(p, q) for k, (p, q) in enumerate(zip(x.sym_shape, first.sym_shape))
                                       if k != axis):
            raise ShapeMismatchError("numpy.concatenate", f"shapes {shape_str(first.sym_shape)} and "
                                     f"{shape_str(x.sym_shape)} differ outside axis {axis}")
    shape = list(first.sym_shape)
    shape[axis] = sympy.Add(*(x.sym_shape[axis] for x in arrays))
    out = new_array(first.trace, shape, result_dtype(first.trace, arrays, "same"),
                    "concatenate")
    offset = sympy.Integer(0)
    for x in arrays:
        region = out.view(x.sym_shape, tuple(p + (offset if k == axis else 0)
                                             for k, p in enumerate(placeholders(first.ndim))))
        syms = domain_symbols(x.ndim)
        reads = {}
        body = read(x, syms, "x", reads)
        write("concatenate", region, syms, tuple((s, 0, d) for s, d in zip(syms, x.sym_shape)),
              as_arith(body, x.dtype_name) if out.dtype_name != "bool" else body, reads, disjoint=True)
        offset = offset + x.sym_shape[axis]
    return out


@implements(np.stack)
def stack(arrays, axis=0, out=None, dtype=None, casting=None):
    arrays = list(arrays)
    if not arrays or not all(isinstance(x, TracedArray) for x in arrays):
        raise UnsupportedOperationError("numpy.stack", "needs a non-empty sequence of traced arrays")
    for x in arrays[1:]:
        if x.sym_shape != arrays[0].sym_shape:
            raise ShapeMismatchError("numpy.stack", f"all arrays must have one shape: "
                                     f"{shape_str(arrays[0].sym_shape)} and {shape_str(x.sym_shape)}")
    axis = normalize_axes("numpy.stack", axis, arrays[0].ndim + 1)[0]
    return concatenate([expand_dims(x, axis) for x in arrays], axis, out, dtype)
