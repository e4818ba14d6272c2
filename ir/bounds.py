"""Host-side diagnosis of index arguments.

The kernels find out-of-range data-dependent indices themselves
(``lowering.bounds_check``), and the interpreter checks every access; when
either reports one, this module names the culprit in the caller's terms: it
evaluates every index that uses a value of an int32 *argument* over the
tasklet's domain and compares it with the extent it indexes.  Index arrays
computed inside the program are not covered here (the kernel's own report
names them).
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
import sympy

from .graph import DataflowGraph, IndexOutOfRange, Memlet, Tasklet
from .interpreter import _evaluate, _index_arrays, _Point
from .sizes import bind_sizes


def check_index_arguments(graph: DataflowGraph, inputs: Mapping[str, np.ndarray],
                          sizes: Mapping[str, int] | None = None) -> None:
    """Raise ``IndexOutOfRange`` naming the argument, the offending element and
    value, the container and axis it indexes, and the tasklet."""
    bound = bind_sizes(graph, inputs, sizes)
    for t in graph.tasklets():
        direct = {t.inputs[m.connector]: (a, m) for a, m in graph.reads(t.name)
                  if _is_index_argument(graph, a) and not (_free(m.index) & set(t.inputs.values()))}
        if not direct:
            continue
        accesses = [m for _, m in graph.reads(t.name)] + [m for _, m in graph.writes(t.name)]
        for m in accesses:
            for axis, e in enumerate(m.index):
                used = [s for s in sympy.sympify(e).free_symbols if s in direct]
                if used:
                    _check_component(graph, t, m, axis, sympy.sympify(e), used, direct, inputs, bound)


def _free(index) -> set:
    return set().union(*(sympy.sympify(e).free_symbols for e in index))


def _is_index_argument(graph: DataflowGraph, access: str) -> bool:
    node = graph.node(access)
    c = graph.containers[node.container]
    return c.role == "argument" and c.dtype == "int32" and node.version == 0


def _check_component(graph: DataflowGraph, t: Tasklet, m: Memlet, axis: int, e: sympy.Expr, used: list,
                     direct: dict, inputs: Mapping[str, np.ndarray], sizes: Mapping[str, int]) -> None:
    point = _Point(t, sizes)
    if 0 in point.shape:
        return
    positions, values = {}, {}
    for s in used:
        _, rm = direct[s]
        positions[s] = _index_arrays(rm, point, {}, sizes)
        arg = np.asarray(inputs[rm.container])
        values[s] = np.broadcast_to(arg[positions[s]] if positions[s] else arg[()], point.shape)
    grids = [np.broadcast_to(g, point.shape) for g in point.grids]
    (index,) = _evaluate(point.symbols + tuple(used), (e,), grids + [values[s] for s in used], point.shape)
    extent = graph.containers[m.container].concrete_shape(sizes)[axis]
    bad = np.flatnonzero((index < 0) | (index >= extent))
    if not bad.size:
        return
    at = np.unravel_index(bad[0], point.shape)
    s = used[0]
    name = direct[s][1].container
    element = tuple(int(np.broadcast_to(p, point.shape)[at]) for p in positions[s])
    where = f"{name}[{', '.join(map(str, element))}]" if element else name
    raise IndexOutOfRange(
        f"argument {name!r} holds {int(values[s][at])} at {where}"
        + ("" if int(values[s][at]) == int(index[at]) else f", giving index {int(index[at])},") + " out of range "
        f"for axis {axis} of {m.container!r} (extent {extent}) in tasklet {t.name}"
        + (f" ({t.source})" if t.source else ""))
