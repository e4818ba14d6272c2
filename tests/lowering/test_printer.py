"""sympy -> Slang printing."""
import pytest
import sympy
from sympy.codegen.cfunctions import expm1, log1p

from symdiff.lowering.printer import SlangPrinter, is_exact_in_double, print_expr

x, y = sympy.symbols("x y", real=True)
n = sympy.Symbol("n", integer=True)


@pytest.mark.parametrize("expr, float32, float64", [
    (x + 1.5, "x + 1.5f", "x + 1.5l"),
    (x / 3, "0.33333334f*x", "0.3333333333333333l*x"),
    (x ** 2, "(x * x)", "(x * x)"),
    (x ** 3 * y, "(x * x * x)*y", None),
    (x ** -2, "(1.0f / (x * x))", "(1.0l / (x * x))"),
    (1 / sympy.sqrt(x), "rsqrt(x)", "rsqrt(x)"),
    (sympy.sqrt(x + y), "sqrt(x + y)", None),
    (x ** 0.7, "power(x, 0.7f)", "power(x, 0.7l)"),
    (sympy.Max(x, y, 0), "maximum(maximum(0.0f, x), y)", None),
    (sympy.Min(x, 2), "minimum(2.0f, x)", None),
    (sympy.Abs(x), "abs(x)", None),
    (log1p(x), "log1p_(x)", None),
    (expm1(x), "expm1_(x)", None),
    (sympy.pi * x, "3.1415927f*x", "3.141592653589793l*x"),
    (n * x, "float(n)*x", "double(n)*x"),
    (sympy.oo, "asfloat(0x7F800000u)", "double(asfloat(0x7F800000u))"),
])
def test_typed_literals_and_powers(expr, float32, float64):
    assert print_expr(expr, "float") == float32
    if float64:
        assert print_expr(expr, "double") == float64


def test_conditions_are_selects():
    assert print_expr(sympy.Piecewise((x, x > 0), (y, True))) == "select((x > 0.0f), x, y)"
    assert print_expr(sympy.Piecewise((x, sympy.And(x > 0, y < 1)), (0, True))) == \
        "select(((x > 0.0f) && (y < 1.0f)), x, 0.0f)"
    assert print_expr(sympy.Heaviside(x)) == "select(x > 0.0f, 1.0f, select(x == 0.0f, 0.5f, 0.0f))"  # 0 at NaN
    assert print_expr(sympy.sign(x)) == "select(x > 0.0f, 1.0f, select(x < 0.0f, -1.0f, x))"  # +-0 or NaN: x
    assert print_expr(sympy.Or(x > 1, y < 0)) == "((x > 1.0f) || (y < 0.0f))"
    b = sympy.Symbol("b")
    assert print_expr(sympy.Not(b)) == "!b"


def test_integer_index_arithmetic_rounds_toward_minus_infinity():
    assert print_expr(sympy.floor(n / 3), "int") == "floordiv(n, 3)"
    assert print_expr(sympy.Mod(n, 4), "int") == "floormod(n, 4)"
    assert print_expr(2 * n + 1, "int") == "2*n + 1"
    assert print_expr(n ** 2, "int") == "(n * n)"


def test_exactness_on_doubles_is_decided_by_the_functions_used():
    assert is_exact_in_double(x * y / (x + 1) + sympy.sqrt(x) + sympy.Max(x, 0) + x ** -3)
    assert not is_exact_in_double(sympy.exp(x))
    assert not is_exact_in_double(x ** 0.3)
    assert not is_exact_in_double(sympy.tanh(x) * 2)


def test_float_remainder_takes_the_sign_of_the_divisor():
    """numpy's remainder (and Python's %), not Slang's fmod-like ``%``: the
    devices' values are checked in test_edge_programs.py."""
    assert print_expr(sympy.Mod(x, y)) == "(x - y * floor(x / y))"
    assert print_expr(sympy.Mod(x, y), "double") == "(x - y * floor(x / y))"


def test_a_flat_index_prints_as_its_sum_does_under_any_names():
    """``print_flat_index`` (a cached template with the names left open) gives the text
    ``print_expr`` gives for the sum of index times stride, for every naming of its symbols,
    including symbols without a name (printed as themselves)."""
    from symdiff.lowering.printer import print_flat_index
    i, j, o = (sympy.Symbol(n, integer=True) for n in ("i", "j", "o"))
    indices = [(i + 1, j - 2), (sympy.Min(5, sympy.Max(0, o - 1)), 3 - i), (sympy.Integer(2), j), (2 * i + j,)]
    namings = [{i: "t0", j: "t1", o: "t2"}, {i: "(t1 + 3)", j: "k12_u"}, {}]
    for index in indices:
        strides = [7 ** (len(index) - 1 - k) for k in range(len(index))]
        expr = sum((sympy.sympify(e) * s for e, s in zip(index, strides)), sympy.Integer(0))
        for names in namings:
            assert print_flat_index(index, strides, names) == print_expr(expr, "int", names), (index, names)


def test_skipping_sympys_re_rewrite_without_an_re_changes_no_text():
    """The printer skips sympy's ``re(UnevaluatedExpr)`` rewrite where the tree has no ``re``;
    it prints what the rewrite-always printer prints, with an ``re`` or without."""
    from sympy.printing.codeprinter import CodePrinter

    class RewriteAlways(SlangPrinter):
        _handle_UnevaluatedExpr = CodePrinter._handle_UnevaluatedExpr

    w = sympy.Symbol("w")
    exprs = [sympy.re(w) + 1, 3 * sympy.re(sympy.UnevaluatedExpr(2 * x)), sympy.im(w) + x,
             sympy.Piecewise((x * y, x > y), (sympy.exp(y), True)) + sympy.sqrt(x), n + 1]
    for expr in exprs:
        for scalar in ("float", "double"):
            assert SlangPrinter(scalar).doprint(expr) == RewriteAlways(scalar).doprint(expr), expr


def test_an_int_accumulators_extreme_identities_are_int32s_extremes():
    """A max/min over int32 starts from -2^31 / 2^31 - 1 (infinities have no int form)."""
    p = SlangPrinter("int")
    assert p.literal(-float("inf")) == "(-2147483647 - 1)" and p.literal(float("inf")) == "2147483647"
