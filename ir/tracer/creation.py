"""Array creation inside traced programs, however numpy was imported.

While a trace runs, the numpy module's creation functions (and the same
function objects bound in the traced function's globals, for ``from numpy
import zeros``) are replaced by dispatchers.  A dispatcher runs the traced form
only when the calling thread is tracing and the caller is not library code
(numpy, sympy, this package); otherwise it is the original function.  The
patches are reference-counted across threads and removed when the last trace
ends, so numpy is untouched outside tracing.
"""
from __future__ import annotations

import contextlib
import functools
import sys
import threading
from typing import Callable

import numpy as np
import sympy

from . import context
from .context import Trace
from .dispatch import implements
from .elementwise import astype, dtype_name, result_dtype
from .emit import domain_symbols, new_array, read, scalar_expr, write
from .errors import UnsupportedOperationError
from .maps import MapValue
from .traced_array import TracedArray

MAX_CONSTANT_ELEMENTS = 1024


def _shape(shape) -> tuple:
    return tuple(sympy.sympify(s) for s in (shape if isinstance(shape, (tuple, list)) else (shape,)))


def _dtype(dtype, default: str) -> str:
    return default if dtype is None else dtype_name(dtype)


def zeros(trace: Trace, shape, dtype=None, order="C", **_) -> TracedArray:
    """No tasklet: a version nobody wrote reads as zeros (graph.py)."""
    return new_array(trace, _shape(shape), _dtype(dtype, trace.float_dtype), "zeros")


def empty(trace: Trace, shape, dtype=None, order="C", **_) -> TracedArray:
    return new_array(trace, _shape(shape), _dtype(dtype, trace.float_dtype), "empty")


def ndarray(trace: Trace, shape, dtype=float, buffer=None, offset=0, strides=None, order=None) -> TracedArray:
    """``np.ndarray(shape, dtype)`` (NPBench's vadv): uninitialised, like np.empty."""
    if buffer is not None or strides is not None:
        raise UnsupportedOperationError("numpy.ndarray", "buffer= and strides= are not traceable; use "
                                        "np.empty(shape, dtype)")
    return empty(trace, shape, None if dtype is float else dtype)


def full(trace: Trace, shape, fill_value, dtype=None, order="C", **_) -> TracedArray:
    if dtype is None:
        dtype = fill_value.dtype if isinstance(fill_value, TracedArray) else \
            np.result_type(fill_value) if not isinstance(fill_value, float) else trace.float_dtype
    out = new_array(trace, _shape(shape), dtype_name(dtype), "full")
    out[...] = fill_value
    return out


def ones(trace: Trace, shape, dtype=None, order="C", **_) -> TracedArray:
    return full(trace, shape, 1.0 if dtype is None else 1, dtype)


def _like_dtype(op: str, a, dtype) -> str:
    if isinstance(a, MapValue):
        raise UnsupportedOperationError(f"numpy.{op}", "of a value inside an sd.map body")
    if dtype is not None:
        return dtype_name(dtype)
    return a.dtype_name if isinstance(a, TracedArray) else dtype_name(np.asarray(a).dtype)


def zeros_like(trace: Trace, a, dtype=None, order="K", subok=True, shape=None) -> TracedArray:
    return zeros(trace, np.shape(a) if shape is None else shape, _like_dtype("zeros_like", a, dtype))


def empty_like(trace: Trace, a, dtype=None, order="K", subok=True, shape=None) -> TracedArray:
    return empty(trace, np.shape(a) if shape is None else shape, _like_dtype("empty_like", a, dtype))


def ones_like(trace: Trace, a, dtype=None, order="K", subok=True, shape=None) -> TracedArray:
    return full(trace, np.shape(a) if shape is None else shape, 1, _like_dtype("ones_like", a, dtype))


def full_like(trace: Trace, a, fill_value, dtype=None, order="K", subok=True, shape=None) -> TracedArray:
    return full(trace, np.shape(a) if shape is None else shape, fill_value, _like_dtype("full_like", a, dtype))


def arange(trace: Trace, start, stop=None, step=None, dtype=None, **_) -> TracedArray:
    if any(isinstance(v, TracedArray) for v in (start, stop, step)):
        raise UnsupportedOperationError("numpy.arange", "a traced start, stop or step makes the length "
                                        "data-dependent; give the count as a Python int and scale: "
                                        "lo + np.arange(n) * h (or np.linspace(lo, hi, n)) with traced lo, h, hi")
    if stop is None:
        start, stop = 0, start
    step = 1 if step is None else step
    bounds = [sympy.sympify(v) for v in (start, stop, step)]
    integral = all(b.is_integer for b in bounds)
    length = sympy.ceiling((bounds[1] - bounds[0]) / bounds[2])
    length = sympy.Max(length, 0) if length.is_number else length
    out = new_array(trace, (length,), _dtype(dtype, "int32" if integral else trace.float_dtype), "arange")
    (i,) = domain_symbols(1)
    write("arange", out, (i,), ((i, 0, length),), bounds[0] + bounds[2] * i, {})
    return out


def linspace(trace: Trace, start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0):
    """Constant bounds: one tasklet.  Traced or array bounds (differentiable in
    both): ``start + i * step`` composed of traced ops, broadcasting the bounds
    and inserting the sample axis at ``axis``, as numpy."""
    if isinstance(num, TracedArray) or not isinstance(num, (int, np.integer)) or num < 0:
        raise UnsupportedOperationError("numpy.linspace", f"num must be a non-negative Python int (got "
                                        f"{type(num).__name__}): the number of samples fixes the result's shape")
    if isinstance(start, TracedArray) or isinstance(stop, TracedArray) or np.ndim(start) or np.ndim(stop) \
            or retstep or axis != 0:
        return _linspace_arrays(trace, start, stop, int(num), endpoint, retstep, dtype, axis)
    start, stop = scalar_expr(start), scalar_expr(stop)
    div = num - 1 if endpoint else num
    (i,) = domain_symbols(1)
    out = new_array(trace, (num,), _dtype(dtype, trace.float_dtype), "linspace")
    value = start + (stop - start) * i / div if div > 0 else start
    write("linspace", out, (i,), ((i, 0, num),), sympy.sympify(value), {})
    return out


def _linspace_arrays(trace: Trace, start, stop, num: int, endpoint: bool, retstep: bool, dtype, axis: int):
    from .elementwise import constant_operand
    start, stop = (constant_operand(trace, v) for v in (start, stop))
    div = num - 1 if endpoint else num
    extra = np.broadcast_shapes(np.shape(start), np.shape(stop))
    delta = stop - start
    step = delta / div if div > 0 else delta * np.nan
    samples = np.reshape(astype(arange(trace, num), trace.float_dtype), (num,) + (1,) * len(extra))
    y = samples * (step if div > 0 else delta * 0.0) + start
    y = np.broadcast_to(y, (num,) + extra).copy()   # a fresh array: the endpoint is stored into it
    if endpoint and num > 1:
        y[-1] = stop
    if axis != 0:
        y = np.moveaxis(y, 0, axis)
    if dtype is not None:
        y = astype(y, dtype)
    return (y, step) if retstep else y


def eye(trace: Trace, N, M=None, k=0, dtype=float, order="C", **_) -> TracedArray:
    """Zeros plus one tasklet writing the diagonal."""
    M = N if M is None else M
    out = new_array(trace, (N, M), _dtype(None if dtype is float else dtype, trace.float_dtype), "eye")
    (i,) = domain_symbols(1)
    write("eye", out, (i, i + k), ((i, max(0, -k), sympy.Min(N, M - k)),), sympy.Integer(1), {})
    return out


def identity(trace: Trace, n, dtype=None, **_) -> TracedArray:
    return eye(trace, n, dtype=float if dtype is None else dtype)


def constant(trace: Trace, values: np.ndarray, what: str, dtype: str | None = None) -> TracedArray:
    """A small numpy array as a traced container: one tasklet per non-zero element."""
    values = np.asarray(values)
    if values.size > MAX_CONSTANT_ELEMENTS:
        raise UnsupportedOperationError(what, f"a constant of {values.size} elements is too large to embed in "
                                        f"the graph (limit {MAX_CONSTANT_ELEMENTS}); pass it as an argument")
    out = new_array(trace, values.shape, dtype or dtype_name(values.dtype), "constant")
    for index in (k for k in np.ndindex(values.shape) if values[k] != 0):  # a 0-d array has one index, ()
        write("constant", out, tuple(int(k) for k in index), (), scalar_expr(values[index]), {}, disjoint=True)
    return out


def _grids():
    """ir.tracer.grids, imported late: it imports the op modules that import this one."""
    from . import grids
    return grids


def _nested(obj):
    """(shape, leaves) of a rectangular nested list/tuple."""
    if not isinstance(obj, (list, tuple)):
        return (), [obj]
    parts = [_nested(x) for x in obj]
    shapes = {p[0] for p in parts}
    if len(shapes) > 1:
        raise UnsupportedOperationError("numpy.array", "of a ragged nested sequence")
    inner = shapes.pop() if parts else ()
    return (len(obj),) + inner, [leaf for p in parts for leaf in p[1]]


def array(trace: Trace, obj, dtype=None, copy=True, **_):
    """Traced arrays are copied; sequences holding traced values are written
    element by element (or stacked, for traced arrays); plain numbers become
    constants (Python floats in the program's float precision)."""
    if isinstance(obj, MapValue):
        raise UnsupportedOperationError("numpy.array", "of a value inside an sd.map body")
    if isinstance(obj, TracedArray):
        return astype(obj, obj.dtype if dtype is None else dtype)
    shape, leaves = _nested(obj)
    traced = [x for x in leaves if isinstance(x, (TracedArray, MapValue))]
    if not traced:
        values = np.asarray(obj)
        if dtype is None and values.dtype == np.float64 and not isinstance(obj, np.ndarray):
            dtype = trace.float_dtype
        return constant(trace, values, "numpy.array", None if dtype is None else dtype_name(dtype))
    if any(isinstance(x, MapValue) or x.ndim for x in traced):
        if isinstance(obj, (list, tuple)) and all(isinstance(x, TracedArray) for x in obj):
            return np.stack([array(trace, x, dtype) for x in obj])
        raise UnsupportedOperationError("numpy.array", "of a sequence mixing arrays and scalars")
    out = new_array(trace, shape, _dtype(dtype, result_dtype(trace, leaves, "same")), "array")
    for flat, leaf in enumerate(leaves):
        index = tuple(int(k) for k in np.unravel_index(flat, shape))
        reads = {}
        value = read(leaf, (), "x", reads) if isinstance(leaf, TracedArray) else scalar_expr(leaf)
        write("array", out, index, (), value, reads, disjoint=True)
    return out


def asarray(trace: Trace, obj, dtype=None, **kwargs):
    if isinstance(obj, TracedArray) and (dtype is None or dtype_name(dtype) == obj.dtype_name):
        return obj
    return array(trace, obj, dtype)


_TRACED: dict[str, Callable] = {
    "zeros": zeros, "empty": empty, "ones": ones, "full": full, "arange": arange, "linspace": linspace,
    "eye": eye, "identity": identity, "array": array, "asarray": asarray,
    "zeros_like": zeros_like, "empty_like": empty_like, "ones_like": ones_like, "full_like": full_like,
    "indices": lambda trace, *args, **kwargs: _grids().indices(trace, *args, **kwargs),
    "ndarray": ndarray,
}
_ORIGINALS: dict[str, Callable] = {name: getattr(np, name) for name in _TRACED}
_LIBRARY_PREFIXES = ("numpy", "sympy", "symdiff.ir.", "networkx")


def _from_library(frame) -> bool:
    module = frame.f_globals.get("__name__", "")
    return module == "symdiff.ir" or module.startswith(_LIBRARY_PREFIXES)


def _dispatcher(name: str) -> Callable:
    original, traced = _ORIGINALS[name], _TRACED[name]
    if name == "ndarray":
        return _ndarray_dispatcher(original, traced)

    @functools.wraps(original)
    def dispatch(*args, **kwargs):
        trace = context.active()
        if trace is None or _from_library(sys._getframe(1)):
            return original(*args, **kwargs)
        return traced(trace, *args, **kwargs)
    return dispatch


class _NdarrayType(type):
    """The type of ``np.ndarray``'s stand-in while tracing: the class itself to
    ``isinstance``, ``issubclass`` and attribute lookups (``np.ndarray.shape``),
    a creation function to a call from the user's program."""

    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, cls._original)

    def __subclasscheck__(cls, sub) -> bool:
        return issubclass(sub, cls._original)

    def __getattr__(cls, name: str):
        return getattr(cls._original, name)

    def __getitem__(cls, item):
        return cls._original[item]

    def __call__(cls, *args, **kwargs):
        trace = context.active()
        if trace is None or _from_library(sys._getframe(1)):
            return cls._original(*args, **kwargs)
        return cls._traced(trace, *args, **kwargs)


def _ndarray_dispatcher(original: type, traced: Callable) -> type:
    return _NdarrayType("ndarray", (), {"_original": original, "_traced": staticmethod(traced),
                                        "__doc__": original.__doc__, "__module__": "numpy"})


_DISPATCHERS: dict[str, Callable] = {name: _dispatcher(name) for name in _TRACED}
for _name in ("zeros_like", "empty_like", "ones_like", "full_like"):
    # reached through __array_function__ when the caller's numpy function is not patched
    implements(_ORIGINALS[_name])(functools.partial(lambda impl, a, *args, **kw: impl(a.trace, a, *args, **kw),
                                                    _TRACED[_name]))
_ORIGINAL_NAMES: dict[int, str] = {id(f): name for name, f in _ORIGINALS.items()}
_lock = threading.Lock()
_module_users = 0
_global_patches: dict[tuple[int, str], list] = {}   # (id(globals), key) -> [globals, original, users]


def _patch_globals(fn_globals: dict) -> list[tuple[int, str]]:
    """Replace numpy creation functions bound in ``fn_globals`` (``from numpy
    import zeros``); returns the patch keys to release."""
    keys = []
    for key, value in list(fn_globals.items()):
        patch_key = (id(fn_globals), key)
        if patch_key in _global_patches:
            _global_patches[patch_key][2] += 1
        else:
            name = _ORIGINAL_NAMES.get(id(value))
            if name is None or value is not _ORIGINALS[name]:
                continue
            fn_globals[key] = _DISPATCHERS[name]
            _global_patches[patch_key] = [fn_globals, value, 1]
        keys.append(patch_key)
    return keys


@contextlib.contextmanager
def creation_traced(fn_globals: dict):
    """numpy's creation functions build traced arrays for this thread while the
    block runs (see the module docstring)."""
    global _module_users
    with _lock:
        if _module_users == 0:
            for name, d in _DISPATCHERS.items():
                setattr(np, name, d)
        _module_users += 1
        keys = _patch_globals(fn_globals)
    try:
        yield
    finally:
        with _lock:
            for key in keys:
                entry = _global_patches[key]
                entry[2] -= 1
                if entry[2] == 0:
                    entry[0][key[1]] = entry[1]
                    del _global_patches[key]
            _module_users -= 1
            if _module_users == 0:
                for name, original in _ORIGINALS.items():
                    setattr(np, name, original)
