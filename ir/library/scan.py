"""Scans as library ops: ``scan.add`` (cumsum), ``scan.multiply`` (cumprod)
and ``scan.linear``, the first-order linear recurrence their derivatives
need.  Each works along one ``axis`` of a whole container, forward or
``reverse`` (from the last element back), and does O(n) work: as tasklets a
scan is a triangular O(n^2) sum, so it is one opaque node instead, which
``lowering.library_kernels.scans`` runs as a loop per line on the CPU device
and as a parallel prefix in workgroups on GPU targets.

* ``scan.add``:      ``y_i = y_{i-1} + x_i``
* ``scan.multiply``: ``y_i = y_{i-1} * x_i``
* ``scan.linear``:   ``y_i = a_i y_{i-1} + b_i`` with ``y_{-1} = 0``

(``i - 1`` is ``i + 1`` for a reverse scan, ``y_n = 0``.)  Rules, in the scan's
direction, with ``prev(v)`` the exclusive shift (``v_{i-1}``, a given fill at
the first element) and ``next(v)`` the shift the other way:

* add: linear, so its JVP is the cumsum of the tangent and its VJP the
  reversed cumsum of the cotangent;
* multiply, without dividing by ``x`` (JAX's gradient at zeros): the product
  rule ``dy_i = x_i dy_{i-1} + dx_i y_{i-1}`` is a linear scan, and the VJP is
  ``x_bar = prev(y, 1) * r`` with ``r_i = ct_i + x_{i+1} r_{i+1}``, a reversed
  linear scan;
* linear: ``dy = linear(a, da * prev(y) + db)``; ``b_bar = lam``,
  ``a_bar = lam * prev(y)`` with ``lam = linear(next(a), ct)`` reversed.

Every rule is scans and elementwise tasklets, so gradients of gradients go
through them.  Integer scans (int32) keep their dtype.
"""
from __future__ import annotations

import numpy as np
import sympy

from ..tracer.emit import domain_symbols, new_array, read, same, shape_str, write
from ..tracer.errors import ShapeMismatchError, TraceIndexError
from ..tracer.traced_array import TracedArray
from .emit import call
from .registry import LibraryOp, register

ADD, MULTIPLY, LINEAR = "scan.add", "scan.multiply", "scan.linear"


def _shapes(op: str, arity: int):
    def shapes(specs, params):
        (shape, dtype) = specs[0]
        axis = params["axis"]
        if not 0 <= axis < len(shape):
            raise TraceIndexError(op, f"axis {axis} is out of range for an array of shape {shape_str(shape)}")
        for other, other_dtype in specs[1:arity]:
            if len(other) != len(shape) or not all(same(p, q) for p, q in zip(other, shape)) or other_dtype != dtype:
                raise ShapeMismatchError(op, f"a and b must have one shape and dtype; got {dtype}{shape_str(shape)} "
                                             f"and {other_dtype}{shape_str(other)}")
        return [(shape, dtype)]
    return shapes


def _oriented(x: np.ndarray, axis: int, reverse: bool) -> np.ndarray:
    """``x`` with the scan's axis last, in the scan's order (a view)."""
    x = np.moveaxis(x, axis, -1)
    return x[..., ::-1] if reverse else x


def _restored(y: np.ndarray, axis: int, reverse: bool) -> np.ndarray:
    return np.moveaxis(y[..., ::-1] if reverse else y, -1, axis)


def _wide(dtype: np.dtype) -> np.dtype:
    """What a scan of ``dtype`` accumulates in: float64 for floats, so a long
    float32 line's results are their own rounding, not a running sum's drift
    (as the device kernels, ``lowering.library_kernels.scans``)."""
    return np.dtype(np.float64) if dtype.kind == "f" else dtype


def _add_numpy(x: np.ndarray, axis: int, reverse: bool = False) -> tuple:
    y = np.cumsum(_oriented(x, axis, reverse), -1, dtype=_wide(x.dtype))
    return (_restored(y, axis, reverse).astype(x.dtype),)


def _multiply_numpy(x: np.ndarray, axis: int, reverse: bool = False) -> tuple:
    y = np.cumprod(_oriented(x, axis, reverse), -1, dtype=_wide(x.dtype))
    return (_restored(y, axis, reverse).astype(x.dtype),)


def _linear_numpy(a: np.ndarray, b: np.ndarray, axis: int, reverse: bool = False) -> tuple:
    """By recursive doubling: log2(n) vectorised steps, each combining every
    element's (a, b) with the one ``d`` before it.  O(n log n) operations, but
    whole-array ones (numpy has no recurrence); the device kernels do O(n)."""
    acc_a = _oriented(a, axis, reverse).astype(_wide(a.dtype))
    acc_b = _oriented(b, axis, reverse).astype(_wide(b.dtype))
    n, d = acc_a.shape[-1], 1
    while d < n:
        acc_b[..., d:] = acc_a[..., d:] * acc_b[..., :-d] + acc_b[..., d:]
        acc_a[..., d:] = acc_a[..., d:] * acc_a[..., :-d]
        d *= 2
    return (_restored(acc_b, axis, reverse).astype(b.dtype),)


def shifted(x: TracedArray, axis: int, fill: float, reverse: bool) -> TracedArray:
    """``x`` moved one step along ``axis`` in the scan's direction: element
    ``i`` holds ``x[i - 1]`` (``x[i + 1]`` for ``reverse``) and the first
    (last) element ``fill``: one elementwise tasklet, its read clamped into
    the array."""
    syms = domain_symbols(x.ndim)
    n = x.sym_shape[axis]
    k = syms[axis]
    source = sympy.Min(k + 1, n - 1) if reverse else sympy.Max(k - 1, 0)
    edge = sympy.Eq(k, n - 1) if reverse else sympy.Eq(k, 0)
    out = new_array(x.trace, x.sym_shape, x.dtype_name, "shifted")
    reads = {}
    value = read(x, syms[:axis] + (source,) + syms[axis + 1:], "x", reads)
    write("shift", out, syms, tuple((s, 0, d) for s, d in zip(syms, x.sym_shape)),
          sympy.Piecewise((fill, edge), (value, True)), reads)
    return out


def cumulative_sum(x, axis: int, reverse: bool = False):
    return call(ADD, x, axis=int(axis), reverse=bool(reverse))


def cumulative_product(x, axis: int, reverse: bool = False):
    return call(MULTIPLY, x, axis=int(axis), reverse=bool(reverse))


def linear_recurrence(a, b, axis: int, reverse: bool = False):
    """``y_i = a_i y_{i-1} + b_i`` along ``axis`` (``y_{i+1}`` for ``reverse``), ``y`` zero before the first."""
    return call(LINEAR, a, b, axis=int(axis), reverse=bool(reverse))


def _add_jvp(params, inputs, outputs, tangents):
    (dx,) = tangents
    return [None if dx is None else cumulative_sum(dx, params["axis"], params["reverse"])]


def _add_vjp(params, inputs, outputs, cotangents):
    (ct,) = cotangents
    return [None if ct is None else cumulative_sum(ct, params["axis"], not params["reverse"])]


def _multiply_jvp(params, inputs, outputs, tangents):
    (dx,), (x,), (y,) = tangents, inputs, outputs
    if dx is None:
        return [None]
    axis, reverse = params["axis"], params["reverse"]
    return [linear_recurrence(x, dx * shifted(y, axis, 1, reverse), axis, reverse)]


def _multiply_vjp(params, inputs, outputs, cotangents):
    (ct,), (x,), (y,) = cotangents, inputs, outputs
    if ct is None:
        return [None]
    axis, reverse = params["axis"], params["reverse"]
    r = linear_recurrence(shifted(x, axis, 0, not reverse), ct, axis, not reverse)
    return [shifted(y, axis, 1, reverse) * r]


def _linear_jvp(params, inputs, outputs, tangents):
    (a, _), (y,), (da, db) = inputs, outputs, tangents
    axis, reverse = params["axis"], params["reverse"]
    terms = [t for t in (None if da is None else da * shifted(y, axis, 0, reverse), db) if t is not None]
    if not terms:
        return [None]
    return [linear_recurrence(a, terms[0] if len(terms) == 1 else terms[0] + terms[1], axis, reverse)]


def _linear_vjp(params, inputs, outputs, cotangents):
    (a, _), (y,), (ct,) = inputs, outputs, cotangents
    if ct is None:
        return [None, None]
    axis, reverse = params["axis"], params["reverse"]
    lam = linear_recurrence(shifted(a, axis, 0, not reverse), ct, axis, not reverse)
    return [lam * shifted(y, axis, 0, reverse), lam]


SCAN_ADD = register(LibraryOp(ADD, _shapes(ADD, 1), _add_numpy, _add_vjp, _add_jvp, integers=True,
                              doc="y_i = y_{i-1} + x_i along axis (cumsum)"))
SCAN_MULTIPLY = register(LibraryOp(MULTIPLY, _shapes(MULTIPLY, 1), _multiply_numpy, _multiply_vjp, _multiply_jvp,
                                   integers=True, doc="y_i = y_{i-1} * x_i along axis (cumprod)"))
SCAN_LINEAR = register(LibraryOp(LINEAR, _shapes(LINEAR, 2), _linear_numpy, _linear_vjp, _linear_jvp,
                                 doc="y_i = a_i y_{i-1} + b_i along axis, y zero before the first element"))
