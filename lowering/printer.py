"""sympy -> Slang expression printer.

Tasklet bodies are sympy expressions; the kernels need Slang text whose
literals carry the program's precision (an untyped ``1.5`` would silently
promote float32 arithmetic, and an untyped literal in a double program would
lose precision), whose conditions are branch-free ``select``s, and whose small
integer powers are multiplications (``pow`` is slow and wrong for negative
bases).  Integer (index) arithmetic follows Python/sympy semantics: ``Mod`` and
``floor`` of a quotient round toward minus infinity, unlike Slang's ``%``/``/``.
Only index arithmetic (``is_index_valued``) is printed as ``int``: ``floor`` of
float data is integer-valued to sympy but stays a float ``floor``.
"""
from __future__ import annotations

import functools
import math

import re
from typing import Mapping

import numpy as np
import sympy
from sympy.codegen.cfunctions import expm1, log1p
from sympy.printing.c import C99CodePrinter
from sympy.printing.precedence import precedence

from symdiff.ir.index_analysis import cancel_floors
from symdiff.ir.scalar_functions import cbrt, fmax, fmin, ieee_float, maximum, minimum, ordering

from . import cpu_math, targets

# The type a value of each dtype is computed in (16-bit floats: float32, ``ir.storage``)
SLANG_TYPES = {"float32": "float", "float64": "double", "int32": "int", "bool": "bool", "float16": "float",
               "bfloat16": "float"}

# Helpers the printed expressions may call, for every target (``prelude``).
# maximum/minimum/power/sign follow numpy at the points where Slang's built-ins
# (or some target's version of them) do not: a NaN argument of maximum or
# minimum gives NaN (max/min return the other argument, like fmax), and a
# negative base to an integer power is a real number (pow is exp2(y log2 x)
# on Vulkan: NaN for x < 0).  Nested selects rather than || and &&: Slang
# turns those into branches, which stop g++ vectorising the CPU device's loops.
_HELPERS = """\
// Floor division and modulo (Python semantics) for index arithmetic.
int floordiv(int a, int b) { int q = a / b; return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q; }
int floormod(int a, int b) { return a - b * floordiv(a, b); }
// log(1 + x) and exp(x) - 1 without cancellation near 0 (``unfolded``: Slang's
// SPIR-V optimiser folded (1 + x) - 1 to x, undoing the correction on Vulkan).
float log1p_(float x) { float u = 1.0f + x; return u == 1.0f ? x : log_f32(u) * x / (unfolded(u, x) - 1.0f); }
double log1p_(double x) { double u = 1.0l + x; return u == 1.0l ? x : log(u) * x / (unfolded(u, x) - 1.0l); }
float expm1_(float x) { float u = exp_f32(x); return u == 1.0f ? x : (u - 1.0f == -1.0f ? -1.0f : (u - 1.0f) * x / log_f32(u)); }
double expm1_(double x) { double u = exp(x); return u == 1.0l ? x : (u - 1.0l == -1.0l ? -1.0l : (u - 1.0l) * x / log(u)); }
// 16-bit floats in buffers (ir.storage), in integer arithmetic on every target: widened exactly,
// rounded to nearest even (the CPU device's f32tof16 rounds ties away from even, and Slang's
// f16tof32 and f32tof16 need CUDA's half header, which its CUDA output leaves out)
float f16_value(uint16_t bits)
{
    uint h = uint(bits), rest = h & 0x7fffu;
    uint special = 0u - uint(rest >= 0x7c00u), tiny = 0u - uint(rest < 0x400u);  // all ones where so
    uint wide = (rest << 13) + 0x38000000u + (special & 0x38000000u);  // inf and NaN: the exponent all ones
    uint subnormal = asuint(float(int(rest)) * 5.9604644775390625e-8f);  // rest * 2^-24, exactly
    return asfloat(((h & 0x8000u) << 16) | (subnormal & tiny) | (wide & ~tiny));
}
float bf16_value(uint16_t bits) { return asfloat(uint(bits) << 16); }
// (f16_value and f16_bits choose by masks, and round subnormals by a float addition: nested
// selects and variable shifts left the CPU device's loops scalar; docs/benchmarks.md)
uint16_t f16_bits(float x)
{
    uint u = asuint(x), a = u & 0x7fffffffu, sign = (u >> 16) & 0x8000u;
    uint m = a - 0x38000000u;  // a normal half: the exponent rebiased, 13 bits rounded off
    uint normal = (m + 0xfffu + ((m >> 13) & 1u)) >> 13;
    // a subnormal one: |x| 2^24 (exact) rounded to nearest even by the float addition of 2^23
    uint subnormal = asuint(asfloat(a) * 16777216.0f + 8388608.0f) - 0x4b000000u;
    uint is_normal = 0u - uint(a >= 0x38800000u), big = 0u - uint(a >= 0x477ff000u), nan = 0u - uint(a > 0x7f800000u);
    uint finite = (normal & is_normal) | (subnormal & ~is_normal);
    return uint16_t(sign | ((0x7c00u | (nan & 0x200u)) & big) | (finite & ~big));  // 65520 and past: infinity
}
uint16_t bf16_bits(float x) { uint u = asuint(x); return uint16_t(select(x != x, (u >> 16) | 0x40u, (u + 0x7fffu + ((u >> 16) & 1u)) >> 16)); }
"""
# numpy's maximum/minimum (NaN if either argument is NaN) and power, per float type
_PER_TYPE = """\
T maximum(T a, T b) { return select(b != b, b, select(a <= b, b, a)); }
T minimum(T a, T b) { return select(b != b, b, select(a >= b, b, a)); }
// numpy's fmax/fmin: a NaN argument gives the other one
T fmax_(T a, T b) { return select(b != b, a, select(a != a, b, select(a <= b, b, a))); }
T fmin_(T a, T b) { return select(b != b, a, select(a != a, b, select(a >= b, b, a))); }
T power(T x, T y)
{
    T m = select(select(x == ZERO, y < ZERO, false), INF, POW(abs(x), y));  // 0**-1: pow(0, y <= 0) is undefined in SPIR-V
    bool integral = floor(y) == y;
    bool odd = select(integral, floor(y * HALF) != y * HALF, false);
    bool negative = select(x == ZERO, ONE / x < ZERO, x < ZERO);  // -0 too: (-0)**-1 = -inf
    T r = select(select(negative, odd, false), -m, m);
    r = select(select(x < ZERO, integral, true), r, NAN);  // a negative base to a fractional power
    return select(y == ZERO, ONE, select(x == ONE, ONE, r));  // x**0 = 1**y = 1, NaN or not
}
// 0.0 * r by IEEE rules (written 0.0f * r, it is folded to 0): NaN if r is inf or NaN, else a zero
// with the sign of the product (sign: a zero factor's sign bit)
T times_zero(T r, uint sign) { T zero = TYPE(asfloat((asuint(float(r)) & 0x80000000u) ^ sign)); return select(abs(r) < INF, zero, NAN); }
// numpy's cbrt: the real cube root (the odd extension of |x|**(1/3))
T cbrt_(T x) { T m = power(abs(x), THIRD); return select(x < ZERO, -m, m); }
"""
_LITERALS = {"float": {"HALF": "0.5f", "THIRD": "0.33333334f", "ZERO": "0.0f", "ONE": "1.0f",
                       "NAN": "asfloat(0x7FC00000u)", "INF": "asfloat(0x7F800000u)", "TYPE": "float", "POW": cpu_math.FUNCTIONS["pow"]},
             "double": {"HALF": "0.5l", "THIRD": "0.3333333333333333l", "ZERO": "0.0l", "ONE": "1.0l",
                        "NAN": "double(asfloat(0x7FC00000u))", "INF": "double(asfloat(0x7F800000u))", "TYPE": "double",
                        "POW": "pow"}}


def _per_type(scalar: str) -> str:
    text = _PER_TYPE.replace("T ", f"{scalar} ")
    for name, value in _LITERALS[scalar].items():
        text = re.sub(rf"\b{name}\b", value, text)
    return text


def prelude(target: "str | targets.Target") -> str:
    """The helpers of every module for one target: its maths functions
    (``cpu_math.source``) and the helpers above."""
    return (cpu_math.source(targets.of(target)) + _HELPERS + _per_type("float") + _per_type("double")
            + "int maximum(int a, int b) { return max(a, b); }\nint minimum(int a, int b) { return min(a, b); }\n")


# Functions that are exact (or correctly rounded) in lavapipe's double
# arithmetic; anything else on a double is a transcendental it gets wrong.
EXACT_FUNCTIONS = (sympy.Abs, sympy.Max, sympy.Min, maximum, minimum, fmax, fmin, sympy.sign, sympy.Heaviside,
                   sympy.Piecewise, sympy.floor, sympy.ceiling, sympy.Mod, ordering)


class SlangPrinter(C99CodePrinter):
    """Prints one expression in a given scalar type context.

    ``names`` maps symbols to Slang identifiers (connectors and index symbols
    are renamed per tasklet so fused tasklets cannot clash); ``scalar`` is the
    Slang type literals and integer-valued subterms are converted to.
    """

    printmethod = "_slang"
    _MAX_POWER_BY_MULTIPLICATION = 16
    # C's M_LN10, M_SQRT2...: not Slang.  A class attribute, not the ``math_macros`` setting:
    # sympy evaluates its default (a dict of 20 sympy expressions) on every construction otherwise,
    # and codegen makes a printer per expression.
    math_macros: dict = {}

    def __init__(self, scalar: str = "float", names: Mapping[sympy.Symbol, str] | None = None,
                 precision: str | None = None):
        super().__init__({"strict": False})
        self.scalar = scalar
        self.precision = precision or (scalar if scalar != "int" else "float")
        self.names = dict(names or {})
        self.known_functions = {
            name: name for name in ("sin", "cos", "tan", "asin", "acos", "atan", "atan2", "exp", "log",
                                    "log2", "log10", "exp2", "sinh", "cosh", "tanh", "sqrt",
                                    "asinh", "acosh", "atanh")}
        self.known_functions.update({"Abs": "abs", "ceiling": "ceil"})
        if scalar == "float":  # vectorisable on the CPU device, the built-ins elsewhere
            self.known_functions.update(cpu_math.FUNCTIONS)

    def _handle_UnevaluatedExpr(self, expr):
        # sympy rewrites re(UnevaluatedExpr(x)) at every doprint, walking and rebuilding the whole
        # tree; without an re there is nothing to rewrite (codegen: ~0.3 of 3 profiled s)
        return super()._handle_UnevaluatedExpr(expr) if expr.has(sympy.re) else expr

    def parenthesize(self, item, level, strict=False) -> str:
        # a rational prints as one literal, not as the division sympy ranks it as
        if isinstance(item, sympy.Rational) and item >= 0 and self.scalar != "int":
            return self._print(item)
        return super().parenthesize(item, level, strict)

    # -- leaves ---------------------------------------------------------------
    def literal(self, value) -> str:
        """A literal of the context type; integers stay integers in int context."""
        if self.scalar == "int":
            if np.isinf(value):  # an int max/min's identity: int32's extremes (-2^31 spelled as no literal overflows)
                return "2147483647" if value > 0 else "(-2147483647 - 1)"
            return str(int(value))
        value = float(value)
        if not np.isfinite(value):
            inf = "asfloat(0x7F800000u)" if value > 0 else "asfloat(0xFF800000u)"
            if np.isnan(value):
                inf = "asfloat(0x7FC00000u)"
            return inf if self.scalar == "float" else f"double({inf})"
        if self.scalar == "float":
            text = np.format_float_scientific(np.float32(value), unique=True, trim="0") \
                if value != 0 and not 1e-4 <= abs(value) < 1e7 else \
                np.format_float_positional(np.float32(value), unique=True, trim="0")
            return f"{text}f"
        text = repr(value)
        return text + ("" if any(c in text for c in ".e") else ".0") + "l"

    def _print_Symbol(self, expr: sympy.Symbol) -> str:
        name = self.names.get(expr, expr.name)
        if expr.is_integer and self.scalar != "int":
            return f"{self.scalar}({name})"
        return name

    # Every value is a real number (or NaN): sympy writes |b**e|, and derivatives of |f|,
    # with re/im/arg where it cannot prove e or f real (tanh(log2(a*b + 1))); numpy's
    # np.real/np.imag/np.angle of real arrays give x, 0 and 0 or pi, and so does this.
    def _print_re(self, expr) -> str:
        return self._print(expr.args[0])

    def _print_im(self, expr) -> str:
        return self.literal(0)

    def _print_arg(self, expr) -> str:
        return f"select({self._print(expr.args[0])} < {self.literal(0)}, {self.literal(math.pi)}, {self.literal(0)})"

    def _print_Integer(self, expr) -> str:
        return self.literal(int(expr))

    _print_Zero = _print_Integer
    _print_One = _print_Integer
    _print_NegativeOne = _print_Integer

    def _print_Float(self, expr) -> str:
        return self.literal(float(expr))

    def _print_Rational(self, expr) -> str:
        if self.scalar == "int":
            return f"floordiv({expr.p}, {expr.q})"
        return self.literal(float(expr))

    _print_Half = _print_Rational

    def _print_NumberSymbol(self, expr) -> str:
        return self.literal(float(expr))

    def _print_Exp1(self, expr) -> str:
        return self.literal(float(expr))

    def _print_Pi(self, expr) -> str:
        return self.literal(float(expr))

    def _print_Infinity(self, expr) -> str:
        return self.literal(np.inf)

    def _print_NegativeInfinity(self, expr) -> str:
        return self.literal(-np.inf)

    def _print_NaN(self, expr) -> str:
        return self.literal(np.nan)

    def _print_ieee_float(self, expr) -> str:  # ir.scalar_functions.ieee_float: inf, NaN, -0.0, 0
        return self.literal(expr.value)

    def _print_BooleanTrue(self, expr) -> str:
        return "true"

    def _print_BooleanFalse(self, expr) -> str:
        return "false"

    # -- arithmetic -----------------------------------------------------------
    def _print_Mul(self, expr: sympy.Mul) -> str:
        """A literal zero factor (``ieee_float``, the tracer's ``0.0 * x``,
        ``0.0 / x``) goes through ``times_zero``: the SPIR-V optimizer folds
        ``x * 0.0f`` and ``0.0f / x`` to 0, where IEEE (numpy) gives NaN for an
        infinite or NaN ``x`` (or a zero divisor)."""
        zero = next((a for a in expr.args if isinstance(a, ieee_float) and a.value == 0), None)
        if zero is None or self.scalar == "int":
            return super()._print_Mul(expr)
        rest = sympy.Mul(*(a for a in expr.args if a is not zero))
        sign = "0x80000000u" if np.signbit(zero.value) else "0u"
        return f"times_zero({self._print(rest)}, {sign})"

    def _print_Pow(self, expr: sympy.Pow) -> str:
        base, exp = expr.base, expr.exp
        if exp.is_Float and float(exp) in (0.5, -0.5) or exp.is_Float and float(exp).is_integer():
            exp = sympy.Rational(float(exp))
        if base is sympy.E:
            return f"{self.known_functions['exp']}({self._print(exp)})"
        if exp.is_Integer and 0 < abs(int(exp)) <= self._MAX_POWER_BY_MULTIPLICATION:
            factor = self.parenthesize(base, precedence(sympy.Mul(2, sympy.Symbol("x"), evaluate=False)))
            product = " * ".join([factor] * abs(int(exp)))
            if int(exp) > 0:
                return product if int(exp) == 1 else f"({product})"
            return f"({self.literal(1)} / ({product}))"
        if exp == sympy.Rational(1, 2):
            return f"sqrt({self._print(base)})"
        if exp == sympy.Rational(-1, 2):
            return f"rsqrt({self._print(base)})"
        return f"{'pow' if self.scalar == 'int' else 'power'}({self._print(base)}, {self._print(exp)})"

    def _print_Mod(self, expr: sympy.Mod) -> str:
        a, b = (self._print(arg) for arg in expr.args)
        if self.scalar == "int":
            return f"floormod({a}, {b})"
        return f"({a} - {b} * floor({a} / {b}))"

    def _print_floor(self, expr) -> str:
        arg = expr.args[0]
        if self.scalar == "int":
            num, den = sympy.fraction(sympy.together(arg))
            if is_index_valued(num) and is_index_valued(den):
                return f"floordiv({self._print(num)}, {self._print(den)})" if den != 1 else self._print(num)
            # floor of a float (np.floor of data): rounded in floating point, not truncated by int()
            return f"int(floor({SlangPrinter(self.precision, self.names, self.precision)._print(arg)}))"
        return f"floor({self._print(arg)})"

    def _print_Max(self, expr) -> str:
        return self._nested("maximum", expr.args)

    def _print_Min(self, expr) -> str:
        return self._nested("minimum", expr.args)

    def _print_maximum(self, expr) -> str:
        return self._nested("maximum", expr.args)

    def _print_minimum(self, expr) -> str:
        return self._nested("minimum", expr.args)

    def _print_fmax(self, expr) -> str:
        return self._nested("fmax_", expr.args)

    def _print_fmin(self, expr) -> str:
        return self._nested("fmin_", expr.args)

    def _print_cbrt(self, expr) -> str:
        return f"cbrt_({self._print(expr.args[0])})"

    def _nested(self, fn: str, args) -> str:
        text = self._print(args[0])
        for arg in args[1:]:
            text = f"{fn}({text}, {self._print(arg)})"
        return text

    def _print_sign(self, expr) -> str:
        # x itself where it is neither positive nor negative: +-0, or NaN as np.sign(nan)
        x = self._print(expr.args[0])
        return f"select({x} > {self.literal(0)}, {self.literal(1)}, select({x} < {self.literal(0)}, {self.literal(-1)}, {x}))"

    def _print_Heaviside(self, expr) -> str:
        # 0 at NaN, as JAX's gradient of maximum there
        x = self._print(expr.args[0])
        at_zero = expr.args[1] if len(expr.args) > 1 else sympy.Rational(1, 2)
        return f"select({x} > {self.literal(0)}, {self.literal(1)}, " \
               f"select({x} == {self.literal(0)}, {self._print(at_zero)}, {self.literal(0)}))"

    def _print_log1p(self, expr) -> str:
        return f"log1p_({self._print(expr.args[0])})"

    def _print_expm1(self, expr) -> str:
        return f"expm1_({self._print(expr.args[0])})"

    # -- conditions -----------------------------------------------------------
    def _print_Piecewise(self, expr: sympy.Piecewise) -> str:
        *pieces, (last, last_cond) = expr.args
        text = self._print(last)
        if last_cond is not sympy.true:
            text = f"select({self._print(last_cond)}, {text}, {self.literal(np.nan)})"
        for value, cond in reversed(pieces):
            text = f"select({self._print(cond)}, {self._print(value)}, {text})"
        return text

    def _print_Relational(self, expr) -> str:
        op = {"==": "==", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}[expr.rel_op]
        lhs, rhs = expr.lhs, expr.rhs
        if isinstance(lhs, ordering) and rhs == 0:   # ir.scalar_functions.compare: relation(ordering(a, b), 0)
            lhs, rhs = lhs.args
        printer = self
        index = is_index_valued(lhs) and is_index_valued(rhs)
        if index and self.scalar != "int":
            printer = SlangPrinter("int", self.names, self.precision)
        elif not index and self.scalar == "int":
            printer = SlangPrinter(self.precision, self.names, self.precision)
        return f"({printer._print(lhs)} {op} {printer._print(rhs)})"

    def _print_ordering(self, expr) -> str:  # ir.scalar_functions.ordering alone (a common subexpression)
        printer = self if self.scalar != "int" else SlangPrinter(self.precision, self.names, self.precision)
        a, b = (printer._print(x) for x in expr.args)
        lit = printer.literal
        return (f"select({a} < {b}, {lit(-1)}, select({a} > {b}, {lit(1)}, "
                f"select({a} == {b}, {lit(0)}, {lit(np.nan)})))")

    def _print_And(self, expr) -> str:
        return "(" + " && ".join(self._print(a) for a in expr.args) + ")"

    def _print_Or(self, expr) -> str:
        return "(" + " || ".join(self._print(a) for a in expr.args) + ")"

    def _print_Not(self, expr) -> str:
        return f"!{self._print(expr.args[0])}"

    def _print_ITE(self, expr) -> str:
        c, a, b = expr.args
        return f"select({self._print(c)}, {self._print(a)}, {self._print(b)})"


def is_index_valued(expr: sympy.Basic) -> bool:
    """Whether ``expr`` is integer arithmetic on integer symbols (map indices,
    int32 data), which the int context computes exactly.  ``floor(x)`` of a
    float ``x`` is integer-valued too (sympy says ``is_integer``) but is not:
    as an ``int`` it would be the truncation ``int(x)`` or overflow past 2**31."""
    expr = sympy.sympify(expr)
    # the symbols first: a float connector settles it, where sympy's is_integer of a body
    # (a gather's sum of Piecewise terms) asks its assumptions of every term, milliseconds each
    return all(s.is_integer for s in expr.free_symbols) and bool(expr.is_integer)


def print_expr(expr: sympy.Basic, scalar: str = "float", names: Mapping[sympy.Symbol, str] | None = None,
               precision: str | None = None) -> str:
    """Slang text for ``expr`` computed in ``scalar`` ("float", "double" or "int");
    ``precision`` is the float type comparisons inside integer code fall back to."""
    return SlangPrinter(scalar, names, precision).doprint(sympy.sympify(expr))


def print_flat_index(index, strides, names: Mapping[sympy.Symbol, str]) -> str:
    """Slang ``int`` text of the flat element ``sum(index[k] * strides[k])``, as
    ``print_expr`` prints it.  Cached per (index, strides) as a template with the
    symbols' names left open: every load and store prints one, an unrolled loop
    repeats the same few indices under other names (each tasklet's point
    symbols), and sympy's ordering of a sum's terms cost ~0.5 ms a print."""
    parts, symbols = _flat_index_template(tuple(index), tuple(strides))
    return "".join(part if k % 2 == 0 else names.get(symbols[part], symbols[part].name)
                   for k, part in enumerate(parts))


_OPEN_NAME = re.compile("\x01(\\d+)\x02")  # a name left open in a template: \x01<symbol's position>\x02


@functools.lru_cache(maxsize=16384)
def _flat_index_template(index: tuple, strides: tuple) -> tuple[tuple, tuple]:
    """``(parts, symbols)``: the printed index split at its symbols' names (odd parts:
    positions in ``symbols``).  A reshaped view's ``floor``/``Mod`` pairs cancel
    (``ir.index_analysis.cancel_floors``): no integer divisions left where the
    flat element is affine after all."""
    expr = cancel_floors(sum((sympy.sympify(i) * s for i, s in zip(index, strides)), sympy.Integer(0)))
    symbols = tuple(expr.atoms(sympy.Symbol))
    text = print_expr(expr, "int", {s: f"\x01{k}\x02" for k, s in enumerate(symbols)})
    parts = _OPEN_NAME.split(text)
    return tuple(int(p) if k % 2 else p for k, p in enumerate(parts)), symbols


def is_exact_in_double(expr: sympy.Basic) -> bool:
    """Whether ``expr`` only uses operations lavapipe computes correctly on doubles
    (``+ - * /``, ``sqrt``, integer powers, comparisons, selects)."""
    for node in sympy.preorder_traversal(sympy.sympify(expr)):
        if isinstance(node, sympy.Pow):
            if not (node.exp.is_Integer or node.exp in (sympy.Rational(1, 2), sympy.Rational(-1, 2))):
                return False
        elif isinstance(node, (sympy.Function, log1p, expm1)) and not isinstance(node, EXACT_FUNCTIONS):
            return False
    return True
