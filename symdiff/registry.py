"""User-supplied derivative rules for sympy functions (JAX ``custom_jvp`` style).

sympy differentiates most of the math a tasklet body holds, but some functions
it leaves as an unevaluated ``Derivative`` (an undefined ``sympy.Function``,
``floor``) or differentiates into something no backend can run
(``DiracDelta`` from ``sign``/``Heaviside``).  A rule registered here replaces
sympy's own derivative of that function everywhere, including inside the
backward graph when it is differentiated again.

The built-in rules make piecewise-constant functions have derivative 0, which is
what JAX does and what keeps second-order graphs free of ``DiracDelta``; the
float remainder ``Mod`` (sympy leaves it underived) follows from that.
"""
from __future__ import annotations

from typing import Callable, Sequence

import sympy

from symdiff.ir.scalar_functions import compare

Partials = Callable[..., Sequence[sympy.Expr]]

_RULES: dict[type, Partials] = {}
_BUILTIN: dict[type, Partials] = {}
_listeners: list[Callable[[], None]] = []


def register_derivative(func: type, partials: Partials) -> None:
    """Use ``partials(*args)`` as the derivative of ``func(*args)``.

    ``func`` is a sympy function class (``sympy.floor``, ``sympy.Function("f")``).
    ``partials`` receives the application's arguments and returns one partial
    derivative per argument (missing trailing entries count as 0), so the chain
    rule through the arguments stays sympy's job.  Registering again replaces
    the rule; derivatives computed before are forgotten.
    """
    if not (isinstance(func, type) and issubclass(func, sympy.Basic)):
        raise TypeError(f"register_derivative: {func!r} is not a sympy function class")
    if not callable(partials):
        raise TypeError(f"register_derivative: partials for {func.__name__} must be callable")
    _RULES[func] = partials
    for forget in _listeners:
        forget()


def unregister_derivative(func: type) -> None:
    """Drop a user rule: back to the built-in rule, or to sympy's derivative."""
    if func in _BUILTIN:
        _RULES[func] = _BUILTIN[func]
    else:
        _RULES.pop(func, None)
    for forget in _listeners:
        forget()


def rule_for(func: type) -> Partials | None:
    """The registered rule of a function class, if any."""
    return _RULES.get(func)


def user_rules_in(expr: sympy.Basic) -> list[str]:
    """Names of the functions in ``expr`` whose derivative is a rule the user
    registered (not a built-in one): what ``gradcheck`` points at when that
    expression's partials disagree with finite differences."""
    funcs = {app.func for app in sympy.sympify(expr).atoms(sympy.Function)}
    return sorted(f.__name__ for f in funcs if f in _RULES and _RULES[f] is not _BUILTIN.get(f))


def on_change(forget: Callable[[], None]) -> None:
    """Call ``forget`` whenever the rules change (derivative caches subscribe)."""
    _listeners.append(forget)


def _zero(*args: sympy.Expr) -> tuple[sympy.Expr, ...]:
    return tuple(sympy.S.Zero for _ in args)


def _mod(x: sympy.Expr, y: sympy.Expr) -> tuple[sympy.Expr, sympy.Expr]:
    """``Mod(x, y) = x - y*floor(x/y)`` (numpy's remainder: the sign of the
    divisor) with floor's derivative 0, as JAX differentiates ``remainder``."""
    return sympy.S.One, -sympy.floor(x / y)


def _extremum(extremum: type, wins: type) -> Partials:
    """Partials of ``Max`` (``wins`` is ``>``) or ``Min`` (``<``) of any number
    of arguments: each argument against the extremum of the others, the
    arguments tied for it sharing 1 equally (1/2 each for two, as JAX's
    maximum).  sympy flattens nested maxima (``Max(a, Max(b, c))`` is
    ``Max(a, b, c)``), and half to each of three tied arguments made
    ``d/dt max(t, max(t, t))`` 1.5 (fuzzer seed 401840)."""
    def partials(*args: sympy.Expr) -> tuple[sympy.Expr, ...]:
        out = []
        for k, a in enumerate(args):
            others = args[:k] + args[k + 1:]
            tied = sum((sympy.Piecewise((1, compare(sympy.Eq, a, o)), (0, True)) for o in others), sympy.S.Zero)
            share = sympy.S.Half if len(others) == 1 else 1 / (1 + tied)
            out.append(sympy.Piecewise((1, compare(wins, a, extremum(*others))),
                                       (share, compare(sympy.Eq, a, extremum(*others))), (0, True)))
        return tuple(out)
    return partials


def _abs(x: sympy.Expr) -> tuple[sympy.Expr]:
    return (sympy.Piecewise((1, x > 0), (0, sympy.Eq(x, 0)), (-1, True)),)


def _pow(base: sympy.Expr, exp: sympy.Expr) -> tuple[sympy.Expr, sympy.Expr]:
    nonzero = sympy.Piecewise((1, sympy.Eq(base, 0)), (base, True))
    return exp * base ** (exp - 1), sympy.log(nonzero) * base ** exp


_BUILTIN.update({f: _zero for f in (sympy.Heaviside, sympy.sign, sympy.floor, sympy.ceiling, sympy.DiracDelta)})
_BUILTIN.update({sympy.Max: _extremum(sympy.Max, sympy.StrictGreaterThan),
                 sympy.Min: _extremum(sympy.Min, sympy.StrictLessThan), sympy.Abs: _abs, sympy.Pow: _pow})
_BUILTIN[sympy.Mod] = _mod
_RULES.update(_BUILTIN)
