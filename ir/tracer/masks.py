"""Boolean masks: ``x[mask]`` and ``x[mask] = v`` without data-dependent shapes.

numpy's ``x[mask]`` has one element per true entry, a length known only when
the program runs, which no container of the graph can have.  Most programs
use it in two ways that need no such length, and both are rewritten as
``where``:

* a selection read inside a reduction (``np.sum(x[mask])``,
  ``x[mask].mean()``, ``np.max(x[mask] * w[mask], initial=0)``) is the same
  reduction of ``x`` with ``where=mask``;
* a store ``x[mask] = v`` (and ``x[mask] += v``) is ``x[...] = np.where(mask, v, x)``.

``x[mask]`` therefore makes a ``Selection``: the full-shape values plus the
mask.  Elementwise ufuncs of selections with the same mask (and of scalars)
stay selections; the reductions accept them (``accepts_selection``); anything
else would need the data-dependent shape and is refused with a message that
shows the ``where`` form.
"""
from __future__ import annotations

import functools
import inspect
from typing import Callable

import numpy as np

from .errors import UnsupportedOperationError
from .traced_array import TracedArray

HINT = ("x[mask] has a data-dependent shape, which cannot be traced; keep the full shape and mask it: "
         "np.where(mask, x, 0), a reduction with where=mask (np.sum(x, where=mask), np.max(x, where=mask, "
         "initial=-np.inf)), or reduce the selection directly (np.sum(x[mask]), x[mask].mean())")


def is_mask(item) -> bool:
    """A traced or numpy bool array used as an index (a Python bool is numpy's 0-d form, not a mask)."""
    return (isinstance(item, TracedArray) and item.dtype_name == "bool" and item.ndim > 0) or \
        (isinstance(item, np.ndarray) and item.dtype == bool and item.ndim > 0)


def _same_mask(a, b) -> bool:
    if a is b:
        return True
    return isinstance(a, TracedArray) and isinstance(b, TracedArray) and \
        (a.container, a.index, a.sym_shape) == (b.container, b.index, b.sym_shape)


def _as_traced_mask(op: str, source: TracedArray, mask) -> TracedArray:
    """The mask as a traced bool array, checked against the leading dims of ``source``."""
    if isinstance(mask, np.ndarray):
        from .creation import constant
        mask = constant(source.trace, mask, op)
    lead = source.sym_shape[:mask.ndim]
    if mask.ndim > source.ndim or any(d != e for d, e in zip(mask.sym_shape, lead)):
        raise UnsupportedOperationError(op, f"a boolean index of shape {mask.shape} must match the leading "
                                        f"dimensions of the array, shape {source.shape}")
    return mask


class Selection:
    """``source[mask]``, kept at ``source``'s shape (see the module docstring)."""

    _handles_numpy_first = True   # traced arrays defer numpy calls with a selection among the operands to it

    def __init__(self, source: TracedArray, mask: TracedArray):
        self.source = source
        self.mask = mask

    @property
    def trace(self):
        return self.source.trace

    def full_mask(self) -> TracedArray:
        """The mask broadcast over the source's trailing dims."""
        return np.broadcast_to(self.mask[(...,) + (None,) * (self.source.ndim - self.mask.ndim)],
                               self.source.shape)

    # -- numpy protocol: elementwise stays a selection, reductions take it, the rest is refused
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__" or kwargs:
            raise UnsupportedOperationError(f"numpy.{ufunc.__name__}.{method}", HINT)
        return Selection(ufunc(*(self._operand(ufunc.__name__, x) for x in inputs)), self.mask)

    def _operand(self, op: str, x):
        """An operand of an elementwise op on this selection, at the source's shape."""
        if isinstance(x, Selection):
            if not _same_mask(x.mask, self.mask):
                raise UnsupportedOperationError(f"numpy.{op}", "selections with different masks cannot be "
                                                "combined (their lengths may differ); " + HINT)
            return x.source
        trailing = self.source.ndim - self.mask.ndim
        if np.ndim(x) > trailing:
            raise UnsupportedOperationError(f"numpy.{op}", f"an array of shape {np.shape(x)} combined with "
                                            "x[mask]; " + HINT)
        return x

    def __array_function__(self, func, types, args, kwargs):
        from .dispatch import FUNCTIONS
        handler = FUNCTIONS.get(func)
        if handler is None or not getattr(handler, "accepts_selection", False):
            raise UnsupportedOperationError(f"numpy.{func.__name__}", HINT)
        return handler(*args, **kwargs)

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        func = getattr(np, name, None)
        if name in _METHODS and func is not None:
            return functools.partial(func, self)
        raise UnsupportedOperationError(f"x[mask].{name}", HINT)

    def __getitem__(self, key):
        raise UnsupportedOperationError("getitem", "indexing x[mask] further; " + HINT)

    def __len__(self):
        raise UnsupportedOperationError("len()", HINT)

    def __iter__(self):
        raise UnsupportedOperationError("iter()", HINT)

    def __bool__(self):
        raise UnsupportedOperationError("bool()", HINT)

    def __array__(self, dtype=None, copy=None):
        raise UnsupportedOperationError("numpy conversion", HINT)

    def _binary(ufunc, reflected: bool = False):  # noqa: N805 (builds the operator methods below)
        return (lambda self, o: ufunc(o, self)) if reflected else (lambda self, o: ufunc(self, o))

    __add__, __radd__, __iadd__ = _binary(np.add), _binary(np.add, True), _binary(np.add)
    __sub__, __rsub__, __isub__ = _binary(np.subtract), _binary(np.subtract, True), _binary(np.subtract)
    __mul__, __rmul__, __imul__ = _binary(np.multiply), _binary(np.multiply, True), _binary(np.multiply)
    __truediv__, __rtruediv__ = _binary(np.true_divide), _binary(np.true_divide, True)
    __itruediv__ = _binary(np.true_divide)
    __pow__, __rpow__, __ipow__ = _binary(np.power), _binary(np.power, True), _binary(np.power)
    __lt__, __le__, __gt__, __ge__ = _binary(np.less), _binary(np.less_equal), _binary(np.greater), \
        _binary(np.greater_equal)
    __eq__, __ne__ = _binary(np.equal), _binary(np.not_equal)
    __and__, __or__ = _binary(np.logical_and), _binary(np.logical_or)
    __hash__ = object.__hash__

    def __neg__(self):
        return np.negative(self)

    def __abs__(self):
        return np.absolute(self)


_METHODS = {"sum", "mean", "prod", "max", "min", "any", "all", "var", "std"}


def select(op: str, source: TracedArray, mask) -> Selection:
    """``source[mask]`` (mask over the leading dims)."""
    return Selection(source, _as_traced_mask(op, source, mask))


def store(target: TracedArray, mask, value) -> None:
    """``target[mask] = value`` as ``target[...] = np.where(mask, value, target)``."""
    op = "setitem"
    mask = _as_traced_mask(op, target, mask)
    if isinstance(value, Selection):
        if not _same_mask(value.mask, mask):
            raise UnsupportedOperationError(op, "x[mask] = y[other_mask]: the two selections may differ in length; "
                                            "write x[...] = np.where(mask, y, x)")
        value = value.source
    elif np.ndim(value) > target.ndim - mask.ndim and np.size(value) != 1:
        raise UnsupportedOperationError(op, f"x[mask] = v with v of shape {np.shape(value)}: numpy pairs v with "
                                        "the true elements in order, a data-dependent placement; write "
                                        "x[...] = np.where(mask, v_full, x) with v_full shaped like x")
    elif np.ndim(value) > target.ndim - mask.ndim:
        value = np.reshape(value, ())
    full = Selection(target, mask).full_mask()
    target[...] = np.where(full, value, target)


def accepts_selection(handler: Callable) -> Callable:
    """A reduction handler (parameters ``a, axis, keepdims, where``) that also
    takes ``x[mask]``: it reduces ``x`` with ``where=mask`` over the axes the
    selection's axis 0 stands for; keepdims keeps numpy's shape ``(1, ...)``."""
    signature = inspect.signature(handler)

    @functools.wraps(handler)
    def wrapped(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        sel = next(iter(bound.arguments.values()))
        if not isinstance(sel, Selection):
            return handler(*args, **kwargs)
        op = f"numpy.{handler.__name__.rstrip('_')}"
        bound.apply_defaults()
        where = bound.arguments.get("where")
        if where is not None and where is not True:
            raise UnsupportedOperationError(op, "where= on x[mask]: combine the masks instead, "
                                            "np.sum(x, where=mask & other)")
        from .reductions import normalize_axes
        ndim = 1 + sel.source.ndim - sel.mask.ndim
        axes = normalize_axes(op, bound.arguments.get("axis"), ndim)
        if 0 not in axes:
            raise UnsupportedOperationError(op, "a reduction of x[mask] that keeps its first (data-dependent) "
                                            "axis; " + HINT)
        lead = sel.mask.ndim
        bound.arguments[next(iter(bound.arguments))] = sel.source
        bound.arguments["axis"] = tuple(range(lead)) + tuple(a - 1 + lead for a in axes if a)
        keepdims = bound.arguments.get("keepdims", False)
        bound.arguments["keepdims"] = False
        bound.arguments["where"] = sel.full_mask()
        out = handler(*bound.args, **bound.kwargs)
        if keepdims:
            shape = tuple(1 if k in axes else sel.source.shape[k - 1 + lead] for k in range(ndim))
            out = np.reshape(out, shape)
        return out

    wrapped.accepts_selection = True
    return wrapped
