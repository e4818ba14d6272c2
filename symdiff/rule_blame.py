"""Which hand-written derivative rule a failing gradient check comes from.

A gradient check that fails where every tasklet's symbolic partials agree with
finite differences usually has a user's rule to blame: an ``sd.custom_vjp``
backward replaces the partials of its forward's tasklets, so checking those
partials cannot see it.  Each rule is tried by leaving it out (the reverse
pass then differentiates that call's forward automatically): the rule whose
removal makes the gradient agree is named.  A rule given with
``sd.register_derivative`` is inside a tasklet's partials, so the tasklet
check already finds it; ``registered_rule_note`` says so on that line.
"""
from __future__ import annotations

from typing import Callable, Mapping

import numpy as np

from symdiff import ir
from symdiff.ir.graph import DataflowGraph
from symdiff.ir.graph_notes import GraphNotes

from .backward import add_backward_pass
from .registry import user_rules_in

Agrees = Callable[[np.ndarray], bool]


def registered_rule_note(graph: DataflowGraph, tasklet: str) -> str:
    """`` (uses the derivative registered for f with sd.register_derivative)``
    when the tasklet's body holds a function with a user's rule, else ``""``."""
    body = graph.node(tasklet).body
    names = sorted({n for expr in body.values() for n in user_rules_in(expr)})
    if not names:
        return ""
    return f" (uses the derivative registered for {', '.join(names)} with sd.register_derivative)"


def custom_vjp_blame(graph: DataflowGraph, x: str, values: Mapping[str, np.ndarray],
                     cotangents: Mapping[str, np.ndarray], sizes: Mapping[str, int], agrees: Agrees) -> str:
    """A paragraph naming the ``sd.custom_vjp`` calls whose backward makes the
    gradient of ``x`` disagree (``agrees(gradient)`` is False with the rule,
    True without it), or listing the calls it goes through when leaving out
    none alone settles it; ``""`` for a graph without custom rules."""
    calls = tuple(GraphNotes(graph).custom_vjps)
    if not calls:
        return ""
    guilty = [c for c in calls if agrees(_gradient_without(graph, c.call, x, values, cotangents, sizes))]
    if guilty:
        named = "; ".join(_describe(c) for c in guilty)
        return (f"\nThe disagreement comes from the backward rule of sd.custom_vjp {named}: with that call "
                f"differentiated automatically instead, the gradient of {x!r} agrees with finite differences. "
                "Check the rule's backward (its cotangents) against its forward.")
    named = "; ".join(_describe(c) for c in calls)
    return (f"\nThe gradient also goes through sd.custom_vjp rules, whose backward finite differences of "
            f"tasklets cannot check: {named}.")


def _describe(call) -> str:
    return f"{call.name!r} (call {call.call}{', ' + call.source if call.source else ''})"


def _gradient_without(graph: DataflowGraph, dropped: str, x: str, values: Mapping[str, np.ndarray],
                      cotangents: Mapping[str, np.ndarray], sizes: Mapping[str, int]) -> np.ndarray:
    """The gradient of ``x`` with the custom rule of the call ``dropped`` left out."""
    g = graph.copy()
    GraphNotes(g).custom_vjps = tuple(c for c in GraphNotes(graph).custom_vjps if c.call != dropped)
    grads = add_backward_pass(g, [x], list(cotangents))
    feed = {**values, **{GraphNotes(g).seeds[o]: ct for o, ct in cotangents.items()}}
    return ir.run(g, feed, sizes=sizes, float_dtype="float64")[grads[x]]
