"""numpy's scalar functions that sympy has no exact counterpart for.

``np.fmax``/``np.fmin`` drop a NaN argument (``np.fmax(nan, 0) == 0``) where
``sympy.Max`` (numpy's ``maximum``) propagates it, and ``np.cbrt`` is the real
cube root (``np.cbrt(-8) == -2``) where ``sympy.cbrt`` is the principal root
``x**(1/3)``, NaN for a negative float.  Each is a sympy function of its own
that evaluates numbers, prints for numpy (``_numpycode``, so the interpreter's
``lambdify`` calls numpy's own function) and carries its derivative
(``fdiff``: JAX's conventions, see each class).  Other printers dispatch on the
class name (``_print_fmax``...).  ``ieee_float`` is a float constant kept out
of sympy's constant folding, which is not IEEE arithmetic.  ``compare`` builds
a comparison of two computed values that sympy keeps as written (see
``ordering``).
"""
from __future__ import annotations

import struct

import sympy
from sympy.logic.boolalg import BooleanAtom


def _all_integer(args) -> bool:
    return all(a.is_integer for a in args)


class _NumpyBinary(sympy.Function):
    """A function of two values that numpy has as ``_numpy``: the interpreter calls it."""

    nargs = 2
    _numpy = ""

    def _numpycode(self, printer) -> str:
        return f"{printer._module_format(self._numpy)}({', '.join(printer._print(a) for a in self.args)})"


class fmax(_NumpyBinary):  # noqa: N801 (numpy's name; printers dispatch on it)
    """``np.fmax(a, b)``: the larger argument, the other one where one is NaN.

    Gradient as JAX's ``jnp.fmax = where((a > b) | isnan(b), a, b)``: all to
    ``a`` where it wins or ``b`` is NaN, all to ``b`` otherwise (ties
    included).  That mask is exactly ``b != fmax(a, b)`` under IEEE
    comparisons (``nan != nan``), which every printer can evaluate; sympy
    cannot state ``isnan`` (it folds ``Ne(b, b)`` to False)."""

    _extremum = sympy.Max
    _numpy = "numpy.fmax"

    @classmethod
    def eval(cls, a, b):
        if _all_integer((a, b)) or a == b:  # integers have no NaN; fmax(x, x) is x, NaN or not
            return cls._extremum(a, b)
        if a.is_Number and b.is_Number:
            return b if a is sympy.nan else a if b is sympy.nan else cls._extremum(a, b)
        return None

    def fdiff(self, argindex: int = 1):
        a_wins = compare(sympy.Ne, self.args[1], self)
        return sympy.Piecewise((1, a_wins), (0, True)) if argindex == 1 else \
            sympy.Piecewise((0, a_wins), (1, True))


class fmin(fmax):  # noqa: N801
    """``np.fmin(a, b)``: as ``fmax`` with the smaller argument; JAX's mask is
    ``(a < b) | isnan(b)``, again exactly ``b != fmin(a, b)``."""

    _extremum = sympy.Min
    _numpy = "numpy.fmin"


class maximum(_NumpyBinary):  # noqa: N801 (numpy's name; printers dispatch on it)
    """``np.maximum(a, b)``, NaN where either is NaN, kept binary: sympy's
    ``Max`` flattens nested maxima (``Max(a, Max(b, c))`` is ``Max(a, b, c)``),
    which loses how a program's own nesting splits a tie's derivative.  As
    JAX's: half to each side of each maximum at a tie, so at a three-way tie
    ``maximum(a, maximum(b, c))`` gives 1/2, 1/4, 1/4 (fuzzer seed 401840).
    Integers and numbers fold to ``Max``; ``maximum(x, x)`` is ``x``."""

    _extremum = sympy.Max
    _wins = sympy.Gt
    _numpy = "numpy.maximum"

    @classmethod
    def eval(cls, a, b):
        if a == b:
            return a
        if sympy.nan in (a, b):
            return sympy.nan
        if _all_integer((a, b)) or (a.is_Number and b.is_Number):
            return cls._extremum(a, b)
        return None

    def fdiff(self, argindex: int = 1):
        a, b = self.args if argindex == 1 else self.args[::-1]
        return sympy.Piecewise((1, compare(self._wins, a, b)), (sympy.S.Half, compare(sympy.Eq, a, b)), (0, True))


class minimum(maximum):  # noqa: N801
    """``np.minimum(a, b)``: as ``maximum`` with the smaller argument."""

    _extremum = sympy.Min
    _wins = sympy.Lt
    _numpy = "numpy.minimum"


class cbrt(sympy.Function):  # noqa: N801
    """``np.cbrt(x)``: the real cube root, negative for a negative ``x``.

    Derivative as JAX's: ``1 / (3 cbrt(x)**2)``, which is ``|x|**(-2/3) / 3``,
    ``inf`` at 0 and NaN at NaN."""

    nargs = 1

    @classmethod
    def eval(cls, x):
        if x.is_Number:
            return sympy.nan if x is sympy.nan else sympy.real_root(x, 3)
        return None

    def fdiff(self, argindex: int = 1):
        return 1 / (3 * self ** 2)

    def _numpycode(self, printer) -> str:
        return f"{printer._module_format('numpy.cbrt')}({printer._print(self.args[0])})"


class ordering(sympy.Function):  # noqa: N801 (printers dispatch on it)
    """How ``a`` compares with ``b``: -1, 0 or 1, NaN where they are unordered
    (a NaN argument), so that ``relation(ordering(a, b), 0)`` is exactly
    ``relation(a, b)`` by IEEE rules (``compare`` builds it).

    Why not ``relation(a, b)`` itself: ``Piecewise`` puts each relational
    condition in sympy's canonical form whenever it is built (``xreplace``,
    ``subs`` and ``diff`` rebuild it), and that canonical form is not
    idempotent for some pairs of computed values (sympy 1.14: ``b - a*c <
    acos(-e*tanh(d))`` and ``acos(-e*tanh(d)) > -a*c + b`` turn into each
    other), so building the Piecewise recursed until Python gave up.  Against
    0, with a function sympy cannot see into on the left, the canonical form
    is the relational as written.  It also keeps sympy from dividing the
    sides by a coefficient (``x + 1 < 3*y`` as ``y > x/3 + 1/3``), which
    rounds differently.  Printers write ``relation(ordering(a, b), 0)`` as ``a OP b``;
    alone (a common subexpression) it is the select chain its definition says.
    Piecewise constant: derivative 0."""

    nargs = 2

    @classmethod
    def eval(cls, a, b):
        if not (a.is_number and b.is_number) or sympy.nan in (a, b):
            return None
        try:
            less, greater = sympy.Lt(a, b), sympy.Gt(a, b)
        except TypeError:  # complex infinity and the like: left to run time
            return None
        if not isinstance(less, BooleanAtom) or not isinstance(greater, BooleanAtom):
            return None
        return sympy.Integer(-1 if less else 1 if greater else 0)

    def fdiff(self, argindex: int = 1):
        return sympy.S.Zero

    def _numpycode(self, printer) -> str:
        a, b = (printer._print(x) for x in self.args)
        np_ = printer._module_format
        return (f"{np_('numpy.select')}([{np_('numpy.less')}({a}, {b}), {np_('numpy.greater')}({a}, {b}), "
                f"{np_('numpy.equal')}({a}, {b})], [-1.0, 1.0, 0.0], {np_('numpy.nan')})")


def compare(relation: type, a: sympy.Basic, b: sympy.Basic) -> sympy.Basic:
    """``relation(a, b)`` (``sympy.Lt``...) in a form sympy keeps as written:
    the relational itself where one side is a number (its canonical form is
    reached in one step: the number goes right, a sign may flip), else
    ``relation(ordering(a, b), 0)``."""
    a, b = sympy.sympify(a), sympy.sympify(b)
    if a.is_number or b.is_number:
        return relation(a, b)
    return relation(ordering(a, b), 0)


def logical_not(condition: sympy.Basic) -> sympy.Basic:
    """numpy's ``~`` of a boolean expression.  sympy's ``Not`` turns a
    comparison into its complement (``~(x < y)`` as ``x >= y``), which is
    False where an operand is NaN, while numpy's is True there: so a negated
    comparison also holds where an operand is NaN (``v != v``, through
    ``compare``), and ``~`` goes through And/Or/Xor by De Morgan's rules to the
    comparisons inside."""
    condition = sympy.sympify(condition)
    if isinstance(condition, sympy.And):
        return sympy.Or(*(logical_not(c) for c in condition.args))
    if isinstance(condition, sympy.Or):
        return sympy.And(*(logical_not(c) for c in condition.args))
    if isinstance(condition, sympy.Not):
        return condition.args[0]
    if isinstance(condition, sympy.Xor):
        first, *rest = condition.args
        return sympy.Xor(logical_not(first), *rest)
    if isinstance(condition, sympy.core.relational.Relational):
        lhs, rhs = condition.lhs, condition.rhs
        operands = lhs.args if isinstance(lhs, ordering) and rhs == 0 else (lhs, rhs)
        nan = [compare(sympy.Ne, v, v) for v in operands if not v.is_number and not v.is_integer]
        return sympy.Or(sympy.Not(condition), *nan)
    return sympy.Not(condition)


class ieee_float(sympy.AtomicExpr):  # noqa: N801 (printers dispatch on the class name)
    """A float constant sympy must not fold: ``inf``, ``-inf``, NaN, ``-0.0``,
    and a zero that multiplies or divides.

    sympy's arithmetic is not IEEE's: ``x / 0.0`` folds to ``zoo*x`` (complex
    infinity, which no printer can write), ``x + nan`` to ``nan`` (losing
    JAX's gradient 1), ``0.0 * x`` and ``0.0 / x`` to ``0`` (numpy: NaN where
    ``x`` is inf, NaN or, dividing, 0), and it has no ``-0.0``.  As an opaque
    atom the constant stays a factor or term as written, its derivative is 0,
    so the chain rule gives JAX's gradients (``d(x * inf)/dx = inf``), and
    every printer writes the float it holds, so the arithmetic happens at run
    time by IEEE rules, as in numpy.  An atom, not a function, so that ``cse``
    never names it apart from the product it is in (the Slang printer needs
    to see a zero factor: ``lowering.printer``)."""

    is_number = False   # never evaluated numerically: that is the folding it exists to avoid
    is_commutative = True
    __slots__ = ("value",)

    def __new__(cls, value: float) -> "ieee_float":
        obj = super().__new__(cls)
        obj.value = float(value)
        return obj

    def _hashable_content(self) -> tuple:
        return (struct.pack("<d", self.value),)   # bits: NaN equals NaN, -0.0 differs from 0.0

    def __getnewargs__(self) -> tuple:
        return (self.value,)

    def _eval_evalf(self, prec):
        return None

    def _sympystr(self, printer) -> str:
        return repr(self.value)

    def _numpycode(self, printer) -> str:
        value = self.value
        if value != value or value in (float("inf"), float("-inf")):
            sign = "-" if value < 0 else ""
            return sign + printer._module_format("numpy.nan" if value != value else "numpy.inf")
        return f"({value!r})"
