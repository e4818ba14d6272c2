"""Index reshuffles as index maps: roll, flip, rot90, pad (every mode but
constant), tile, repeat, diagonal, atleast_*d, the splits, broadcast_arrays,
meshgrid.

Each result is a view whose index map says which element of the input an
element reads (``Mod`` for roll, tile and wrap, ``Min``/``Max`` for edge,
``Abs`` of a ``Mod`` for the reflections): no tasklet and no copy; the reverse
pass turns a read into an accumulation, so an element read several times
(tile, edge) gets the sum of its cotangents.  Where numpy's result is a copy
the view is read-only, and a write into it asks for ``.copy()``; where numpy's
is a view (flip, rot90, splits, atleast_*d) it is writable like its input.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import sympy

from .dispatch import implements
from .emit import broadcast_shapes, same, shape_str
from .errors import ShapeMismatchError, TraceIndexError, UnsupportedOperationError
from .indexing import broadcast_to, reshape, swapaxes
from .reductions import normalize_axes, ordered_axes
from .traced_array import TracedArray, placeholders

IndexMap = Callable[[tuple], tuple]


def remap(a: TracedArray, shape: Sequence, source: IndexMap, copy_of: str | None) -> TracedArray:
    """The view of ``a`` with ``shape`` whose element ``v`` is ``a[source(v)]``;
    ``copy_of`` names the numpy function whose result is a copy (the view is
    then read-only), None where numpy's result is a view too."""
    shape = tuple(sympy.sympify(d) for d in shape)
    index = a.container_index(source(placeholders(len(shape))))
    return a.view(shape, index, writable=f"the result of {copy_of}" if copy_of else None)


def along(a: TracedArray, axis: int, extent, position: Callable[[sympy.Expr], sympy.Expr],
          copy_of: str | None) -> TracedArray:
    """``remap`` changing one axis: its new ``extent``, and which input
    position new position ``v`` reads."""
    shape = list(a.sym_shape)
    shape[axis] = extent
    return remap(a, shape, lambda v: v[:axis] + (position(v[axis]),) + v[axis + 1:], copy_of)


def _traced(op: str, a) -> TracedArray:
    if not isinstance(a, TracedArray):
        raise UnsupportedOperationError(op, "needs a traced array (not a value inside an sd.map body)")
    return a


def _int(op: str, value, what: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise UnsupportedOperationError(op, f"{what} must be a Python int, not {type(value).__name__} "
                                        "(a traced value cannot change a shape or an index map)")
    return int(value)


@implements(np.roll)
def roll(a, shift, axis=None):
    op = "numpy.roll"
    a = _traced(op, a)
    if axis is None:
        return reshape(roll(reshape(a, -1), shift, 0), a.sym_shape)
    shifts = shift if isinstance(shift, (tuple, list)) else (shift,)
    axes = ordered_axes(op, axis, a.ndim) if not isinstance(axis, (tuple, list)) or len(set(axis)) == len(axis) \
        else tuple(ordered_axes(op, ax, a.ndim)[0] for ax in axis)   # numpy allows an axis twice: shifts add
    if len(shifts) == 1:
        shifts = shifts * len(axes)
    if len(axes) == 1 and len(shifts) > 1:
        axes = axes * len(shifts)
    if len(shifts) != len(axes):
        raise ShapeMismatchError(op, f"shift {shift} and axis {axis} do not broadcast")
    total = {ax: 0 for ax in axes}
    for ax, s in zip(axes, shifts):
        total[ax] += _int(op, s, "shift")
    out = a
    for ax, s in total.items():
        n = a.sym_shape[ax]
        if not same(n, 0):
            out = along(out, ax, n, lambda v, n=n, s=s: sympy.Mod(v - s, n), op)
    return out if out is not a else remap(a, a.sym_shape, lambda v: v, op)


@implements(np.flip)
def flip(m, axis=None):
    out = _traced("numpy.flip", m)
    for ax in normalize_axes("numpy.flip", axis, out.ndim):
        n = out.sym_shape[ax]
        out = along(out, ax, n, lambda v, n=n: n - 1 - v, None)
    return out


@implements(np.fliplr)
def fliplr(m):
    if _traced("numpy.fliplr", m).ndim < 2:
        raise ShapeMismatchError("numpy.fliplr", "needs an array of at least 2 dimensions")
    return flip(m, 1)


@implements(np.flipud)
def flipud(m):
    if _traced("numpy.flipud", m).ndim < 1:
        raise ShapeMismatchError("numpy.flipud", "needs an array of at least 1 dimension")
    return flip(m, 0)


@implements(np.rot90)
def rot90(m, k=1, axes=(0, 1)):
    op = "numpy.rot90"
    m = _traced(op, m)
    if len(axes) != 2 or m.ndim < 2:
        raise ShapeMismatchError(op, "needs two axes of an array of at least 2 dimensions")
    first, second = ordered_axes(op, axes, m.ndim)
    k = _int(op, k, "k") % 4
    if k == 0:
        return m
    if k == 2:
        return flip(m, (first, second))
    return swapaxes(flip(m, second), first, second) if k == 1 else flip(swapaxes(m, first, second), second)


def _pad_widths(op: str, pad_width, ndim: int) -> list[tuple[int, int]]:
    """numpy's pad_width forms (n, (n,), (before, after), one pair per axis) as one pair per axis."""
    widths = np.asarray(pad_width)
    if widths.dtype.kind not in "iu" or widths.ndim > 2:
        raise UnsupportedOperationError(op, f"pad_width {pad_width!r} must be Python ints (one, a pair, or a "
                                        "pair per axis)")
    try:
        widths = np.broadcast_to(widths, (ndim, 2))
    except ValueError:
        raise ShapeMismatchError(op, f"pad_width {pad_width!r} does not fit {ndim} dimensions") from None
    if (widths < 0).any():
        raise ShapeMismatchError(op, "pad widths must be non-negative")
    return [(int(b), int(e)) for b, e in widths]


def _reflect(n: sympy.Expr, i: sympy.Expr) -> sympy.Expr:
    """Mirror about the edge elements (period 2n - 2): numpy's 'reflect'."""
    return n - 1 - sympy.Abs(sympy.Mod(i, 2 * n - 2) - (n - 1))


def _symmetric(n: sympy.Expr, i: sympy.Expr) -> sympy.Expr:
    """Mirror with the edge elements repeated (period 2n): numpy's 'symmetric'."""
    j = sympy.Mod(i, 2 * n)
    return sympy.Min(j, 2 * n - 1 - j)


_PAD_MODES: dict[str, Callable[[sympy.Expr, sympy.Expr], sympy.Expr]] = {
    "edge": lambda n, i: sympy.Min(sympy.Max(i, 0), n - 1),
    "wrap": lambda n, i: sympy.Mod(i, n),
    "reflect": _reflect,
    "symmetric": _symmetric,
}


@implements(np.pad)
def pad(array, pad_width, mode="constant", **kwargs):
    """'constant' writes the input into a filled array (its border is new
    values); the other modes read the input through an index map."""
    op = "numpy.pad"
    a = _traced(op, array)
    widths = _pad_widths(op, pad_width, a.ndim)
    if mode == "constant":
        return _pad_constant(a, widths, kwargs)
    if mode not in _PAD_MODES or kwargs:
        raise UnsupportedOperationError(op, f"mode={mode!r} with {sorted(kwargs)}: supported are the modes "
                                        f"constant (constant_values a number), {', '.join(_PAD_MODES)}")
    out = a
    for ax, (before, after) in enumerate(widths):
        n = a.sym_shape[ax]
        if before == after == 0:
            continue
        if same(n, 0) or (mode == "reflect" and same(n, 1)):
            if same(n, 0):
                raise ShapeMismatchError(op, f"can't extend empty axis {ax} using modes other than 'constant'")
            index = lambda n, i: sympy.Integer(0)  # noqa: E731 (numpy repeats a lone element)
        else:
            index = _PAD_MODES[mode]
        out = along(out, ax, n + before + after, lambda v, n=n, b=before, f=index: f(n, v - b), op)
    return out if out is not a else remap(a, a.sym_shape, lambda v: v, op)


def _pad_constant(a: TracedArray, widths: list[tuple[int, int]], kwargs: dict) -> TracedArray:
    from .creation import full
    value = kwargs.pop("constant_values", 0)
    if kwargs or isinstance(value, (tuple, list, np.ndarray)) or isinstance(value, TracedArray):
        raise UnsupportedOperationError("numpy.pad", "mode='constant' takes one number as constant_values")
    shape = tuple(d + b + e for d, (b, e) in zip(a.sym_shape, widths))
    out = full(a.trace, shape, value, a.dtype)
    out[tuple(slice(b, b + d) for d, (b, _) in zip(a.sym_shape, widths))] = a
    return out


@implements(np.tile)
def tile(A, reps):
    op = "numpy.tile"
    a = _traced(op, A)
    reps = tuple(_int(op, r, "reps") for r in (reps if isinstance(reps, (tuple, list)) else (reps,)))
    ndim = max(a.ndim, len(reps))
    a = reshape(a, (1,) * (ndim - a.ndim) + a.sym_shape) if ndim > a.ndim else a
    reps = (1,) * (ndim - len(reps)) + reps
    shape = tuple(d * r for d, r in zip(a.sym_shape, reps))
    return remap(a, shape, lambda v: tuple(sympy.Mod(p, d) if r > 1 and not same(d, 1) else
                                           (0 if r > 1 else p) for p, d, r in zip(v, a.sym_shape, reps)), op)


@implements(np.repeat)
def repeat(a, repeats, axis=None):
    """Equal repeats read ``floor(v / r)``; a list of counts reads the block
    ``v`` falls in (a select over the cumulative counts)."""
    op = "numpy.repeat"
    a = _traced(op, a)
    if axis is None:
        a, axis = reshape(a, -1), 0
    axis = ordered_axes(op, axis, a.ndim)[0]
    counts = np.asarray(0.5 if isinstance(repeats, TracedArray) else repeats)
    if counts.dtype.kind not in "iu" or counts.ndim > 1:
        raise UnsupportedOperationError(op, "repeats must be Python ints (a traced count would make the "
                                        "shape data-dependent)")
    n = a.sym_shape[axis]
    if counts.ndim == 0 or counts.size == 1:
        r = int(counts.reshape(-1)[0])
        return along(a, axis, n * r, lambda v: sympy.floor(v / r) if r > 1 else v, op)
    if not n.is_Integer or counts.size != int(n):
        raise ShapeMismatchError(op, f"{counts.size} repeats for an axis of size {n}")
    ends = np.cumsum(counts)

    def position(v):
        pieces = [(k, sympy.Lt(v, int(e))) for k, e in enumerate(ends[:-1]) if counts[k] > 0]
        return sympy.Piecewise(*pieces, (len(ends) - 1, True)) if pieces else sympy.Integer(len(ends) - 1)
    return along(a, axis, int(ends[-1]), position, op)


def _diagonal_view(a: TracedArray, offset: int, axis1: int, axis2: int, copy_of: str | None) -> TracedArray:
    """numpy's diagonal: axis1 and axis2 removed, the diagonal appended last."""
    n1, n2 = a.sym_shape[axis1], a.sym_shape[axis2]
    length = sympy.Max(0, sympy.Min(n1 + sympy.Min(offset, 0), n2 - sympy.Max(offset, 0)))
    rest = [k for k in range(a.ndim) if k not in (axis1, axis2)]

    def source(v):
        index = [None] * a.ndim
        for k, p in zip(rest, v[:-1]):
            index[k] = p
        index[axis1] = v[-1] + max(-offset, 0)
        index[axis2] = v[-1] + max(offset, 0)
        return tuple(index)
    return remap(a, [a.sym_shape[k] for k in rest] + [length], source, copy_of)


@implements(np.diagonal)
def diagonal(a, offset=0, axis1=0, axis2=1):
    op = "numpy.diagonal"
    a = _traced(op, a)
    if a.ndim < 2:
        raise ShapeMismatchError(op, "needs an array of at least 2 dimensions")
    axis1, axis2 = (ordered_axes(op, ax, a.ndim)[0] for ax in (axis1, axis2))
    if axis1 == axis2:
        raise TraceIndexError(op, "axis1 and axis2 cannot be the same")
    return _diagonal_view(a, _int(op, offset, "offset"), axis1, axis2, op)


@implements(np.diag)
def diag(v, k=0):
    """A 2-d input's diagonal (a view); a 1-d input on the diagonal of a
    square array of zeros (one tasklet writing the diagonal, as np.eye)."""
    op = "numpy.diag"
    v = _traced(op, v)
    k = _int(op, k, "k")
    if v.ndim == 2:
        return _diagonal_view(v, k, 0, 1, op)
    if v.ndim != 1:
        raise ShapeMismatchError(op, f"needs a 1-d or 2-d array, not shape {shape_str(v.sym_shape)}")
    from .creation import zeros
    n = v.sym_shape[0] + abs(k)
    out = zeros(v.trace, (n, n), v.dtype)
    _diagonal_view(out, k, 0, 1, None)[...] = v
    return out


@implements(np.diagflat)
def diagflat(v, k=0):
    return diag(reshape(_traced("numpy.diagflat", v), -1), k)


@implements(np.trace)
def trace(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    if out is not None:
        raise UnsupportedOperationError("numpy.trace", "out= is not supported")
    return np.sum(diagonal(a, offset, axis1, axis2), axis=-1, dtype=dtype)


def _triangle(op: str, m, k, keep: Callable[[sympy.Expr, sympy.Expr], sympy.Basic]):
    """numpy's triu/tril: the last two axes' elements where ``keep(j - i, k)``, zeros elsewhere."""
    from .elementwise import apply, as_arith
    m = _traced(op, m)
    if m.ndim < 2:  # numpy treats a 1-d input as a row broadcast down a square
        n = m.sym_shape[0]
        m = broadcast_to(m, (n, n))
    k = _int(op, k, "k")
    mask = _index_condition(m, lambda i, j: keep(j - i, k))
    return apply(op, lambda x, c: sympy.Piecewise((x, c), (0, True)), [m, mask], m.dtype_name,
                 [as_arith, lambda e, _: e])


def _index_condition(m: TracedArray, condition: Callable[[sympy.Expr, sympy.Expr], sympy.Basic]) -> TracedArray:
    """A bool array over ``m``'s last two axes: ``condition(row, column)``."""
    from .emit import domain_symbols, new_array, write
    rows, cols = m.sym_shape[-2:]
    out = new_array(m.trace, (rows, cols), "bool", "mask")
    i, j = domain_symbols(2)
    write("mask", out, (i, j), ((i, 0, rows), (j, 0, cols)), condition(i, j), {})
    return out


@implements(np.triu)
def triu(m, k=0):
    return _triangle("numpy.triu", m, k, sympy.Ge)


@implements(np.tril)
def tril(m, k=0):
    return _triangle("numpy.tril", m, k, lambda d, k: sympy.Le(d, k))


def _at_least(op: str, arys, ndim: int, place: Callable[[tuple], tuple]):
    """atleast_{ndim}d: each input of fewer dimensions reshaped by ``place``
    (its shape to the padded shape; a view); one input gives one array."""
    from .elementwise import constant_operand
    out = []
    for x in arys:
        if not isinstance(x, TracedArray):
            x = constant_operand(_first_trace(op, arys), np.atleast_1d(x))
        out.append(x if x.ndim >= ndim else reshape(x, place(x.sym_shape)))
    return out[0] if len(out) == 1 else tuple(out)


def _first_trace(op: str, values):
    for x in values:
        if isinstance(x, TracedArray):
            return x.trace
    raise UnsupportedOperationError(op, "needs a traced array")


@implements(np.atleast_1d)
def atleast_1d(*arys):
    return _at_least("numpy.atleast_1d", arys, 1, lambda s: (1,))


@implements(np.atleast_2d)
def atleast_2d(*arys):
    return _at_least("numpy.atleast_2d", arys, 2, lambda s: (1,) * (2 - len(s)) + s)


@implements(np.atleast_3d)
def atleast_3d(*arys):
    return _at_least("numpy.atleast_3d", arys, 3, lambda s: {0: (1, 1, 1), 1: (1,) + s + (1,)}.get(len(s), s + (1,)))


@implements(np.broadcast_arrays)
def broadcast_arrays(*args, subok=False):
    shape = broadcast_shapes("numpy.broadcast_arrays", *(_traced("numpy.broadcast_arrays", x).sym_shape
                                                           for x in args))
    return tuple(broadcast_to(x, shape) for x in args)


@implements(np.meshgrid)
def meshgrid(*xi, copy=True, sparse=False, indexing="xy"):
    """Each 1-d input along its own axis of the grid (the first two swapped
    for 'xy'), broadcast to the full grid unless sparse."""
    op = "numpy.meshgrid"
    if indexing not in ("xy", "ij"):
        raise UnsupportedOperationError(op, f"indexing={indexing!r}: 'xy' or 'ij'")
    flat = [reshape(_traced(op, x), -1) for x in xi]
    n = len(flat)
    axes = list(range(n))
    if indexing == "xy" and n > 1:
        axes[0], axes[1] = 1, 0
    parts = [reshape(x, tuple(x.sym_shape[0] if k == ax else 1 for k in range(n))) for x, ax in zip(flat, axes)]
    if sparse:
        return tuple(parts)
    shape = broadcast_shapes(op, *(p.sym_shape for p in parts))
    return tuple(broadcast_to(p, shape) for p in parts)


def _split_sizes(op: str, ary: TracedArray, indices_or_sections, axis: int, equal: bool) -> list[tuple]:
    """``(start, stop)`` of each part along ``axis``: numpy's section count
    (equal parts for split, as even as possible for array_split) or split points."""
    n = ary.sym_shape[axis]
    if not n.is_Integer:
        raise UnsupportedOperationError(op, f"splitting a symbolic axis of size {n}")
    n = int(n)
    if isinstance(indices_or_sections, (int, np.integer)) and not isinstance(indices_or_sections, bool):
        parts = int(indices_or_sections)
        if parts <= 0:
            raise ShapeMismatchError(op, "number of sections must be larger than 0")
        if equal and n % parts:
            raise ShapeMismatchError(op, f"array split does not result in an equal division ({n} into {parts})")
        size, extra = divmod(n, parts)
        bounds = np.cumsum([0] + [size + 1] * extra + [size] * (parts - extra))
    else:
        points = [_int(op, p, "split index") for p in indices_or_sections]
        bounds = [0] + [min(max(p + n if p < 0 else p, 0), n) for p in points] + [n]
    return [(int(b), max(int(b), int(e))) for b, e in zip(bounds[:-1], bounds[1:])]


def _split(op: str, ary, indices_or_sections, axis: int, equal: bool) -> list[TracedArray]:
    ary = _traced(op, ary)
    axis = ordered_axes(op, axis, ary.ndim)[0]
    return [ary[(slice(None),) * axis + (slice(b, e),)]
            for b, e in _split_sizes(op, ary, indices_or_sections, axis, equal)]


@implements(np.split)
def split(ary, indices_or_sections, axis=0):
    return _split("numpy.split", ary, indices_or_sections, axis, True)


@implements(np.array_split)
def array_split(ary, indices_or_sections, axis=0):
    return _split("numpy.array_split", ary, indices_or_sections, axis, False)


@implements(np.hsplit)
def hsplit(ary, indices_or_sections):
    ary = _traced("numpy.hsplit", ary)
    return _split("numpy.hsplit", ary, indices_or_sections, 1 if ary.ndim > 1 else 0, True)


@implements(np.vsplit)
def vsplit(ary, indices_or_sections):
    if _traced("numpy.vsplit", ary).ndim < 2:
        raise ShapeMismatchError("numpy.vsplit", "needs an array of at least 2 dimensions")
    return _split("numpy.vsplit", ary, indices_or_sections, 0, True)


@implements(np.dsplit)
def dsplit(ary, indices_or_sections):
    if _traced("numpy.dsplit", ary).ndim < 3:
        raise ShapeMismatchError("numpy.dsplit", "needs an array of at least 3 dimensions")
    return _split("numpy.dsplit", ary, indices_or_sections, 2, True)
