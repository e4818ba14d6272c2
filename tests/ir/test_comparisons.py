"""``ir.scalar_functions.compare``: a comparison of two computed values that
sympy keeps as written.  sympy 1.14's canonical form of some relationals is
not idempotent (``b - a*c < acos(-e*tanh(d))`` and ``acos(-e*tanh(d)) > -a*c
+ b`` turn into each other), and ``Piecewise`` re-canonicalises its conditions
whenever it is built or rebuilt, which recursed without end (fuzzer seeds
101315, 101997)."""
import numpy as np
import sympy

from symdiff.ir.scalar_functions import compare, ordering

a, b, c, d, e = sympy.symbols("a b c d e", real=True)
LHS, RHS = b - a * c, sympy.acos(-e * sympy.tanh(d))


def test_piecewise_over_an_unstable_pair_builds_and_rebuilds():
    cond = compare(sympy.Lt, LHS, RHS)
    pw = sympy.Piecewise((1, cond), (sympy.S.Half, compare(sympy.Eq, LHS, RHS)), (0, True))
    assert pw.args[0].cond == cond                            # kept as written
    assert isinstance(pw.xreplace({c: sympy.Float(0.75)}), sympy.Piecewise)   # rebuilt
    assert pw.subs({a: 1, b: 2, c: 3, d: 0, e: 1}) == 1       # numbers fold: -1 < acos(0)
    inner = sympy.Piecewise((a, d > 0), (-b, True))           # a Piecewise in a condition becomes an ITE
    folded = sympy.Piecewise((1, compare(sympy.Gt, sympy.acos(c * sympy.tanh(inner)), LHS)), (0, True))
    assert isinstance(folded, sympy.Piecewise)


def test_a_number_side_stays_a_plain_relational():
    assert compare(sympy.Lt, LHS, 0) == sympy.Lt(LHS, 0)
    assert compare(sympy.Ge, 2, a) == sympy.Ge(2, a)
    assert compare(sympy.Lt, LHS, RHS) == sympy.Lt(ordering(LHS, RHS), 0)


def test_ordering_folds_numbers_by_ieee_rules():
    assert ordering(sympy.Integer(1), sympy.pi / 2) == -1
    assert ordering(sympy.Float(0.5), sympy.Rational(1, 2)) == 0
    assert ordering(sympy.oo, sympy.oo) == 0 and ordering(sympy.oo, sympy.Integer(3)) == 1
    assert isinstance(ordering(sympy.nan, sympy.Integer(1)), ordering)   # unordered: left to run time
    assert isinstance(ordering(a, a), ordering)                         # NaN != NaN at run time


def test_numpy_compares_like_numpy():
    x = np.array([1.0, np.nan, np.inf, 2.0, -np.inf, 0.0])
    y = np.array([1.0, 0.0, np.inf, 1.0, 3.0, np.nan])
    for rel, ufunc in ((sympy.Lt, np.less), (sympy.Le, np.less_equal), (sympy.Gt, np.greater),
                       (sympy.Ge, np.greater_equal), (sympy.Eq, np.equal), (sympy.Ne, np.not_equal)):
        f = sympy.lambdify([a, b], compare(rel, a, b), "numpy")
        with np.errstate(invalid="ignore"):
            np.testing.assert_array_equal(f(x, y), ufunc(x, y), err_msg=rel.__name__)
