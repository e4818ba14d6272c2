"""Push accumulation: per-sample gradients of broadcast inputs.

By default the gradient of an input read by a tasklet whose domain has axes
the read index does not use (the input is *broadcast* along them: a bias
added to every row, the weights of ``x @ w`` used by every sample) is the sum
of the contributions over those axes.  ``accumulate={"w": "push"}`` keeps
them apart instead: the gradient container gets the broadcast's *batch axes*
in front of the input's own shape, and each backward write keeps the batch
index (``grad_w[i, k, j] = ...`` where the default writes
``grad_w[k, j] += ...``).  The forward pass is unchanged, so the broadcast
is never materialised; summing the pushed gradient over its batch axes gives
the default gradient.

The batch axes are derived from the graph, not recorded by the tracer: they
are the domain axes of each tasklet reading the input that its read memlets
do not use, in domain order.  Every reading tasklet must broadcast the input
over batch axes of the same extents, so that one batch element means the same
thing in each contribution (a matmul's rows and a bias add's rows, both of
size B); an unbroadcast use (a regulariser ``np.sum(w ** 2)``) has no batch
element to push to and is refused.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import sympy

from symdiff.ir import tasklet_notes as notes
from symdiff.ir.graph import DataflowGraph

from .activity import Activity
from .errors import DifferentiationError

ACCUMULATE_MODES = ("sum", "push")


@dataclass(frozen=True)
class PushLayout:
    """Where a pushed input's gradient keeps its batch axes."""

    batch: tuple[sympy.Expr, ...]              # extents of the batch axes, before the input's shape
    indices: dict[str, tuple[sympy.Expr, ...]]  # reading tasklet -> its batch index (from 0)

    def index(self, tasklet: str, index: tuple) -> tuple:
        """The gradient write index of ``tasklet``'s read at ``index``."""
        return self.indices[tasklet] + tuple(index)


def check_modes(accumulate: Mapping[str, str], inputs: list[str]) -> None:
    """Refuse unknown modes and modes for inputs not differentiated."""
    for name, mode in accumulate.items():
        if mode not in ACCUMULATE_MODES:
            raise DifferentiationError(f"accumulate[{name!r}] = {mode!r}: the modes are "
                                       f"{', '.join(map(repr, ACCUMULATE_MODES))}")
        if name not in inputs:
            raise DifferentiationError(f"accumulate names {name!r}, which is not among the inputs "
                                       f"differentiated ({inputs})")


def _where(t) -> str:
    return f"{t.source}: " if t.source else ""


def push_layouts(graph: DataflowGraph, activity: Activity, input_nodes: Mapping[str, str],
                 accumulate: Mapping[str, str]) -> dict[str, PushLayout]:
    """``{input access id: PushLayout}`` for the inputs whose mode is ``"push"``."""
    layouts = {}
    for name, mode in accumulate.items():
        if mode != "push":
            continue
        access = input_nodes[name]
        used: dict[str, set] = {}
        for tasklet, pairs in activity.pairs.items():
            for p in pairs:
                if p.read_access == access:
                    used.setdefault(tasklet, set()).update(
                        *(sympy.sympify(e).free_symbols for e in p.read.index))
        if not used:
            raise DifferentiationError(f"accumulate={{{name!r}: 'push'}}: the outputs do not depend on {name!r}, "
                                       "so it has no broadcast to keep per batch element; drop the request")
        batch, indices, first = None, {}, None
        for tasklet, syms in used.items():
            t = graph.node(tasklet)
            if notes.custom_vjp(t) is not None:
                raise DifferentiationError(
                    f"{_where(t)}accumulate={{{name!r}: 'push'}}: {name!r} is an argument of the custom_vjp "
                    f"function {notes.custom_vjp(t)!r}, whose backward returns one summed cotangent; push is "
                    "not supported through a custom backward (leave it out of accumulate)")
            axes = [(s, b, e) for s, b, e in t.domain if s not in syms]
            if not axes:
                raise DifferentiationError(
                    f"{_where(t)}accumulate={{{name!r}: 'push'}}: {t.name} uses {name!r} without broadcasting "
                    f"it (every iteration reads its own element), so it has no batch element to push to; "
                    f"'push' needs every use of {name!r} broadcast against the batch (leave it out of "
                    "accumulate for the summed gradient)")
            extents = tuple(sympy.sympify(e - b) for _, b, e in axes)
            if batch is None:
                batch, first = extents, t
            elif len(extents) != len(batch) or any(sympy.simplify(a - b) != 0 for a, b in zip(extents, batch)):
                raise DifferentiationError(
                    f"{_where(t)}accumulate={{{name!r}: 'push'}}: {t.name} broadcasts {name!r} over batch axes "
                    f"of sizes {extents}, but {first.name} ({first.source}) over {batch}; a pushed input "
                    "needs the same batch in every use")
            indices[tasklet] = tuple(s - b for s, b, _ in axes)
        layouts[access] = PushLayout(batch, indices)
    return layouts
