"""Traced arrays: views of a container in the graph being built.

A traced array is (container, index map, shape, dtype).  The index map turns
the array's own indices (placeholder symbols ``_v0, _v1, ...``) into indices
of the container, so slicing, transposing, broadcasting and reshaping cost no
tasklet: they only compose index maps, exactly like numpy views share memory.
Reads always use the container's latest version at the time of the read, so
all views of one container see in-place updates in program order, as in numpy.
"""
from __future__ import annotations

import linecache
import os
import sys
import weakref

import numpy as np
import sympy

from ..graph import DTYPES, index_symbol
from . import context
from .context import Trace
from .dispatch import FUNCTIONS, handler
from .errors import _SKIP_PREFIXES, ScalarConversionError, TracedBranchError, UnsupportedAttributeError, UntracedWriteError

_PLACEHOLDERS: list[sympy.Symbol] = []


def placeholders(n: int) -> tuple[sympy.Symbol, ...]:
    """The view-index placeholder symbols ``_v0 .. _v{n-1}``."""
    while len(_PLACEHOLDERS) < n:
        _PLACEHOLDERS.append(index_symbol(f"_v{len(_PLACEHOLDERS)}"))
    return tuple(_PLACEHOLDERS[:n])


def dim_value(d: sympy.Expr):
    """A dimension as numpy users expect it: a Python int, or the sympy expression
    when it involves size symbols."""
    return int(d) if d.is_Integer else d


class Operators:
    """Python operators routed through numpy ufuncs, shared by traced arrays
    and the scalar values of ``sd.map`` bodies."""

    __array_priority__ = 1000

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if _defers(inputs):
            return NotImplemented
        inputs, kwargs = localized(inputs, kwargs)
        if method != "__call__":
            return handler(f"{ufunc.__name__}.{method}")(*inputs, **kwargs)
        return handler(ufunc)(*inputs, **kwargs)

    def __add__(self, o): return np.add(self, o)
    def __radd__(self, o): return np.add(o, self)
    def __sub__(self, o): return np.subtract(self, o)
    def __rsub__(self, o): return np.subtract(o, self)
    def __mul__(self, o): return np.multiply(self, o)
    def __rmul__(self, o): return np.multiply(o, self)
    def __truediv__(self, o): return np.true_divide(self, o)
    def __rtruediv__(self, o): return np.true_divide(o, self)
    def __floordiv__(self, o): return np.floor_divide(self, o)
    def __rfloordiv__(self, o): return np.floor_divide(o, self)
    def __mod__(self, o): return np.remainder(self, o)
    def __rmod__(self, o): return np.remainder(o, self)
    def __pow__(self, o): return np.power(self, o)
    def __rpow__(self, o): return np.power(o, self)
    def __matmul__(self, o): return np.matmul(self, o)
    def __rmatmul__(self, o): return np.matmul(o, self)
    def __neg__(self): return np.negative(self)
    def __pos__(self): return self
    def __abs__(self): return np.absolute(self)
    def __lt__(self, o): return np.less(self, o)
    def __le__(self, o): return np.less_equal(self, o)
    def __gt__(self, o): return np.greater(self, o)
    def __ge__(self, o): return np.greater_equal(self, o)
    def __eq__(self, o): return np.equal(self, o)
    def __ne__(self, o): return np.not_equal(self, o)
    def __and__(self, o): return np.bitwise_and(self, o)
    def __rand__(self, o): return np.bitwise_and(o, self)
    def __or__(self, o): return np.bitwise_or(self, o)
    def __ror__(self, o): return np.bitwise_or(o, self)
    def __xor__(self, o): return np.bitwise_xor(self, o)
    def __invert__(self): return np.invert(self)
    __hash__ = object.__hash__

    def __bool__(self):
        if _user_statement().startswith("while"):
            raise TracedBranchError("bool()", "a Python while loop on a traced value cannot be traced (its trip "
                                    "count is data-dependent); write it as sd.while_loop(lambda s: <condition "
                                    "on s>, lambda s: <next s>, state, max_iters=N)")
        raise TracedBranchError("bool()", "Python control flow (if/while/and/or/not) on a traced value "
                                "cannot be traced; select elementwise with np.where(cond, a, b)")

    def _conversion_error(self, op: str) -> ScalarConversionError:
        """The error for ``float(x)`` & co.  numpy replaces an error raised while
        it stores ``x`` into a plain array by its own "setting an array element
        with a sequence"; the trace re-raises the UntracedWriteError kept here
        when that happens (see ``trace._trace``)."""
        self.trace.hidden_error = UntracedWriteError(
            "store into a numpy array", "a traced value cannot be stored into a numpy array the tracer cannot "
            "see (one created before tracing or a global); create that array inside the traced program "
            "(np.zeros(...)) or pass it as an argument")
        return ScalarConversionError(op, "a traced value has no Python value while tracing: float(x), int(x) "
                                     "and np.float32(x) are not traceable; keep it a traced array")

    def __float__(self):
        raise self._conversion_error("float()")

    def __int__(self):
        raise self._conversion_error("int()")

    def __index__(self):
        raise self._conversion_error("__index__")

    def item(self):
        raise ScalarConversionError("item()", "a traced value has no Python value while tracing")

    def __array__(self, dtype=None, copy=None):
        raise UntracedWriteError("numpy conversion", "a traced value cannot become a plain numpy array: it is "
                                 "being stored into (or mixed with) a numpy array the tracer cannot see, one "
                                 "created before tracing or passed in as a global; create that array inside "
                                 "the traced program (np.zeros(...)) or pass it as an argument")


class TracedArray(Operators):
    """An array value of the program being traced (see the module docstring)."""

    def __init__(self, trace: Trace, container: str, shape: tuple, dtype: str,
                 index: tuple | None = None, writable: bool | str = True, scalar_copy: bool = False):
        self.trace = trace
        self.container = container
        self._shape = tuple(sympy.sympify(s) for s in shape)
        self._dtype = dtype
        # container index as a function of this view's placeholders (identity for a whole container)
        # (sympified: a view map may hold a plain 0, e.g. a broadcast axis, that a later view substitutes into)
        self.index = tuple(sympy.sympify(e) for e in index) if index is not None else placeholders(len(self._shape))
        # True, False, or the name of the op whose result this read-only view is (a message names it): a
        # numpy copy, so a later write to the container must not show through it (emit.write copies it first)
        self.writable = writable
        if isinstance(writable, str):
            trace.copies.setdefault(container, []).append(weakref.ref(self))
        # numpy's a[0] on a 1-d array is a scalar copy: in-place ops on it must not write through
        self.scalar_copy = scalar_copy

    # -- view model ----------------------------------------------------------------
    @property
    def sym_shape(self) -> tuple[sympy.Expr, ...]:
        return self._shape

    @property
    def dtype_name(self) -> str:
        return self._dtype

    def container_index(self, idx) -> tuple[sympy.Expr, ...]:
        """The container element read for view element ``idx``."""
        subs = dict(zip(placeholders(len(self._shape)), (sympy.sympify(i) for i in idx)))
        return tuple(sympy.sympify(e).xreplace(subs) for e in self.index)

    def view(self, shape, index, writable: bool | str | None = None, scalar_copy: bool = False) -> "TracedArray":
        """A view of the same container: ``index`` maps the new view's placeholders
        to the container's indices."""
        return TracedArray(self.trace, self.container, shape, self._dtype, index,
                           self.writable if writable is None else writable, scalar_copy)

    def is_whole_container(self) -> bool:
        c = self.trace.graph.containers[self.container]
        return self._shape == c.shape and self.index == placeholders(len(self._shape))

    # -- numpy protocol ---------------------------------------------------------------
    def __array_function__(self, func, types, args, kwargs):
        if _defers(args):
            return NotImplemented
        args, kwargs = localized(args, kwargs)
        return handler(func)(*args, **kwargs)

    @property
    def shape(self) -> tuple:
        return tuple(dim_value(d) for d in self._shape)

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def size(self):
        return dim_value(sympy.Mul(*self._shape))

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(DTYPES[self._dtype])

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-d traced array")
        if not self._shape[0].is_Integer:
            raise ScalarConversionError("len()", f"the first dimension {self._shape[0]} is symbolic; "
                                        "use x.shape[0]")
        return int(self._shape[0])

    def __iter__(self):
        return (self[k] for k in range(len(self)))

    def __repr__(self) -> str:
        return f"TracedArray({self.container}, shape={self.shape}, dtype={self._dtype})"

    @property
    def T(self) -> "TracedArray":
        return np.transpose(self)

    def __getitem__(self, key):
        (self, key), _ = localized((self, key), {})
        return FUNCTIONS["getitem"](self, key)

    def __setitem__(self, key, value) -> None:
        _refuse_outer_write(self)
        (key, value), _ = localized((key, value), {})
        FUNCTIONS["setitem"](self, key, value)

    def _inplace(self, ufunc, other):
        _refuse_outer_write(self)
        (other,), _ = localized((other,), {})
        return FUNCTIONS["inplace"](self, ufunc, other)

    def __iadd__(self, o): return self._inplace(np.add, o)
    def __isub__(self, o): return self._inplace(np.subtract, o)
    def __imul__(self, o): return self._inplace(np.multiply, o)
    def __itruediv__(self, o): return self._inplace(np.true_divide, o)
    def __ipow__(self, o): return self._inplace(np.power, o)
    # Every in-place operator numpy arrays have: without one, Python falls back to
    # ``x = x op y``, which rebinds the name and loses an update made through a view.
    def __imatmul__(self, o): return self._inplace(np.matmul, o)
    def __ifloordiv__(self, o): return self._inplace(np.floor_divide, o)
    def __imod__(self, o): return self._inplace(np.remainder, o)
    def __iand__(self, o): return self._inplace(np.bitwise_and, o)
    def __ior__(self, o): return self._inplace(np.bitwise_or, o)
    def __ixor__(self, o): return self._inplace(np.bitwise_xor, o)

    # -- methods ------------------------------------------------------------------------
    # numpy's array methods take the functions' keywords (where=, initial=) too
    def sum(self, axis=None, dtype=None, out=None, **kw): return np.sum(self, axis, dtype, out, **kw)
    def mean(self, axis=None, dtype=None, out=None, **kw): return np.mean(self, axis, dtype, out, **kw)
    def any(self, axis=None, out=None, **kw): return np.any(self, axis, out, **kw)
    def all(self, axis=None, out=None, **kw): return np.all(self, axis, out, **kw)
    def max(self, axis=None, out=None, **kw): return np.max(self, axis, out, **kw)
    def min(self, axis=None, out=None, **kw): return np.min(self, axis, out, **kw)
    def prod(self, axis=None, dtype=None, out=None, **kw): return np.prod(self, axis, dtype, out, **kw)
    def cumsum(self, axis=None, dtype=None, out=None): return np.cumsum(self, axis, dtype, out)
    def cumprod(self, axis=None, dtype=None, out=None): return np.cumprod(self, axis, dtype, out)

    def argmax(self, axis=None, out=None, *, keepdims=False): return np.argmax(self, axis, out, keepdims=keepdims)
    def argmin(self, axis=None, out=None, *, keepdims=False): return np.argmin(self, axis, out, keepdims=keepdims)

    def dot(self, other): return np.dot(self, other)
    def transpose(self, *axes): return np.transpose(self, axes[0] if len(axes) == 1 else (axes or None))
    def swapaxes(self, a, b): return np.swapaxes(self, a, b)
    def reshape(self, *shape): return np.reshape(self, shape[0] if len(shape) == 1 else shape)
    def ravel(self): return np.reshape(self, -1)
    def flatten(self): return np.reshape(self, -1).copy()
    def squeeze(self, axis=None): return np.squeeze(self, axis)
    def clip(self, a_min=None, a_max=None): return np.clip(self, a_min, a_max)
    def copy(self): return np.copy(self)
    def astype(self, dtype): return FUNCTIONS["astype"](localized((self,), {})[0][0], dtype)

    def var(self, axis=None, dtype=None, out=None, ddof=0, **kw): return np.var(self, axis, dtype, out, ddof, **kw)
    def std(self, axis=None, dtype=None, out=None, ddof=0, **kw): return np.std(self, axis, dtype, out, ddof, **kw)

    def __getattr__(self, name: str):
        """Only reached for attributes the class lacks: numpy's other array
        methods (``tolist``, ``cumsum``, ``argmax``, ...).  Private and dunder
        names stay plain AttributeErrors, which numpy's protocol probes expect."""
        if name.startswith("_"):
            raise AttributeError(name)
        hint = (" (a traced array has no Python value while tracing: return the array and convert the result)"
                if name in _VALUE_METHODS else "; use the numpy functions the tracer supports (docs/guide.md)")
        raise UnsupportedAttributeError(f".{name}", f"traced arrays have no attribute {name!r}{hint}")


def _defers(values) -> bool:
    """An operand (or one in a list operand) that handles the operation itself:
    ``x[mask]`` (ir.tracer.masks.Selection), which numpy asks next on NotImplemented."""
    return any(getattr(v, "_handles_numpy_first", False) or
               (isinstance(v, (list, tuple)) and any(getattr(w, "_handles_numpy_first", False) for w in v))
               for v in values)


def _localize(value, tr: Trace):
    if isinstance(value, TracedArray) and value.trace is not tr:
        return tr.capture(value)
    if isinstance(value, (list, tuple)) and type(value) in (list, tuple):
        return type(value)(_localize(v, tr) for v in value)
    return value


def localized(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """``args`` and ``kwargs`` with every traced array of an enclosing trace (a
    loop body's closure over the program's arrays) replaced by this trace's
    stand-in for it (``Trace.capture``; symdiff.loops makes it an input of the
    loop).  Unchanged when the running trace captures nothing."""
    tr = context.active()
    if tr is None or tr.capture is None:
        return args, kwargs
    return tuple(_localize(a, tr) for a in args), {k: _localize(v, tr) for k, v in kwargs.items()}


def _refuse_outer_write(arr: "TracedArray") -> None:
    tr = context.active()
    if tr is not None and tr.capture is not None and arr.trace is not tr:
        raise UntracedWriteError("store", "a loop body writes into an array from outside the loop; carry that "
                                 "array in the loop state (and return its new value) instead")


def _user_statement() -> str:
    """The source line of the user's code running now, stripped ('' when unknown)."""
    frame = sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_SKIP_PREFIXES):
        frame = frame.f_back
    return linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip() if frame is not None else ""


# methods whose result would be the array's values, which do not exist while tracing
_VALUE_METHODS = {"tolist", "tobytes", "tofile", "dump", "dumps"}
