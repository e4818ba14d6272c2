"""Symbolic partial derivatives of tasklet bodies.

Only float connectors are differentiated (integer and bool connectors select
elements or branches; they carry no gradient).  Non-smooth points:
``Max``/``Min`` differentiate to ``Heaviside`` with value 1/2 at a tie (as
JAX), ``Abs`` to ``sign``, 0 at 0 (as PyTorch; JAX gives 1: see the guide's
conventions), ``Piecewise`` to the selected branch only.

Costs are kept flat so that differentiating 10^4 tasklets stays linear:
partials are cached per body (a traced chain repeats few distinct bodies), the
only simplification is ``factor_terms`` on small expressions and is kept only
when it shrinks the expression (``sympy.simplify`` can take seconds on one
body), and common subexpressions are found by ``sympy.cse`` once per backward
body.
"""
from __future__ import annotations

import functools
from typing import Mapping

import sympy
from sympy.core.function import Application

from symdiff.ir.scalar_functions import maximum, minimum, ordering

from . import registry
from .errors import DifferentiationError

# functions whose value stays finite for finite arguments; anything else in a
# partial (exp, log, 1/x, sqrt, ...) may be inf/nan where the cotangent is 0
_BOUNDED = (sympy.sin, sympy.cos, sympy.tanh, sympy.atan, sympy.erf, sympy.Heaviside, sympy.sign,
            sympy.Abs, sympy.Piecewise, sympy.Max, sympy.Min, maximum, minimum, sympy.floor, sympy.ceiling,
            ordering)
_SIMPLIFY_MAX_OPS = 40


def is_float_symbol(sym: sympy.Symbol) -> bool:
    """Float connectors are the real, non-integer ones (see ``ir.connector_symbol``)."""
    return bool(sym.is_real) and not sym.is_integer


def derivative(expr: sympy.Expr, x: sympy.Symbol) -> sympy.Expr:
    """``d expr / d x`` using registered rules where present, sympy elsewhere."""
    ruled = {a for a in expr.atoms(Application, sympy.Pow)
             if registry.rule_for(a.func) is not None and x in a.free_symbols
             and not (isinstance(a, sympy.Pow) and a.exp.is_Number)}  # sympy's rule for constant exponents
    if not ruled:
        result = sympy.diff(expr, x)
    else:
        dummies = {a: sympy.Dummy(f"u_{a.func.__name__}") for a in ruled}
        replaced = expr.xreplace(dummies)
        result = sympy.diff(replaced, x)
        for app, u in dummies.items():
            if u not in replaced.free_symbols:
                continue  # only nested inside another ruled application
            outer = sympy.diff(replaced, u)
            partials = list(registry.rule_for(app.func)(*app.args))
            inner = sum((sympy.sympify(p) * derivative(arg, x)
                         for p, arg in zip(partials, app.args) if p != 0), sympy.S.Zero)
            result += outer * inner
        result = result.xreplace({u: a for a, u in dummies.items()})
    leftover = result.atoms(sympy.Derivative, sympy.Subs)
    if leftover:
        funcs = sorted({str(d.expr.func) if isinstance(d, sympy.Derivative) else str(d) for d in leftover})
        raise DifferentiationError(
            f"sympy cannot differentiate {funcs} in {expr}; supply a rule with "
            f"symdiff.registry.register_derivative(<function>, lambda *args: (partials...))")
    return result


def tidy(expr: sympy.Expr) -> sympy.Expr:
    """A bounded simplification: ``factor_terms`` on small expressions, kept
    only if it reduces the operation count (never worse, never slow)."""
    ops = sympy.count_ops(expr)
    if ops == 0 or ops > _SIMPLIFY_MAX_OPS:
        return expr
    candidate = sympy.factor_terms(expr)
    return candidate if sympy.count_ops(candidate) < ops else expr


def float_template(exprs: tuple[sympy.Expr, ...]) -> tuple[tuple[sympy.Expr, ...], dict]:
    """``exprs`` with each float constant replaced by a placeholder symbol, and
    the map back.  Traced programs repeat one body with many constants
    (``x * 0.5``, ``x * 0.25``); caching on the template differentiates it once."""
    floats = sorted(set().union(*(e.atoms(sympy.Float) for e in exprs)), key=float)
    if not floats:
        return exprs, {}
    placeholders = {f: sympy.Symbol(f"_const{k}", real=True) for k, f in enumerate(floats)}
    return tuple(e.xreplace(placeholders) for e in exprs), {p: f for f, p in placeholders.items()}


@functools.lru_cache(maxsize=None)
def _partials(body: tuple[tuple[str, sympy.Expr], ...],
              inputs: tuple[tuple[str, sympy.Symbol], ...]) -> dict[tuple[str, str], sympy.Expr]:
    out = {}
    for o, expr in body:
        if isinstance(expr, sympy.logic.boolalg.Boolean) and not expr.is_Symbol:
            continue  # a comparison or mask: no gradient flows through it
        for a, sym in inputs:
            if not is_float_symbol(sym) or sym not in expr.free_symbols:
                continue
            d = tidy(derivative(expr, sym))
            if d != 0:
                out[(o, a)] = d
    return out


def tasklet_partials(body: Mapping[str, sympy.Expr],
                     inputs: Mapping[str, sympy.Symbol]) -> dict[tuple[str, str], sympy.Expr]:
    """``{(output_connector, input_connector): partial}``, nonzero partials only.

    A missing pair means the output does not depend differentiably on that
    input (activity analysis prunes on exactly this)."""
    template, back = float_template(tuple(body.values()))
    partials = _partials(tuple(zip(body, template)), tuple(inputs.items()))
    return {k: d.xreplace(back) for k, d in partials.items()} if back else partials


@functools.lru_cache(maxsize=None)
def may_be_nonfinite(expr: sympy.Expr) -> bool:
    """True unless ``expr`` is provably finite for finite arguments: only
    polynomials and bounded functions of them.  Contributions whose partial
    may be inf/nan are guarded so that a zero cotangent gives exactly 0."""
    for node in sympy.preorder_traversal(expr):
        if isinstance(node, sympy.Pow) and not (node.exp.is_Integer and node.exp >= 0):
            return True
        if isinstance(node, Application) and not isinstance(node, _BOUNDED):
            return True
    return False


def guarded_product(g: sympy.Symbol, partial: sympy.Expr) -> sympy.Expr:
    """``g * partial``, but exactly 0 where ``g == 0`` if ``partial`` may be
    non-finite there (``where(x > 0, sqrt(x), 0)`` at ``x < 0``; JAX gives nan).

    Caveat for higher order: the guard's derivative with respect to ``g`` is 0
    at ``g == 0`` exactly, where the true one is ``partial``."""
    if not may_be_nonfinite(partial):
        return g * partial
    return sympy.Piecewise((0, sympy.Eq(g, 0)), (g * partial, True))


def _forget() -> None:
    _partials.cache_clear()


registry.on_change(_forget)
