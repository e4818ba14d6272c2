"""ir.index_analysis: what an index provably does, checked against brute-force
enumeration of small domains (an independent oracle: every point, every
element)."""
import itertools
import math
import random
from fractions import Fraction

import pytest
import sympy

from symdiff.ir import connector_symbol, index_symbol, size_symbol
from symdiff.ir.index_analysis import (FLOOR_DIVIDE, Unanalysable, apart, cancel_floors, covers, holds_on_ranges, exact_integer_division, injective, injective_over, replaced,
                               solve_shifts, unit_shift, unit_shifts, written_elements)

i, j, k = index_symbol("i"), index_symbol("j"), index_symbol("k")
N = size_symbol("N")
c = connector_symbol("c", "int32")


def elements(index, domain):
    """Every element the points of a concrete domain hit, one per point."""
    syms = [s for s, _, _ in domain]
    out = []
    for point in itertools.product(*(range(b, e) for _, b, e in domain)):
        sub = dict(zip(syms, point))
        out.append(tuple(int(sympy.sympify(x).xreplace(sub)) for x in index))
    return out


def test_unit_shift_forms():
    assert unit_shift(i + 3, [i, j]) == (i, 3)
    assert unit_shift(i + N - 1, [i]) == (i, N - 1)   # size symbols are constants
    assert unit_shift(N - 1, [i]) == (None, N - 1)
    for e in (2 * i, i + j, i + c, c, sympy.floor(i / 2), sympy.Mod(i, 3), -i):
        assert unit_shift(e, [i, j]) is None, e


def test_unit_shifts_refuse_a_repeated_symbol():
    assert unit_shifts((i + 1, 0, j), [i, j]) == [(i, 1), (None, 0), (j, 0)]
    assert unit_shifts((i, i + 1), [i]) is None


def test_injective_needs_every_symbol():
    assert injective((i + 1, j), (i, j)) and injective((0, i), (i,)) and injective((i + N,), (i,))
    assert not injective((i,), (i, j))          # j collides
    assert not injective((i + j,), (i, j)) and not injective((i, i), (i,))
    assert not injective((c,), (i,)) and not injective((i + c,), (i,))   # scatters may collide


@pytest.mark.parametrize("index, domain, expected", [
    ((sympy.floor(i / 2),), [(i, 0, 8)], False),
    ((2 * i,), [(i, 0, 8)], True),
    ((N - 1 - i,), [(i, 0, N)], True),
    ((i + N * j,), [(i, 0, N), (j, 0, 4)], True),
    ((i + 4 * j,), [(i, 0, 4), (j, 0, 4)], True),
    ((i + 3 * j,), [(i, 0, 4), (j, 0, 4)], False),   # 3 + 0 == 0 + 3
    ((i + j, j), [(i, 0, 4), (j, 0, 4)], True),       # j from the second component, then i
    ((0,), [(i, 0, 1)], True),                        # one point
    ((0,), [(i, 0, N)], False),                       # N may exceed 1
    ((0,), [(i, 3, 3)], True),                        # no point at all
    ((c,), [(i, 0, 4)], False),
    ((i, sympy.Mod(j, 2)), [(i, 0, 4), (j, 0, 4)], False),
])
def test_injective_over_domain(index, domain, expected):
    assert injective_over(index, domain) == expected


@pytest.mark.parametrize("index, domain, shape, expected", [
    ((sympy.floor(3 * i / 4), sympy.Mod(3 * i, 4)), [(i, 0, 4)], (3, 4), True),    # reshape(-1)[::3] of a 3x4
    ((sympy.floor(i / 4), sympy.Mod(i, 4)), [(i, 0, 12)], (3, 4), True),            # ravel of a 3x4
    ((sympy.floor(i / 8), sympy.Mod(i, 4)), [(i, 0, 12)], (3, 4), False),           # flat 4*floor(i/8) + i%4 repeats
])
def test_injective_over_reads_a_reshaped_view_through_its_flat_position(index, domain, shape, expected):
    """Without the shape the floor/Mod components prove nothing; with it, the
    flat position decides, and agrees with enumeration."""
    assert not injective_over(index, domain)
    assert injective_over(index, domain, shape) == expected
    hits = elements(index, domain)
    assert (len(set(hits)) == len(hits)) == expected


def _exact(e, point: dict) -> Fraction:
    """``e`` at ``point`` in exact rationals (a float ``floor(j/12 + 5/12)`` is off by one at ``j = 31``)."""
    e = sympy.sympify(e)
    if e.is_Symbol:
        return point[e]
    if e.is_Rational:
        return Fraction(int(e.p), int(e.q))
    args = [_exact(a, point) for a in e.args]
    if isinstance(e, sympy.floor):
        return Fraction(math.floor(args[0]))
    if isinstance(e, sympy.Mod):
        return args[0] % args[1]
    if e.is_Add:
        return sum(args, Fraction(0))
    assert e.is_Mul, e
    return math.prod(args)


def _divisions(e) -> int:
    return sum(isinstance(t, (sympy.floor, sympy.Mod)) for t in sympy.preorder_traversal(sympy.sympify(e)))


@pytest.mark.parametrize("expr, expected", [
    # a (2, 6, 5, 5) weight read as a (2*6, 25)... matrix: flat element 150*i + r of the merged (6, 5, 5) axes
    (150 * i + 25 * sympy.floor(j / 25) + 5 * sympy.Mod(sympy.floor(j / 5), 5) + sympy.Mod(j, 5), 150 * i + j),
    (4 * sympy.floor(j / 4) + sympy.Mod(j, 4), j),                                     # ravel of (., 4)
    (12 * sympy.floor((j + 5) / 12) + sympy.Mod(j + 5, 12), j + 5),                    # a shifted flat index
    (6 * sympy.Mod(sympy.floor(j / 6), 4) + sympy.Mod(j, 6) + 24 * sympy.floor(j / 24), j),  # (., 4, 6) merged
    # sliding windows merged: fewer divisions, not none (the window offset and position stay apart)
    (sympy.Mod(i, 28) + sympy.Mod(j, 5) + 32 * sympy.floor(i / 28) + 32 * sympy.floor(j / 5), None),
    (sympy.Mod(j, 7), sympy.Mod(j, 7)),                                                # nothing to cancel: as it is
    (3 * sympy.floor(j / 2), 3 * sympy.floor(j / 2)),
    (2 * i + 3, 2 * i + 3),
])
def test_cancel_floors_is_exact_and_drops_divisions(expr, expected):
    """The cancelled index equals the original at every integer point of a
    range that crosses zero and several periods (the oracle: plain
    evaluation), and has no more integer divisions; where the flat element is
    affine after all, none."""
    out = cancel_floors(expr)
    if expected is not None:
        assert sympy.expand(out - expected) == 0
    assert _divisions(out) <= _divisions(expr)
    if expected is None:
        assert 0 < _divisions(out) < _divisions(expr)
    for a, b in itertools.product(range(-30, 31, 7), range(-60, 200)):
        point = {i: Fraction(a), j: Fraction(b)}
        assert _exact(out, point) == _exact(expr, point), (a, b)


def test_injective_over_is_sound_on_random_affine_indices():
    """Whenever the proof says injective, no two points of the (small, concrete)
    domain hit one element; and plain unit shifts are always proved."""
    rnd = random.Random(0)
    syms = [i, j, k]
    proved = 0
    for _ in range(400):
        domain = [(s, rnd.randint(-2, 1), 0) for s in syms]
        domain = [(s, b, b + rnd.randint(0, 4)) for s, b, _ in domain]
        index = tuple(sum((rnd.randint(-5, 5) * s for s in rnd.sample(syms, rnd.randint(0, 3))), sympy.Integer(0))
                      + rnd.randint(-3, 3) for _ in range(rnd.randint(1, 2)))
        hits = elements(index, domain)
        if injective_over(index, domain):
            proved += 1
            assert len(set(hits)) == len(hits), (index, domain)
        # a plain unit shift: every domain symbol once, in any order, plus constants anywhere
        shifted = [s + rnd.randint(-3, 3) for s in rnd.sample(syms, 3)]
        shifted.insert(rnd.randint(0, 3), sympy.Integer(rnd.randint(-3, 3)))
        assert injective(shifted, syms), shifted
        assert injective_over(shifted, domain), (shifted, domain)
        hits = elements(shifted, domain)
        assert len(set(hits)) == len(hits), (shifted, domain)   # the oracle agrees
    assert proved > 50   # the proof is not vacuous


def test_covers_is_exactly_the_whole_container_once():
    assert covers((i + 1, j), [(i, -1, 3), (j, 0, 4)], (4, 4))
    assert covers((i, 0), [(i, 0, 3)], (3, 1))
    assert covers((i,), [(i, 0, 3), (j, 0, 1)], (3,))          # a single-point extra symbol
    assert covers((i,), [(i, 0, N)], (N,))
    assert not covers((i,), [(i, 0, 3), (j, 0, 2)], (3,))      # every element twice
    assert not covers((i,), [(i, 1, 3)], (3,))                 # misses element 0
    assert not covers((i, 1), [(i, 0, 3)], (3, 2))
    assert not covers((i, i), [(i, 0, 3)], (3, 3))
    assert not covers((c,), [(i, 0, 3)], (3,))


@pytest.mark.parametrize("index, domain, shape", [
    ((i + 1, j), [(i, -1, 3), (j, 0, 4)], (4, 4)),
    ((i, 0), [(i, 0, 3)], (3, 1)),
    ((j, i), [(i, 0, 2), (j, 0, 3)], (3, 2)),
    ((i,), [(i, 0, 3), (j, 0, 2)], (3,)),
    ((i,), [(i, 1, 3)], (3,)),
])
def test_covers_agrees_with_enumeration(index, domain, shape):
    hits = elements(index, domain)
    whole = sorted(itertools.product(*(range(n) for n in shape)))
    assert covers(index, domain, shape) == (sorted(hits) == whole)


def test_solve_shifts_inverts_unit_shifts():
    t0, t1 = sympy.symbols("t0 t1", integer=True)
    domain = [(i, 1, 5), (j, 0, 3)]
    solution, conditions, unsolved = solve_shifts((i - 1, 2 * j), domain, (t0, t1))
    assert solution == {i: t0 + 1} and unsolved == [1]
    assert conditions == [sympy.Le(1, t0 + 1), sympy.Lt(t0 + 1, 5)]
    assert solve_shifts((i, i + 1), domain, (t0, t1))[2] == [1]   # i is solved once
    assert solve_shifts((c + i,), domain, (t0,))[2] == [0]        # a gather stays unsolved


@pytest.mark.parametrize("index, domain, shape", [
    ((i + 1, j), [(i, -1, 3), (j, 0, 4)], (4, 4)),            # everything
    ((2 * i + 1,), [(i, 0, 4)], (9,)),                         # odd elements
    ((7 - i, 2), [(i, 0, 5)], (8, 3)),                         # reversed, one column
    ((i, i), [(i, 1, 3)], (4, 4)),                             # a diagonal
    ((j, 3 * i - 2), [(i, 1, 3), (j, 0, 2)], (3, 6)),
    # through reshaped views of a (3, 4) array, by flat position
    ((sympy.floor(3 * i / 4), sympy.Mod(3 * i, 4)), [(i, 0, 4)], (3, 4)),         # A.reshape(-1)[::3]
    ((sympy.floor((i + 6) / 4), sympy.Mod(i + 6, 4)), [(i, 0, 6)], (3, 4)),       # A.reshape(2, 6)[1]
    ((sympy.floor(i / 4), sympy.Mod(i, 4)), [(i, 0, 12)], (3, 4)),                # A.ravel()
    ((i, 2 * j + k), [(i, 0, 3), (j, 0, 2), (k, 0, 2)], (3, 4)),                  # A.reshape(3, 2, 2)
])
def test_written_elements_agrees_with_enumeration(index, domain, shape):
    targets = sympy.symbols("t0:2", integer=True)[:len(shape)]
    condition, full = written_elements(index, domain, shape, targets)
    hits = set(elements(index, domain))
    for element in itertools.product(*(range(n) for n in shape)):
        assert bool(condition.xreplace(dict(zip(targets, element)))) == (element in hits), element
    assert full == (len(hits) == len(list(itertools.product(*(range(n) for n in shape)))))


@pytest.mark.parametrize("index, reason", [
    ((c,), "data-dependent"), ((i + j,), "several symbols"), ((sympy.floor(i / 2),), "not affine")])
def test_written_elements_refuses_what_it_cannot_invert(index, reason):
    with pytest.raises(Unanalysable) as err:
        written_elements(index, [(i, 0, 4), (j, 0, 4)], (8,), (sympy.Symbol("t", integer=True),))
    assert err.value.reason == reason


def test_written_elements_refuses_positions_that_are_not_one_run():
    """A.reshape(2, 6)[:, 1:5:2]: flat positions 6*i + 2*j + 1 skip between rows."""
    with pytest.raises(Unanalysable):
        written_elements((sympy.floor((6 * i + 2 * j + 1) / 4), sympy.Mod(6 * i + 2 * j + 1, 4)),
                         [(i, 0, 2), (j, 0, 2)], (3, 4), sympy.symbols("t0:2", integer=True))


def test_exact_integer_division_is_exact_where_float_floor_is_not():
    """floor(i/3 - 1/3) at i = 7 is 2; in floats (7/3 - 1/3) is 1.9999999999999998."""
    e = exact_integer_division(sympy.floor((i - 1) / 3))
    fn = sympy.lambdify([i], e, modules=[{FLOOR_DIVIDE.__name__: lambda a, b: a // b}])
    assert [fn(v) for v in range(-4, 12)] == [(v - 1) // 3 for v in range(-4, 12)]
    x = sympy.Symbol("x", real=True)
    assert exact_integer_division(sympy.floor(x / 2)) == sympy.floor(x / 2)   # a float floor stays one


def test_holds_on_ranges_decides_linear_bounds_at_the_corners():
    o, p = index_symbol("o0"), index_symbol("o1")
    n = size_symbol("N")
    box = {o: (0, n), p: (2, 7)}
    assert holds_on_ranges(sympy.Le(0, o), box)
    assert holds_on_ranges(sympy.Lt(o, n), box)
    assert holds_on_ranges(sympy.Le(1, p - 1), box) and holds_on_ranges(sympy.Lt(p + o - n, 7), box)
    assert not holds_on_ranges(sympy.Lt(o + 1, n), box)  # fails at o = N - 1
    assert not holds_on_ranges(sympy.Le(3, p), box)  # fails at p = 2
    assert not holds_on_ranges(sympy.Le(0, o * o - 1), box)  # nonlinear: not shown
    assert not holds_on_ranges(sympy.Eq(o, o), box)  # only <= and <
    # brute force on a concrete box agrees wherever it says yes
    concrete = {o: (0, 5), p: (2, 7)}
    for c in [sympy.Le(0, o - 1), sympy.Lt(o + p, 11), sympy.Lt(o + p, 10), sympy.Le(2 - o, p)]:
        everywhere = all(bool(c.xreplace({o: a, p: b})) for a in range(0, 5) for b in range(2, 7))
        assert holds_on_ranges(c, concrete) == everywhere, c


def test_cached_answers_are_keyed_by_the_symbols_themselves():
    """unit_shift, holds_on_ranges and replaced are cached: a symbol of the same name but other
    assumptions (a size symbol N vs an integer connector N) must get its own answer."""
    size, conn = size_symbol("N"), sympy.Symbol("N", integer=True)
    assert unit_shift(i + size, [i]) == (i, size)
    assert unit_shift(i + conn, [i]) is None  # a connector in the offset: not a unit shift
    assert unit_shift(i + size, [i]) == (i, size)
    assert holds_on_ranges(sympy.Lt(i, size), {i: (0, size)})
    assert not holds_on_ranges(sympy.Lt(i, size), {i: (0, size + 1)})
    clamped = sympy.Min(sympy.Max(i - 1, 0), 5)
    assert replaced(clamped, {i: j}) == clamped.xreplace({i: j}) == sympy.Min(sympy.Max(j - 1, 0), 5)
    assert replaced(clamped, {i: k}) == sympy.Min(sympy.Max(k - 1, 0), 5)


def test_writes_apart_by_a_constant_component():
    i, j = index_symbol("i"), index_symbol("j")
    assert apart([(0, i, j), (1, i, j), (2, i, j)])
    assert apart([(i, 3), (i + 1, 5)])                       # the constant component decides
    assert not apart([(0, i), (0, i + 1)])                    # the same constant: they may meet
    assert not apart([(0, i), (1, i), (0, j)])
    assert not apart([(i, j), (i + 1, j)])                    # shifts (a stencil's): they meet
