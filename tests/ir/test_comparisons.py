"""``ir.scalar_functions.compare``: a comparison of two computed values that
sympy keeps as written.  sympy 1.14's canonical form of some relationals is
not idempotent (``b - a*c < acos(-e*tanh(d))`` and ``acos(-e*tanh(d)) > -a*c
+ b`` turn into each other), and ``Piecewise`` re-canonicalises its conditions
whenever it is built or rebuilt, which recursed without end (fuzzer seeds
101315, 101997)."""
import numpy as np
import sympy

from ir.scalar_functions import COMPARISONS, comparison, compare

a, b, c, d, e = sympy.symbols("a b c d e", real=True)
LHS, RHS = b - a * c, sympy.acos(-e * sympy.tanh(d))


def test_piecewise_over_an_unstable_pair_builds_and_rebuilds():
    cond = compare(sympy.Lt, LHS, RHS)
    pw = sympy.Piecewise((1, cond), (sympy.S.Half, compare(sympy.Eq, LHS, RHS)), (0, True))
    assert pw.args[0].cond == cond                           # kept as written
    rebuilt = pw.xreplace({c: sympy.Float(0.75)})             # rebuilds every argument
    assert isinstance(rebuilt, sympy.Piecewise)
    # numbers fold: b - a*c = 2 - 3 = -1 < acos(0) = pi/2
    assert pw.subs({a: 1, b: 2, c: 3, d: 0, e: 1}) == 1
    inner = sympy.Piecewise((a, d > 0), (-b, True))          # a Piecewise inside a condition: folded to ITE
    assert isinstance(sympy.Piecewise((1, compare(sympy.Gt, sympy.acos(c * sympy.tanh(inner)), LHS)),
                                      (0, True)), sympy.Piecewise)


def test_a_number_side_stays_a_sympy_relational():
    assert isinstance(compare(sympy.Lt, LHS, 0), sympy.StrictLessThan)
    assert isinstance(compare(sympy.Ge, 2, a), sympy.GreaterThan)
    assert isinstance(compare(sympy.Lt, LHS, RHS), comparison)


def test_numbers_fold_by_ieee_rules():
    assert compare(sympy.Eq, a, a) not in (sympy.true, sympy.false)   # NaN != NaN at run time
    for rel, nan_result in ((sympy.Lt, sympy.false), (sympy.Ge, sympy.false), (sympy.Eq, sympy.false),
                            (sympy.Ne, sympy.true)):
        assert COMPARISONS[rel](sympy.nan, sympy.Integer(1)) is nan_result
    assert COMPARISONS[sympy.Lt](sympy.Integer(1), sympy.pi / 2) is sympy.true
    assert COMPARISONS[sympy.Eq](sympy.Float(0.5), sympy.Rational(1, 2)) is sympy.true


def test_numpy_evaluates_like_numpy():
    cond = compare(sympy.Le, LHS, RHS)
    f = sympy.lambdify([a, b, c, d, e], cond, "numpy")
    xs = [np.array([1.0, np.nan, 0.5, 2.0]), np.array([2.0, 1.0, np.inf, 0.0]), np.array([3.0, 1.0, 1.0, 1.0]),
          np.array([0.0, 0.3, 0.2, -1.0]), np.array([1.0, 0.5, 0.5, 0.2])]
    want = xs[1] - xs[0] * xs[2] <= np.arccos(-xs[4] * np.tanh(xs[3]))
    np.testing.assert_array_equal(f(*xs), want)
