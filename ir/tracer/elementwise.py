"""Elementwise numpy: ufuncs, where, clip, astype, copy, and dtype promotion.

Each op is one tasklet over the broadcast output shape whose body is the
sympy form of the op; inside ``sd.map`` bodies the same ops build scalar
expressions instead (no tasklet until the value is stored).
"""
from __future__ import annotations

import functools
import math
from typing import Callable

import numpy as np
import sympy
from sympy.codegen.cfunctions import exp2, expm1, log1p, log2, log10

from ..scalar_functions import cbrt, compare, fmax, fmin, ieee_float, logical_not, maximum, minimum
from . import context
from .dispatch import implements
from .emit import as_arith, as_bool, broadcast_shapes, scalar_expr, tasklet_to_new
from .errors import UnsupportedOperationError
from .maps import MapValue, as_map_operand
from .strict import check_ranks
from .traced_array import TracedArray

_RANK = {"bool": 0, "int32": 1, "float16": 2, "bfloat16": 2, "float32": 3, "float64": 4}
_NUMPY_DTYPES = {"float32": "float32", "float64": "float64", "float16": "float16", "bfloat16": "bfloat16",
                 "int32": "int32", "int64": "int32", "bool": "bool"}


def dtype_name(dtype) -> str:
    """A numpy dtype-like as one of the IR dtypes (int64 narrows to int32)."""
    name = np.dtype(dtype).name
    if np.dtype(dtype).kind == "c":
        raise UnsupportedOperationError("dtype", f"{name}: complex numbers are not supported by symdiff; carry "
                                        "the real and imaginary parts as two float arrays")
    if name not in _NUMPY_DTYPES:
        raise UnsupportedOperationError("dtype", f"{name} is not supported (float32, float64, float16, bfloat16, "
                                        "int32, bool)")
    return _NUMPY_DTYPES[name]


def is_traced(x) -> bool:
    return isinstance(x, (TracedArray, MapValue))


def result_dtype(trace: context.Trace, operands, rule: str) -> str:
    """numpy-like promotion where Python and numpy scalars never widen a float
    array (float32 stays float32, float16 float16); ``rule`` is "arith" (bool
    counts as int), "float" (results are floating), "bool", or "same" (no
    adjustment).  float16 with bfloat16 gives float32, as in JAX: neither holds
    the other."""
    if rule == "bool":
        return "bool"
    arrays = [x.dtype_name for x in operands if is_traced(x)]
    scalars = [x for x in operands if not is_traced(x) and x is not None]
    has_float = any(isinstance(s, (float, np.floating)) for s in scalars)
    has_int = any(isinstance(s, (int, np.integer)) and not isinstance(s, (bool, np.bool_)) for s in scalars)
    if arrays:
        best = max(arrays, key=_RANK.__getitem__)
        if {"float16", "bfloat16"} <= set(arrays) and best in ("float16", "bfloat16"):
            best = "float32"
        if has_float and _RANK[best] < 2:
            best = trace.float_dtype
        elif has_int and best == "bool":
            best = "int32"
    else:
        best = trace.float_dtype if has_float else "int32" if has_int else "bool"
    if rule == "arith" and best == "bool":
        return "int32"
    if rule == "float" and _RANK[best] < 2:
        return trace.float_dtype
    return best


def constant_operand(trace: context.Trace, x):
    """A plain numpy array operand becomes a traced constant (small ones only);
    a 0-d array its numpy scalar, whose type says its dtype."""
    if isinstance(x, np.ndarray) and x.ndim == 0:
        return x[()]
    if isinstance(x, (np.ndarray, list, tuple)) and np.ndim(x) > 0:
        from .creation import constant
        return constant(trace, np.asarray(x), "numpy array operand")
    return x


def trace_of(operands) -> context.Trace:
    return next(x for x in operands if is_traced(x)).trace


def apply(op: str, fn: Callable, operands: list, dtype: str, converts: list[Callable]):
    """Apply the scalar sympy function ``fn`` elementwise to ``operands``
    (traced arrays, map values, scalars, None for absent optional operands);
    ``converts[k](expr, dtype)`` prepares operand k (0/1 for bools in
    arithmetic, ``!= 0`` for logic)."""
    trace = trace_of(operands)
    operands = [constant_operand(trace, x) for x in operands]
    if any(isinstance(x, MapValue) for x in operands):
        values = [None if x is None else as_map_operand(trace, x) for x in operands]
        reads = {}
        for v in values:
            if v is not None:
                reads.update(v.reads)
        expr = fn(*(None if v is None else conv(v.expr, v.dtype_name) for v, conv in zip(values, converts)))
        return MapValue(trace, expr, dtype, reads)
    arrays = {f"x{k}": x for k, x in enumerate(operands) if isinstance(x, TracedArray)}
    if trace.strict_broadcasting:
        check_ranks(op, [a.sym_shape for a in arrays.values()], [a.container for a in arrays.values()])
    shape = broadcast_shapes(op, *(a.sym_shape for a in arrays.values()))

    def body(_, symbols):
        args = []
        for k, (x, conv) in enumerate(zip(operands, converts)):
            if isinstance(x, TracedArray):
                args.append(conv(symbols[f"x{k}"], x.dtype_name))
            else:
                args.append(None if x is None else conv(scalar_expr(x), result_dtype(trace, [x], "same")))
        return fn(*args)

    return tasklet_to_new(op, trace, shape, dtype, body, arrays)


def _raw(expr, dtype):
    return expr


def _zero_value(a: sympy.Expr) -> float | None:
    """The value of a literal zero (``-0.0`` included), None for anything else."""
    if isinstance(a, ieee_float):
        return a.value if a.value == 0 else None
    return 0.0 if a.is_Number and a.is_zero else None


def _opaque_zero(a: sympy.Expr) -> sympy.Expr:
    return ieee_float(0.0) if a.is_Number and a.is_zero else a


def _ieee_zeros(a: sympy.Expr, b: sympy.Expr) -> tuple[sympy.Expr, sympy.Expr]:
    """A product's or quotient's literal zero as an opaque ``ieee_float``:
    sympy folds ``x / 0`` to ``zoo*x`` and ``0 * x`` to ``0`` where numpy's
    float arithmetic gives inf, -inf or NaN.  Integer arithmetic keeps
    sympy's zero (numpy's ``0 * n`` is 0 too)."""
    return (a, b) if a.is_integer and b.is_integer else (_opaque_zero(a), _opaque_zero(b))


def _multiply(a, b):
    a, b = _ieee_zeros(a, b)
    return a * b


def _quotient(a, b):
    """``a / b`` by IEEE rules.  A literal zero divisor is the product with
    the signed infinity, the same value for every ``a`` (``0 / 0`` and
    ``0 * inf`` are NaN) and the same derivative (``1 / 0 == inf``), and the
    only form the Slang targets keep: a compiler may fold ``x / 0.0`` to
    anything (SPIR-V leaves it undefined; lavapipe gives 0)."""
    zero = _zero_value(b)
    if zero is not None:
        return _opaque_zero(a) * ieee_float(math.copysign(math.inf, zero))
    return _opaque_zero(a) / b


def _floor_divide(a, b):
    if a.is_integer and b.is_integer:
        return sympy.Integer(0) if b.is_zero else sympy.floor(a / b)
    return sympy.floor(_quotient(a, b))


def _remainder(a, b):
    if a.is_integer and b.is_integer:
        return sympy.Integer(0) if b.is_zero else sympy.Mod(a, b)
    if _zero_value(b) is not None:   # numpy: x % 0.0 is NaN for every x; JAX: its derivative in x is 1
        return a + ieee_float(math.nan)
    return sympy.Mod(_opaque_zero(a), b)


def _power(a, b):
    if isinstance(b, sympy.Float) and b == int(b):
        b = sympy.Integer(int(b))
    return sympy.Pow(a, b)


_UNARY_FLOAT = {
    np.exp: sympy.exp, np.log: sympy.log, np.log1p: log1p, np.expm1: expm1, np.sqrt: sympy.sqrt,
    np.sin: sympy.sin, np.cos: sympy.cos, np.tan: sympy.tan, np.tanh: sympy.tanh, np.sinh: sympy.sinh,
    np.cosh: sympy.cosh, np.arcsin: sympy.asin, np.arccos: sympy.acos, np.arctan: sympy.atan,
    np.arcsinh: sympy.asinh, np.arccosh: sympy.acosh, np.arctanh: sympy.atanh, np.log2: log2,
    np.log10: log10, np.exp2: exp2, np.reciprocal: lambda x: _quotient(sympy.Integer(1), x), np.cbrt: cbrt,
}
def _absolute(x: sympy.Expr) -> sympy.Expr:
    """``|x|`` whose derivative is 0 at 0 (symdiff's convention, as ``sign``) also
    where sympy proves the sign of ``x`` and drops the ``Abs``: ``Abs(Max(a,
    0))`` (``np.abs(np.clip(a, 0, 1))``) is ``Max(a, 0)`` to sympy, and at a tie
    at 0 the maximum's own derivative (half to each side) leaked through
    (fuzzer seed 400695, before np.maximum became ``maximum``).  The select
    keeps the value (-0.0 becomes 0.0, NaN stays NaN)."""
    out = sympy.Abs(x)
    if isinstance(out, sympy.Abs) or out.is_number:
        return out
    return sympy.Piecewise((0, sympy.Eq(x, 0)), (out, True))


_UNARY_ARITH = {
    np.negative: lambda x: -x, np.absolute: _absolute, np.fabs: _absolute, np.square: lambda x: x ** 2,
    np.sign: sympy.sign, np.floor: sympy.floor, np.ceil: sympy.ceiling, np.positive: lambda x: x,
}
_BINARY = {
    np.add: (lambda a, b: a + b, "arith"), np.subtract: (lambda a, b: a - b, "arith"),
    np.multiply: (_multiply, "arith"), np.power: (_power, "arith"),
    np.maximum: (maximum, "arith"), np.minimum: (minimum, "arith"),
    np.fmax: (fmax, "arith"), np.fmin: (fmin, "arith"),
    np.floor_divide: (_floor_divide, "arith"), np.remainder: (_remainder, "arith"),
    np.true_divide: (_quotient, "float"), np.arctan2: (sympy.atan2, "float"),
    np.hypot: (lambda a, b: sympy.sqrt(a ** 2 + b ** 2), "float"),
}
_COMPARE = {u: functools.partial(compare, rel) for u, rel in (
    (np.greater, sympy.Gt), (np.greater_equal, sympy.Ge), (np.less, sympy.Lt), (np.less_equal, sympy.Le),
    (np.equal, sympy.Eq), (np.not_equal, sympy.Ne))}
_LOGIC = {np.logical_and: sympy.And, np.logical_or: sympy.Or, np.logical_xor: sympy.Xor,
          np.logical_not: logical_not}


def _ufunc_handler(ufunc: np.ufunc, fn: Callable, rule: str, convert: Callable = as_arith) -> Callable:
    def handle(*inputs, out=None, dtype=None, **kwargs):
        if kwargs:
            raise UnsupportedOperationError(f"numpy.{ufunc.__name__}",
                                            f"arguments {sorted(kwargs)} are not supported when tracing")
        inputs = list(inputs)
        result = apply(ufunc.__name__, fn, inputs, result_dtype(trace_of(inputs), inputs, rule),
                       [convert] * len(inputs))
        if dtype is not None:
            result = astype(result, dtype)
        if out is not None:
            target = out[0] if isinstance(out, tuple) else out
            target[...] = result
            return target
        return result
    return handle


for _u, _f in _UNARY_FLOAT.items():
    implements(_u)(_ufunc_handler(_u, _f, "float"))
for _u, _f in _UNARY_ARITH.items():
    implements(_u)(_ufunc_handler(_u, _f, "arith"))
for _u, (_f, _rule) in _BINARY.items():
    implements(_u)(_ufunc_handler(_u, _f, _rule))
for _u, _f in _COMPARE.items():
    implements(_u)(_ufunc_handler(_u, _f, "bool"))
for _u, _f in _LOGIC.items():
    implements(_u)(_ufunc_handler(_u, _f, "bool", as_bool))


def _is_bool(v) -> bool:
    return v.dtype_name == "bool" if is_traced(v) else isinstance(v, (bool, np.bool_))


# numpy's & | ^ ~ on booleans are its bitwise ufuncs: a numpy bool on the left
# (np.bool_(True) & traced) reaches them rather than the traced operand's __and__.
_BITWISE = {np.bitwise_and: np.logical_and, np.bitwise_or: np.logical_or, np.bitwise_xor: np.logical_xor,
            np.invert: np.logical_not}


def _bitwise_handler(ufunc: np.ufunc) -> Callable:
    logical = _ufunc_handler(ufunc, _LOGIC[_BITWISE[ufunc]], "bool", as_bool)

    def handle(*inputs, **kwargs):
        if not all(_is_bool(x) for x in inputs):
            raise UnsupportedOperationError(f"numpy.{ufunc.__name__}", "bitwise operations on integers are not "
                                            "traceable; on booleans & | ^ ~ are the logical operations")
        return logical(*inputs, **kwargs)
    return handle


for _u in _BITWISE:
    implements(_u)(_bitwise_handler(_u))


def _outer_handler(ufunc: np.ufunc) -> Callable:
    """``ufunc.outer(a, b)``: ``a`` gains ``b.ndim`` trailing size-1 axes (a
    view) and the ufunc broadcasts; the result has shape ``a.shape + b.shape``."""
    def handle(a, b, **kwargs):
        trace = trace_of([a, b])
        a, b = (constant_operand(trace, np.asarray(x)) if isinstance(x, (np.ndarray, list, tuple)) else x
                for x in (a, b))
        if isinstance(a, TracedArray):
            a = np.reshape(a, a.sym_shape + (1,) * np.ndim(b))
        elif isinstance(b, TracedArray) and np.ndim(a) == 0:
            b = np.reshape(b, b.sym_shape)
        return ufunc(a, b, **kwargs)
    return handle


for _u in [*_BINARY, *_COMPARE, np.logical_and, np.logical_or, np.logical_xor]:
    implements(f"{_u.__name__}.outer")(_outer_handler(_u))


@implements(np.where)
def where(condition, x=None, y=None):
    """``where(c, a, b)`` is a Piecewise; the one-argument form (indices) has a
    data-dependent shape and cannot be traced."""
    if x is None or y is None:
        raise UnsupportedOperationError("numpy.where", "only the three-argument form where(cond, a, b) is "
                                        "traceable (the one-argument form has a data-dependent shape)")
    operands = [condition, x, y]
    both_bool = _is_bool(x) and _is_bool(y)
    dtype = "bool" if both_bool else result_dtype(trace_of(operands), [x, y], "arith")
    value = _raw if both_bool else as_arith
    return apply("where", lambda c, a, b: sympy.Piecewise((a, c), (b, True)), operands, dtype,
                 [as_bool, value, value])


@implements(np.clip)
def clip(a, a_min=None, a_max=None, out=None, **kwargs):
    """``Min(Max(a, lo), hi)``: sympy's Max/Min differentiate with Heaviside,
    whose value 1/2 at ties is JAX's convention."""
    if kwargs or out is not None:
        raise UnsupportedOperationError("numpy.clip", f"arguments {sorted(kwargs) or ['out']} are not supported")
    if a_min is None and a_max is None:
        raise UnsupportedOperationError("numpy.clip", "needs a_min or a_max")

    def fn(x, lo, hi):
        x = x if lo is None else sympy.Max(x, lo)
        return x if hi is None else sympy.Min(x, hi)

    operands = [a, a_min, a_max]
    return apply("clip", fn, operands, result_dtype(trace_of(operands), operands, "arith"), [as_arith] * 3)


def _convert_to(target: str) -> Callable:
    def convert(expr, dtype):
        if target == "bool":
            return as_bool(expr, dtype)
        return as_arith(expr, dtype)
    return convert


@implements("astype")
def astype(x, dtype):
    """A converting copy (numpy's astype copies too); float to int truncates on store."""
    target = dtype_name(dtype)
    return apply("astype", lambda v: v, [x], target, [_convert_to(target)])


@implements(np.copy)
def copy(a, order="K", subok=False):
    if not isinstance(a, TracedArray):
        raise UnsupportedOperationError("numpy.copy", "of a value inside an sd.map body")
    return apply("copy", lambda v: v, [a], a.dtype_name, [_raw])
