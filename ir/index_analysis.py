"""What an access index provably does over a tasklet's domain: the one place
that reads index expressions for the tracer, the interpreter, the reverse pass
and the kernel planner.

An index is a tuple of sympy expressions, one component per axis of the
container, over the domain's index symbols, size symbols (positive integers
bound at call time) and integer connectors (values read by the tasklet:
gathers and scatters).  What is proved here, and nothing more:

* **unit shifts** (:func:`unit_shift`, :func:`unit_shifts`): a component is
  ``s + c`` with ``s`` a domain symbol and ``c`` free of domain symbols and
  connectors (an integer, or an expression in size symbols), or a constant
  ``c`` alone.  ``unit_shifts`` also requires distinct symbols across
  components: element ``index(p)`` then determines the used coordinates of
  ``p`` by subtraction.
* **injective** (:func:`injective`): unit shifts that use every symbol
  listed, so distinct points hit distinct elements, whatever the ranges.  The
  reverse pass writes (rather than accumulates) such gradients, the planner
  gives each thread its own element, the interpreter assigns instead of
  ``ufunc.at``.
* **injective over a domain** (:func:`injective_over`): a weaker form that
  also uses the ranges: every component is affine with integer coefficients
  (``2*i``, ``n - 1 - i``, ``i + n*j``), and the components determine every
  symbol whose range has more than one point.  This is what the tracer
  demands of a plain write in an ``sd.map`` body.
* **coverage** (:func:`covers`): unit shifts whose ranges map each used axis
  exactly onto ``0..extent-1``, every other axis being a single ``0``: the
  access touches every element of the container exactly once.
* **inversion** (:func:`solve_shifts`): which point writes a given element,
  solving ``s + c = target`` per unit-shift component;
  :func:`written_elements` also inverts strides (``a*s + c``) and diagonals,
  giving the condition for an element to be written (the tracer copies the
  others when a plain write updates part of an array).

* **one element a point** (:func:`one_each`, :func:`covers_once`): distinct
  points of given ranges write distinct elements (and, for ``covers_once``,
  every element once): unit shifts, or an index affine in several symbols
  proved by ``injective_over``.  The kernel planner asks these of every write.
* **gathers and scatters** (:func:`uses_connectors`): an index that reads a
  value of the tasklet; nothing else here holds for it.

Anything the analysis cannot read (``floor``, ``Mod``, a connector in the
index, a coefficient whose sign is unknown) is *not proved*, never assumed:
every answer errs on the side of "may collide".

:func:`exact_integer_division` belongs here too: ``floor(p/q)`` in an index is
an integer quotient, and must be evaluated as one (a float ``floor`` of
``i/3 - 1/3`` is ``1`` at ``i = 7``).
"""
from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

import sympy

if TYPE_CHECKING:
    from .graph import Tasklet

Shift = tuple  # (symbol or None, offset)

# An exact integer floor division that sympy does not rewrite; evaluators map it
# to their integer floor division (numpy: ``np.floor_divide``).
# An integer: a floor of a sum with it inside (a reshape of a reshape) is exact too.
FLOOR_DIVIDE = sympy.Function("floor_divide_exact", integer=True)


def replaced(e, mapping: Mapping) -> sympy.Basic:
    """``e.xreplace(mapping)``, cached.  An unrolled loop renames and shifts the
    same few index expressions hundreds of times (every planning round again),
    and sympy rebuilds each evaluated node it replaces into: a clamped read
    index ``Min(5, Max(0, o - 1))`` re-checks its arguments at every
    construction, milliseconds each (cavity flow's planning spent most of
    its time there), and so does each guarded term ``Piecewise`` of a
    gather's sum that a value is inlined into (lavapipe's planning of
    seidel-2d).  Each rebuilt node is cached too (``_rebuilt``): the
    steps of an unrolled loop share their terms.  ``mapping``'s keys and
    values must be hashable."""
    return _replaced(sympy.sympify(e), tuple(mapping.items()))


@functools.lru_cache(maxsize=16384)
def _replaced(e: sympy.Basic, items: tuple) -> sympy.Basic:
    rule = dict(items)
    # symbols alone (every caller's case): subtrees without them are skipped, not walked
    symbols = frozenset(rule) if all(isinstance(k, sympy.Symbol) for k in rule) else None
    return _xreplace(e, rule, symbols)[0]


def _xreplace(e: sympy.Basic, rule: dict, symbols: frozenset | None) -> tuple[sympy.Basic, bool]:
    """sympy's ``Basic._xreplace``, building each changed node through ``_rebuilt``;
    where ``rule`` replaces only ``symbols``, a subtree holding none of them is left
    as it is without walking it (inlining a value into a reverse pass's gather rewrites
    one connector in bodies of hundreds of guarded terms)."""
    if e in rule:
        return rule[e], True
    if symbols is not None and symbols.isdisjoint(symbols_in(e)):
        return e, False
    args, changed = [], False
    for a in e.args:
        if isinstance(a, sympy.Basic):
            a, c = _xreplace(a, rule, symbols)
            changed |= c
        args.append(a)
    return (_rebuilt(e.func, tuple(args)), True) if changed else (e, False)


@functools.lru_cache(maxsize=1 << 17)
def symbols_in(e: sympy.Basic) -> frozenset:
    """Every ``Symbol`` in ``e`` (bound ones too), cached per node: each node's set is
    its arguments' union, computed once however many expressions share the node."""
    if isinstance(e, sympy.Symbol):
        return frozenset((e,))
    return frozenset().union(*(symbols_in(a) for a in e.args if isinstance(a, sympy.Basic)))


@functools.lru_cache(maxsize=65536)
def _rebuilt(func, args: tuple) -> sympy.Basic:
    return func(*args)


def is_size_symbol(s: sympy.Symbol) -> bool:
    """Size symbols are the positive ones (``ir.graph.size_symbol``); domain
    symbols and integer connectors carry no sign."""
    return bool(s.is_positive)


def _constant(e: sympy.Expr, symbols: set) -> bool:
    """Free of ``symbols`` and of connectors: fixed once sizes are bound."""
    return all(s not in symbols and is_size_symbol(s) for s in e.free_symbols)


def unit_shift(e, symbols: Iterable[sympy.Symbol]) -> Shift | None:
    """``(s, c)`` when component ``e`` is ``s + c`` (``s`` in ``symbols``),
    ``(None, e)`` when it is a constant, None otherwise (a coefficient other
    than 1, two symbols, a connector, ``floor``/``Mod``).  Cached: planning asks
    it of every access of every tasklet, in every round."""
    return _unit_shift(sympy.sympify(e), frozenset(symbols))


@functools.lru_cache(maxsize=16384)
def _unit_shift(e: sympy.Expr, syms: frozenset) -> Shift | None:
    if _constant(e, syms):
        return None, e
    used = e.free_symbols & syms
    if len(used) != 1:
        return None
    (s,) = used
    offset = sympy.expand(e - s)
    return (s, offset) if _constant(offset, syms) else None


def unit_shifts(index: Sequence, symbols: Iterable[sympy.Symbol]) -> list[Shift] | None:
    """Every component a unit shift, no symbol used twice; None otherwise."""
    symbols = tuple(symbols)
    shifts, seen = [], set()
    for e in index:
        sh = unit_shift(e, symbols)
        if sh is None or (sh[0] is not None and sh[0] in seen):
            return None
        seen.add(sh[0])
        shifts.append(sh)
    return shifts


def injective(index: Sequence, symbols: Iterable[sympy.Symbol]) -> bool:
    """Distinct points of ``symbols`` (any ranges) hit distinct elements:
    unit shifts using every one of ``symbols``."""
    symbols = tuple(symbols)
    shifts = unit_shifts(index, symbols)
    return shifts is not None and {s for s, _ in shifts if s is not None} == set(symbols)


def apart(indices: Sequence[Sequence]) -> bool:
    """Writes at ``indices`` cannot meet: one component is a different integer in
    each (the steps of a batched product, ``ir.batch_products``, each writing a
    slice of its own)."""
    return any(all(sympy.sympify(index[k]).is_Integer for index in indices)
               and len({int(index[k]) for index in indices}) == len(indices)
               for k in range(len(indices[0])))


def covers(index: Sequence, domain: Sequence[tuple], shape: Sequence) -> bool:
    """Every element of a container of ``shape`` is hit exactly once by the
    points of ``domain`` (``(symbol, begin, end)`` ranges): unit shifts over
    distinct symbols mapping each range onto its whole axis, constant axes of
    extent 1 at 0, unused domain symbols with a single point.  Cached, as
    ``covers_once``."""
    return _covers(tuple(index), tuple(map(tuple, domain)), tuple(shape))


@functools.lru_cache(maxsize=16384)
def _covers(index: tuple, domain: tuple, shape: tuple) -> bool:
    if len(index) != len(shape):
        return False
    ranges = {s: (b, e) for s, b, e in domain}
    shifts = unit_shifts(index, ranges)
    if shifts is None:
        return False
    used = set()
    for (s, c), n in zip(shifts, shape):
        if s is None:
            if not (_zero(n - 1) and _zero(c)):
                return False
            continue
        used.add(s)
        begin, end = ranges[s]
        if not (_zero(begin + c) and _zero(end + c - n)):
            return False
    return all(s in used or _zero(e - b - 1) for s, b, e in domain)


def _zero(e) -> bool:
    return _expands_to_zero(sympy.sympify(e))


@functools.lru_cache(maxsize=16384)
def _expands_to_zero(e: sympy.Expr) -> bool:
    return sympy.expand(e) == 0


def solve_shifts(index: Sequence, domain: Sequence[tuple],
                 targets: Sequence[sympy.Symbol]) -> tuple[dict, list, list[int]]:
    """Which point writes element ``targets`` through ``index``: each unit-shift
    component ``s + c`` (``s`` not solved by an earlier component) gives
    ``s = target - c`` and the conditions for that point to exist.  Returns
    ``(solution, conditions, unsolved)``, ``unsolved`` listing the other
    components (constants, gathers, strides, repeated symbols)."""
    symbols = [s for s, _, _ in domain]
    ranges = {s: (b, e) for s, b, e in domain}
    solution: dict[sympy.Symbol, sympy.Expr] = {}
    conditions, unsolved = [], []
    for k, (e, target) in enumerate(zip(index, targets)):
        sh = unit_shift(e, symbols)
        if sh is None or sh[0] is None or sh[0] in solution:
            unsolved.append(k)
            continue
        s, c = sh
        solution[s] = target - c
        begin, end = ranges[s]
        conditions += [sympy.Le(begin, solution[s]), sympy.Lt(solution[s], end)]
    return solution, conditions, unsolved


def holds_on_ranges(condition: sympy.Basic, ranges: dict) -> bool:
    """Whether ``condition`` (``a <= b`` or ``a < b``) holds at every point of
    ``ranges`` (``{symbol: (begin, end)}``, half-open): its sides' difference
    is linear in each ranged symbol, so checking every corner of the box
    decides it.  False when that cannot be shown (other relations, nonlinear
    sides, sizes sympy cannot compare).  Cached: the reverse pass of an unrolled
    loop asks the same bounds of every step's gather."""
    return _holds_on_ranges(condition, tuple(ranges.items()))


@functools.lru_cache(maxsize=4096)
def _holds_on_ranges(condition: sympy.Basic, ranges: tuple) -> bool:
    ranges = dict(ranges)
    if not isinstance(condition, (sympy.Le, sympy.Lt)):
        return False
    used = [s for s in ranges if s in condition.free_symbols]
    difference = sympy.expand(condition.rhs - condition.lhs)
    if any(not difference.is_polynomial(s) or sympy.degree(difference, s) > 1 for s in used):
        return False
    corners = [{}]
    for s in used:
        begin, end = ranges[s]
        corners = [{**c, s: v} for c in corners for v in (begin, end - 1)]
    return all(condition.xreplace(c) is sympy.true for c in corners)


class Unanalysable(ValueError):
    """An index component :func:`written_elements` cannot invert; ``reason``
    is ``"data-dependent"``, ``"several symbols"`` or ``"not affine"``."""

    def __init__(self, reason: str, component: sympy.Expr, symbol: sympy.Symbol | None = None):
        self.reason, self.component, self.symbol = reason, component, symbol
        super().__init__(f"index component {component}: {reason}")


def written_elements(index: Sequence, domain: Sequence[tuple], shape: Sequence,
                     targets: Sequence[sympy.Symbol]) -> tuple[sympy.Boolean, bool]:
    """Which elements ``targets`` of a container of ``shape`` the points of
    ``domain`` write through ``index``: ``(condition over targets, whether
    every element is written)``.

    Each component is a constant, or ``a*s + c`` (integer ``a != 0``) in a
    symbol no earlier component solved, giving ``s = (t - c) / a`` (an integer
    in ``s``'s range), or over solved symbols only (an equality: a diagonal).
    Failing that, the same analysis of the element's C-order flat position
    (``_flat_write``: a write through a reshaped view).  Anything else raises
    :class:`Unanalysable`."""
    try:
        return _written_per_component(index, domain, shape, targets)
    except Unanalysable as err:
        found = _flat_write(index, domain, shape, targets)
        if found is None:
            raise err from None
        return found


def _flat_write(index: Sequence, domain: Sequence[tuple], shape: Sequence,
                targets: Sequence[sympy.Symbol]) -> tuple[sympy.Boolean, bool] | None:
    """``written_elements`` by flat positions: the index of a reshaped view
    (``floor``/``Mod`` of the view's flat index, or affine in several of its
    dimensions) is affine in the flat position ``sum(stride * index)``
    (C order), which is an element's identity as long as each component stays
    in its extent (static bounds checks see to that).  Domain symbols whose
    coefficients nest as digits of a mixed radix (``6*i + 2*j + k`` over
    ``j < 3, k < 2``) merge into one, so a run of positions is one range."""
    flat = flat_position(index, shape)
    if flat is None:
        return None
    stride = sympy.Mul(*(sympy.sympify(extent) for extent in shape))
    ranges = {s: (sympy.sympify(b), sympy.sympify(e)) for s, b, e in domain}
    coeffs = _affine(flat, list(ranges))
    if coeffs is None or any(not (_zero(ranges[s][0]) and ranges[s][1].is_Integer) for s in coeffs):
        return None
    digits = sorted(coeffs, key=lambda s: abs(coeffs[s]))
    for low, high in zip(digits, digits[1:]):
        if coeffs[high] != coeffs[low] * ranges[low][1]:
            return None   # not one run of positions
    merged = sympy.Dummy("flat_point", integer=True)
    low = digits[0]
    count = sympy.Mul(*(ranges[s][1] for s in digits))
    position = flat.xreplace({s: 0 for s in digits}) + coeffs[low] * merged
    target = sympy.Dummy("flat_element", integer=True)
    cond, full = _written_per_component((position,), ((merged, 0, count),), (stride,), (target,))
    element = sympy.Integer(0)
    for t, extent in zip(targets, shape):
        element = element * extent + t
    return cond.xreplace({target: element}), full


def flat_position(index: Sequence, shape: Sequence) -> sympy.Expr | None:
    """The C-order flat position ``sum(stride * index)`` of an element, with
    the ``floor``/``Mod`` pairs of a reshaped view's index cancelled (``4 *
    floor(3*i/4) + Mod(3*i, 4)`` is ``3*i``); None where some remain.  While
    each component stays within its extent (the static bounds checks see to
    that), the flat position identifies the element, so it can stand for the
    whole index in an injectivity proof."""
    flat, stride = sympy.Integer(0), sympy.Integer(1)
    for e, extent in reversed(list(zip(index, shape))):
        flat, stride = flat + stride * sympy.sympify(e), stride * sympy.sympify(extent)
    flat = _floor_form(flat)
    return None if flat.has(sympy.floor, sympy.Mod) else flat


def cancel_floors(expr: sympy.Expr) -> sympy.Expr:
    """An integer index expression with the ``floor``/``Mod`` pairs that
    reshapes leave cancelled where they cancel: a flat index that reads a
    merged view of a contiguous array, ``25*floor(r/25) + 5*Mod(floor(r/5), 5)
    + Mod(r, 5)``, is ``r``.  The result where it has fewer ``floor`` and
    ``Mod`` nodes than ``expr`` (so fewer integer divisions in a kernel's
    inner loop), else ``expr`` unchanged.  Exact: every step is an identity
    of the floor division (see ``_floor_form``)."""
    expr = sympy.sympify(expr)
    if not expr.has(sympy.floor, sympy.Mod):
        return expr
    simpler = _floor_form(expr)
    return simpler if _divisions(simpler) < _divisions(expr) else expr


def _divisions(expr: sympy.Expr) -> int:
    return sum(1 for e in sympy.preorder_traversal(expr) if isinstance(e, (sympy.floor, sympy.Mod)))


def _floor_form(expr: sympy.Expr) -> sympy.Expr:
    """``expr`` over floors only, expanded, one form per floor, so that floors
    that differ only in form cancel: ``Mod(x, b)`` is ``x - b*floor(x/b)``; a
    floor of a floor merges (``_nested_floor_out``); ``_integer_part_out``."""
    expr = sympy.sympify(expr).rewrite(sympy.floor)
    expr = expr.replace(lambda e: isinstance(e, sympy.floor), _nested_floor_out)
    return sympy.expand(expr.replace(lambda e: isinstance(e, sympy.floor), _integer_part_out))


def _nested_floor_out(e: sympy.floor) -> sympy.Expr:
    """``floor(floor(u)/b + c)`` as ``floor(u/b + c)`` for a positive integer
    ``b`` and an integer ``b*c`` (a reshape's ``Mod(floor(r/5), 5)`` holds
    ``floor(floor(r/5)/5)``, which is ``floor(r/25)``): ``floor(u) + b*c`` is
    ``floor(u + b*c)``, and ``floor(floor(v)/b) = floor(v/b)``."""
    terms = sympy.Add.make_args(sympy.expand(e.args[0]))
    for k, term in enumerate(terms):
        coeff, inner = term.as_coeff_Mul()
        if not isinstance(inner, sympy.floor) or not coeff.is_Rational or coeff <= 0 or coeff.p != 1:
            continue
        rest = sympy.Add(*terms[:k], *terms[k + 1:])
        if sympy.expand(rest * coeff.q).is_integer:
            return sympy.floor(inner.args[0] * coeff + rest)
    return e


def _integer_part_out(e: sympy.floor) -> sympy.Expr:
    """``floor(a + 3/2)`` as ``floor(a + 1/2) + 1``: one form per floor, so
    that the floors of a reshaped view's index cancel (sympy writes
    ``Mod(i + 6, 4)`` as ``Mod(i + 2, 4)`` but keeps ``floor(i/4 + 3/2)``)."""
    whole = sympy.floor(e.args[0].as_coeff_Add()[0])
    return sympy.floor(e.args[0] - whole) + whole


def _written_per_component(index: Sequence, domain: Sequence[tuple], shape: Sequence,
                           targets: Sequence[sympy.Symbol]) -> tuple[sympy.Boolean, bool]:
    ranges = {s: (b, e) for s, b, e in domain}
    solved: dict[sympy.Symbol, sympy.Expr] = {}
    conds = []
    full = True
    for e, t, extent in zip(index, targets, shape):
        e = sympy.sympify(e)
        free = e.free_symbols & ranges.keys()
        if any(not is_size_symbol(s) for s in e.free_symbols - ranges.keys()):
            raise Unanalysable("data-dependent", e)
        unsolved = free - solved.keys()
        if not unsolved:
            conds.append(sympy.Eq(t, e.xreplace(solved)))
            full = False
            continue
        if len(unsolved) > 1:
            raise Unanalysable("several symbols", e)
        s = unsolved.pop()
        a = sympy.diff(e, s)
        if not a.is_Integer or a == 0:
            raise Unanalysable("not affine", e, s)
        c = (e - a * s).xreplace(solved)
        sol = (t - c) * a if abs(a) == 1 else (t - c) / a
        begin, end = ranges[s]
        if abs(a) != 1:
            # begin <= (t - c)/a < end, multiplied out: a float evaluation of the
            # quotient (t0/3 - 5/3 at t0 = 5 is -2e-16) must not decide the range
            conds.append(sympy.Eq(sympy.Mod(t - c, a), 0))
            low, high = (a * begin, a * end) if a > 0 else (a * (end - 1), a * (begin - 1))
            conds += [sympy.Le(low, t - c), sympy.Lt(t - c, high)]
        else:
            conds += [sympy.Le(begin, sol), sympy.Lt(sol, end)]
        full = full and a == 1 and _zero(begin + c) and _zero(end + c - extent) and not (free & solved.keys())
        solved[s] = sol
    return sympy.And(*conds), full


def affine_coefficients(e: sympy.Expr, syms: list) -> dict | None:
    """``{s: coefficient, 1: constant}`` of ``e`` affine in ``syms`` (coefficients free of them),
    None when it is not.  Indices are mostly sums of ``c*s`` terms, read off directly; anything
    else goes through ``sympy.Poly`` (an order of magnitude slower, and validation and the
    injectivity proofs ask once per access of every tasklet; cached, as each graph is
    validated more than once and unrolled loops repeat their indices)."""
    found = _affine_coefficients(e, tuple(syms))
    return None if found is None else dict(found)


@functools.lru_cache(maxsize=16384)
def _affine_coefficients(e: sympy.Expr, syms: tuple) -> dict | None:
    coeffs = dict.fromkeys(syms, sympy.S.Zero)
    coeffs[1] = sympy.S.Zero
    chosen = set(syms)
    for term in sympy.Add.make_args(e):
        found = term.free_symbols & chosen
        if not found:
            coeffs[1] += term
            continue
        coeff, rest = term.as_independent(*syms, as_Add=False)
        if len(found) > 1 or rest not in chosen:
            return _poly_coefficients(e, syms)
        coeffs[rest] += coeff
    return coeffs


def _poly_coefficients(e: sympy.Expr, syms: list) -> dict | None:
    try:
        poly = sympy.Poly(e, *syms)
    except sympy.PolynomialError:
        return None
    if poly.total_degree() > 1:
        return None
    return {1: poly.coeff_monomial(1), **{s: poly.coeff_monomial(s) for s in syms}}


def _affine(e: sympy.Expr, symbols: Sequence[sympy.Symbol]) -> dict | None:
    """``{symbol: coefficient}`` of an index affine in ``symbols`` with
    integer coefficients of known nonzero sign, or None."""
    used = [s for s in symbols if s in e.free_symbols]
    if not used:
        return None
    found = affine_coefficients(e, used)
    if found is None or all(found[s] == 0 for s in used) or not _constant(found[1], set(symbols)):
        return None
    coeffs = {s: found[s] for s in used}
    if any(not (_constant(a, set(symbols)) and a.is_integer and (a.is_positive or a.is_negative))
           for a in coeffs.values()):
        return None
    return coeffs


def injective_over(index: Sequence, domain: Sequence[tuple], shape: Sequence | None = None) -> bool:
    """Distinct points of ``domain`` (``(symbol, begin, end)`` ranges) provably
    hit distinct elements.  Given the container's ``shape``, an index the
    per-component proof cannot read (a reshaped view's ``floor``/``Mod``) is
    tried once more through its :func:`flat_position`.

    Proof by elimination: a component ``sum(a_k * s_k) + c`` whose unknown
    symbols, in order of ``|a_k|``, satisfy ``|a_k| > sum_{j<k} |a_j| * (extent_j - 1)``
    (mixed radix; a single symbol with ``a != 0`` is the simplest case)
    determines those symbols once the known ones are fixed: two points giving
    the same element differ by ``sum(a_k * d_k) = 0`` with ``|d_k| < extent_k``,
    and the largest nonzero ``d_k`` cannot be cancelled by the smaller digits.
    Repeat until no component determines anything new; the index is injective
    when every symbol with more than one point is determined (or the domain is
    empty).  Components that are not affine (``floor``, ``Mod``, gathers)
    determine nothing."""
    return _injective_over(tuple(index), tuple(tuple(r) for r in domain), None if shape is None else tuple(shape))


@functools.lru_cache(maxsize=16384)
def _injective_over(index: tuple, domain: tuple, shape: tuple | None) -> bool:
    """``injective_over``, cached: validation and planning ask it of every plain write,
    and an unrolled loop's writes repeat the same few indices over the same domains."""
    symbols = [s for s, _, _ in domain]
    span = {s: sympy.expand(sympy.sympify(e) - b - 1) for s, b, e in domain}  # extent - 1
    if any(d.is_negative for d in span.values()):
        return True  # no points at all
    forms = [f for f in (_affine(sympy.sympify(e), symbols) for e in index) if f is not None]
    known: set = set()
    progress = True
    while progress:
        progress = False
        for form in forms:
            unknown = sorted((s for s in form if s not in known), key=lambda s: _order(form[s]))
            if unknown and _mixed_radix(form, unknown, span):
                known.update(unknown)
                progress = True
    if all(s in known or span[s].is_zero for s in symbols):
        return True
    flat = flat_position(index, shape) if shape is not None else None
    return flat is not None and _injective_over((flat,), domain, None)


def _magnitude(a: sympy.Expr) -> sympy.Expr:
    return a if a.is_positive else -a


def _order(a: sympy.Expr) -> tuple:
    """Numbers by magnitude first, then symbolic coefficients in a fixed order
    (a wrong order only fails the proof, never passes it)."""
    m = _magnitude(a)
    return (0, int(m), "") if m.is_Integer else (1, 0, sympy.srepr(m))


def _mixed_radix(form: dict, unknown: list, span: dict) -> bool:
    reach = sympy.Integer(0)  # the largest |sum(a_j * d_j)| the smaller digits can make
    for s in unknown:
        if not sympy.expand(_magnitude(form[s]) - reach - 1).is_nonnegative:
            return False
        reach += _magnitude(form[s]) * span[s]
    return True


def exact_integer_division(expr: sympy.Expr) -> sympy.Expr:
    """``expr`` with each ``floor(p/q)`` of integer ``p`` and ``q`` written as
    ``FLOOR_DIVIDE(p, q)``, so an evaluator computes it in integers."""
    def rewrite(arg):
        num, den = sympy.fraction(sympy.together(arg))
        if den != 1 and num.is_integer and den.is_integer:
            return FLOOR_DIVIDE(num, den)
        return sympy.floor(arg)
    return sympy.sympify(expr).replace(sympy.floor, rewrite)


# -- over a tasklet's ranges: what the kernel planner asks ----------------------------------------
def extent(rng) -> int:
    return max(0, int(rng[2]) - int(rng[1]))


def one_each(index, points, shape) -> bool:
    """Distinct points of ``points`` (``(symbol, begin, end)`` ranges) write
    distinct elements of a container of ``shape``: unit shifts
    (``index_analysis.injective``), or an index affine in several symbols
    (an elementwise pass run over a first stage's chunks, ``c * L + r``:
    ``reduce_fusion.chunk_producers``) proved by ``injective_over``.  Cached,
    as ``covers_once``."""
    return _one_each(tuple(index), tuple(map(tuple, points)), tuple(shape))


@functools.lru_cache(maxsize=16384)
def _one_each(index: tuple, points: tuple, shape: tuple) -> bool:
    symbols = [s for s, _, _ in points]
    return injective(index, symbols) or (_several(index, symbols) and injective_over(index, points, shape))


def covers_once(index, points, shape) -> bool:
    """Every element of a container of ``shape`` is written exactly once by
    ``points``, each using every symbol: ``index_analysis.injective`` and
    ``covers``, or for an index affine in several symbols (``one_each``),
    distinct elements within bounds, as many as the points.  Cached: planning
    asks it of the same writes in every pass placing steps, in every trial plan."""
    return _covers_once(tuple(index), tuple(map(tuple, points)), tuple(shape))


@functools.lru_cache(maxsize=16384)
def _covers_once(index: tuple, points: tuple, shape: tuple) -> bool:
    symbols = [s for s, _, _ in points]
    if injective(index, symbols) and covers(index, points, shape):
        return True
    ranges = {s: (b, e) for s, b, e in points}
    return (_several(index, symbols) and len(index) == len(shape)
            and math.prod(extent(r) for r in points) == math.prod(int(n) for n in shape)
            and injective_over(index, points, shape)
            and all(holds_on_ranges(sympy.Le(0, e), ranges) and holds_on_ranges(sympy.Lt(e, n), ranges)
                    for e, n in zip(index, shape)))


def _several(index, symbols) -> bool:
    """Some component uses more than one of ``symbols``."""
    return any(len(free_symbols(e) & set(symbols)) > 1 for e in index)


def uses_connectors(index, tasklet: Tasklet) -> bool:
    """Whether an index depends on values read by the tasklet (gather/scatter)."""
    conns = tasklet.input_symbols
    return any(not free_symbols(e).isdisjoint(conns) for e in index)


@functools.lru_cache(maxsize=1 << 16)
def free_symbols(e) -> frozenset:
    """``e``'s free symbols, cached: sympy walks the tree each time, and planning asks
    them of every index of every tasklet in every pass."""
    return frozenset(sympy.sympify(e).free_symbols)
