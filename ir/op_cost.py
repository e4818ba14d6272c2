"""What evaluating a scalar expression again costs, by kind of operation.

One table for both sides of store versus recompute: the differentiator reads
a forward value stored rather than evaluate a call again in a partial
(``tanh' = 1 - o**2`` reads ``o``), and the lowering's cost model
(``lowering.cost_model``) recomputes a value where it is read when doing so is
cheaper than a buffer.  Both ask the kind of each node here, so that what
counts as "a call" is the same question everywhere.  The questions about a
whole expression are cached: planning asks them of the same bodies in every
trial plan.
"""
from __future__ import annotations

import enum
import functools

import sympy


class Op(enum.Enum):
    """The kinds of node an expression holds, cheapest first."""

    LEAF = "leaf"  # a symbol or a number: a register, nothing to compute
    ARITHMETIC = "arithmetic"  # +, -, *, / and integer powers: an instruction each, vectorised everywhere
    CALL = "call"  # a function (exp, tanh, max, a piecewise choice) or a root/fractional power
    LOGIC = "logic"  # a comparison or a boolean connective


def kind(node: sympy.Basic) -> Op:
    """The kind of one node (its arguments aside)."""
    if isinstance(node, sympy.Pow):
        return Op.ARITHMETIC if node.exp.is_Integer else Op.CALL
    if isinstance(node, sympy.core.function.Application):
        return Op.CALL
    if isinstance(node, (sympy.Add, sympy.Mul)):
        return Op.ARITHMETIC
    if isinstance(node, (sympy.Symbol, sympy.Number)):
        return Op.LEAF
    return Op.LOGIC


@functools.lru_cache(maxsize=1 << 15)
def calls(expr: sympy.Expr) -> bool:
    """Whether ``expr`` calls a function or takes a root anywhere: evaluating it
    again costs more than a load on a CPU."""
    return any(kind(n) is Op.CALL for n in sympy.preorder_traversal(expr))


@functools.lru_cache(maxsize=1 << 15)
def arithmetic(expr: sympy.Expr) -> bool:
    """Whether ``expr`` is made of ``+``, ``-``, ``*``, ``/`` and integer powers
    alone: no call a CPU's vectorised loop pays for again where it is recomputed."""
    return all(kind(n) in (Op.LEAF, Op.ARITHMETIC) for n in sympy.preorder_traversal(expr))


@functools.lru_cache(maxsize=1 << 15)
def operations(expr: sympy.Expr) -> int:
    """Operations one evaluation of ``expr`` performs (sympy's count)."""
    return int(sympy.count_ops(expr))
