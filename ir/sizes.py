"""Binding size symbols (``N = sd.symbol("N")``) to integers at call time."""
from __future__ import annotations

from typing import Mapping

import numpy as np
import sympy

from .graph import DataflowGraph, GraphError


def bind_sizes(graph: DataflowGraph, inputs: Mapping[str, np.ndarray],
               sizes: Mapping[str, int] | None = None) -> dict[str, int]:
    """Solve each argument's symbolic dims from the arrays passed in.

    Only plain-symbol dims are solved (``N``); a compound dim (``N + 1``) is
    checked once its symbols are known.  A conflict names both arguments.
    """
    bound: dict[str, int] = dict(sizes or {})
    origin: dict[str, str] = {k: "sizes=" for k in bound}
    for name in graph.arguments:
        c = graph.containers[name]
        if name not in inputs:
            continue
        shape = np.shape(inputs[name])
        if len(shape) != len(c.shape):
            raise GraphError(f"argument {name!r}: expected {len(c.shape)} dimensions {c.shape}, got shape {shape}")
        for dim, actual in zip(c.shape, shape):
            if isinstance(dim, sympy.Symbol):
                prev = bound.get(dim.name)
                if prev is not None and prev != actual:
                    raise GraphError(f"size {dim.name} is {prev} from {origin[dim.name]} but argument "
                                     f"{name!r} has {actual} there (shape {shape})")
                if actual == 0:  # sympy simplified with N > 0 (N/N = 1, sums over N nonempty)
                    raise GraphError(f"argument {name!r} has size 0 in the dimension of size symbol {dim.name} "
                                     f"(shape {shape}); size symbols are positive: trace 0-size arrays "
                                     "with a fixed spec (sd.f32[0]) instead")
                bound[dim.name] = int(actual)
                origin.setdefault(dim.name, f"argument {name!r}")
    for name in graph.arguments:
        if name in inputs:
            expected = graph.containers[name].concrete_shape(bound)
            if tuple(np.shape(inputs[name])) != expected:
                raise GraphError(f"argument {name!r}: expected shape {expected}, got {np.shape(inputs[name])}")
    return bound


def substitute_sizes(expr, sizes: Mapping[str, int]):
    """An expression with size symbols replaced by their bound values."""
    expr = sympy.sympify(expr)
    if not sizes or not expr.free_symbols:  # (subs with nothing to replace still walks the expression)
        return expr
    values = {s: sizes[s.name] for s in expr.free_symbols if s.name in sizes and s.is_positive}
    return expr.subs(values) if values else expr
