"""numpy's other elementwise functions, each written with sympy functions the
printers and the differentiator already know (floor, ceiling, Piecewise,
log1p, comparisons through ``compare``), so no target needs a new rule.

Rounding (round/around/rint/trunc/fix) is piecewise constant: its gradient is
0, as in JAX.  Tests of these state the points where JAX's gradient and this
one may differ (ties of logaddexp's arguments are not among them: half each).
"""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import sympy
from sympy.codegen.cfunctions import exp2, log1p

from ..graph import FLOAT_DTYPES
from ..scalar_functions import compare, ieee_float, maximum
from .dispatch import implements
from .elementwise import _absolute, _power, _quotient, _ufunc_handler, apply, as_arith, result_dtype, trace_of
from .errors import UnsupportedOperationError
from .traced_array import TracedArray

_INF = ieee_float(math.inf)


def isnan(x: sympy.Expr) -> sympy.Basic:
    return compare(sympy.Ne, x, x)   # sympy folds Ne(x, x); compare keeps the IEEE test


def isinf(x: sympy.Expr) -> sympy.Basic:
    return compare(sympy.Eq, sympy.Abs(x), _INF)


def isfinite(x: sympy.Expr) -> sympy.Basic:
    return compare(sympy.Lt, sympy.Abs(x), _INF)   # false for inf and NaN


def trunc(x: sympy.Expr) -> sympy.Expr:
    if x.is_integer:
        return x
    return sympy.Piecewise((sympy.floor(x), compare(sympy.Ge, x, 0)), (sympy.ceiling(x), True))


def rint(x: sympy.Expr) -> sympy.Expr:
    """Round half to even: ``x - floor(x)`` is exact, so the tie test is too."""
    if x.is_integer:
        return x
    low = sympy.floor(x)
    frac = x - low
    half = sympy.Rational(1, 2)
    return sympy.Piecewise((low + 1, compare(sympy.Gt, frac, half)), (low, compare(sympy.Lt, frac, half)),
                           (low + sympy.Mod(low, 2), True))


def _round_to(decimals: int):
    """numpy's round: ``rint(x * 10**d) / 10**d`` (the other way for d < 0)."""
    if decimals == 0:
        return rint
    scale = sympy.Float(10.0 ** abs(decimals))
    if decimals > 0:
        return lambda x: rint(x * scale) / scale
    return lambda x: rint(x / scale) * scale


def fmod(a: sympy.Expr, b: sympy.Expr) -> sympy.Expr:
    """C's fmod, the sign of ``a``: ``a - b * trunc(a / b)`` (JAX's gradient:
    1 in ``a``, ``-trunc(a / b)`` in ``b``)."""
    if a.is_integer and b.is_integer:
        return sympy.Integer(0) if b.is_zero else a - b * trunc(sympy.Rational(1, 1) * a / b)
    return a - b * trunc(_quotient(a, b))


def copysign(a: sympy.Expr, b: sympy.Expr) -> sympy.Expr:
    """``|a|`` with ``b``'s sign; a negative zero ``b`` counts as positive here
    (numpy reads its sign bit), see the module's refusals list in the guide."""
    return sympy.Piecewise((-_absolute(a), compare(sympy.Lt, b, 0)), (_absolute(a), True))


def logaddexp(a: sympy.Expr, b: sympy.Expr, base_e: bool = True) -> sympy.Expr:
    """``max + log1p(exp(-|a - b|))``; equal arguments (infinities included)
    give ``a + log 2``, half the gradient to each."""
    top = maximum(a, b)
    gap = -_absolute(a - b)
    tail = log1p(sympy.exp(gap)) if base_e else log1p(exp2(gap)) / sympy.log(2)
    return sympy.Piecewise((top + (sympy.log(2) if base_e else 1), compare(sympy.Eq, a, b)), (top + tail, True))


def sinc(x: sympy.Expr) -> sympy.Expr:
    px = sympy.pi * x
    return sympy.Piecewise((1, sympy.Eq(x, 0)), (sympy.sin(px) / px, True))


def heaviside(x: sympy.Expr, at_zero: sympy.Expr) -> sympy.Expr:
    return sympy.Piecewise((0, compare(sympy.Lt, x, 0)), (1, compare(sympy.Gt, x, 0)),
                           (at_zero, compare(sympy.Eq, x, 0)), (x, True))   # NaN stays NaN


def signbit(x: sympy.Expr) -> sympy.Basic:
    return compare(sympy.Lt, x, 0)


_DEGREES = sympy.Float(180.0 / math.pi)   # the float constants numpy and JAX multiply by
_RADIANS = sympy.Float(math.pi / 180.0)

for _u, _f, _rule in [
        (np.rint, rint, "arith"), (np.trunc, trunc, "arith"),
        (np.fmod, fmod, "arith"), (np.copysign, copysign, "float"),
        (np.logaddexp, logaddexp, "float"), (np.logaddexp2, lambda a, b: logaddexp(a, b, False), "float"),
        (np.deg2rad, lambda x: x * _RADIANS, "float"), (np.radians, lambda x: x * _RADIANS, "float"),
        (np.rad2deg, lambda x: x * _DEGREES, "float"), (np.degrees, lambda x: x * _DEGREES, "float"),
        (np.heaviside, heaviside, "float"), (np.conjugate, lambda x: x, "same")]:
    implements(_u)(_ufunc_handler(_u, _f, _rule))
for _u, _f in [(np.isnan, isnan), (np.isinf, isinf), (np.isfinite, isfinite), (np.signbit, signbit)]:
    implements(_u)(_ufunc_handler(_u, lambda x, f=_f: f(x) if not x.is_integer else
                                  sympy.true if f is isfinite else sympy.false, "bool"))


@implements(np.float_power)
def float_power(x1, x2, **kwargs):
    """``x1 ** x2`` computed in float64, as numpy's float_power."""
    if kwargs:
        raise UnsupportedOperationError("numpy.float_power", f"arguments {sorted(kwargs)} are not supported")
    return apply("float_power", _power, [x1, x2], "float64", [as_arith, as_arith])


@implements(np.round, np.around)
def round_(a, decimals=0, out=None):
    if out is not None or not isinstance(decimals, (int, np.integer)):
        raise UnsupportedOperationError("numpy.round", "decimals must be a Python int, and out= is not supported")
    return apply("round", _round_to(int(decimals)), [a], result_dtype(trace_of([a]), [a], "arith"), [as_arith])


@implements(np.fix)
def fix(x, out=None):
    return np.trunc(x) if out is None else np.trunc(x, out=out)


@implements(np.sinc)
def sinc_(x):
    return apply("sinc", sinc, [x], result_dtype(trace_of([x]), [x], "float"), [as_arith])


@implements(np.nan_to_num)
def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    """NaN, +inf and -inf replaced (by default by 0 and the dtype's largest
    finite values); gradient 1 where ``x`` is finite, 0 elsewhere."""
    if not isinstance(x, TracedArray):
        raise UnsupportedOperationError("numpy.nan_to_num", "needs a traced array")
    if x.dtype_name not in FLOAT_DTYPES:
        return x if not copy else np.copy(x)
    big = float(ml_dtypes.finfo(x.dtype).max)
    high = ieee_float(big if posinf is None else posinf)   # an atom: sympy.Float prints the largest float as inf
    low = ieee_float(-big if neginf is None else neginf)
    fill = ieee_float(nan) if not np.isfinite(nan) else sympy.Float(nan)

    def body(v):
        return sympy.Piecewise((fill, isnan(v)), (high, compare(sympy.Eq, v, _INF)),
                               (low, compare(sympy.Eq, v, ieee_float(-math.inf))), (v, True))
    return apply("nan_to_num", body, [x], x.dtype_name, [as_arith])


@implements(np.real)
def real(val):
    return val   # real arrays only: complex dtypes are refused when they appear


@implements(np.imag)
def imag(val):
    return np.zeros_like(val)
