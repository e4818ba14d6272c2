"""The numpy interpreter: reference semantics of the IR and the ``"numpy"`` device.

Each tasklet is evaluated for its whole domain with numpy broadcasting (open
index grids), never with a Python loop per element, so it stays usable at
millions of elements; large domains run a block of rows at a time, several
tasklets together (``ir.blocks``), so host memory stays near what numpy needs
for the same expression.  Everything here follows the rules in ``graph.py``.
"""
from __future__ import annotations

import functools
from typing import Mapping

import numpy as np
import sympy

from .blocks import Run, plan_runs
from .graph import (ACCUMULATION_IDENTITY, DTYPES, FLOAT_DTYPES, DataflowGraph, GraphError, IndexOutOfRange,
                    Memlet, Tasklet)
from .library.node import LibraryNode
from .library.run import run_node
from .index_analysis import FLOOR_DIVIDE, exact_integer_division, unit_shifts
from .sizes import bind_sizes, substitute_sizes
from .scalar_functions import logical_not

_UFUNC = {"sum": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply}


def _without_ite(expr: sympy.Basic) -> sympy.Basic:
    """``ITE(c, a, b)`` as ``(c & a) | (~c & b)``: lambdify prints an ITE that
    its cse made a variable of as a float ``select`` with a nan default, which
    numpy then refuses as a condition (second derivatives of np.prod)."""
    if not expr.has(sympy.ITE):
        return expr
    return expr.replace(lambda e: isinstance(e, sympy.ITE),
                        lambda e: sympy.Or(sympy.And(e.args[0], e.args[1]),
                                           sympy.And(logical_not(e.args[0]), e.args[2])))


@functools.lru_cache(maxsize=4096)
def _compile(args: tuple[sympy.Symbol, ...], exprs: tuple[sympy.Basic, ...]):
    """numpy function of ``args`` returning ``exprs`` (cached across calls).
    Integer quotients stay integer: a float ``floor`` of a rational index
    (``floor(i/3 - 1/3)``) rounds ``1.9999999999999998`` down to 1."""
    exprs = tuple(_without_ite(exact_integer_division(e)) for e in exprs)
    return sympy.lambdify(args, list(exprs), modules=[{FLOOR_DIVIDE.__name__: np.floor_divide}, "numpy"],
                          cse=len(exprs) > 1 or None)


def _evaluate(args: tuple, exprs: tuple, values: list, shape: tuple[int, ...]) -> list[np.ndarray]:
    fn = _compile(args, exprs)
    with np.errstate(all="ignore"):
        out = fn(*values)
    return [np.broadcast_to(np.asarray(o), shape) for o in out]


class _Point:
    """The iteration points of one tasklet: open grids, or flat coordinates
    when a condition removes some points.  The grids are built on first use:
    a tasklet whose expressions and indices need no index value (most
    elementwise ones, read through ``_view``) never builds them."""

    def __init__(self, tasklet: Tasklet, sizes: Mapping[str, int], rows: tuple[int, int] | None = None):
        self.begins, extents = [], []
        for sym, begin, end in tasklet.domain:
            b, e = substitute_sizes(begin, sizes), substitute_sizes(end, sizes)
            if not (b.is_Integer and e.is_Integer):
                raise GraphError(f"tasklet {tasklet.name}: domain {sym}={begin}:{end} has unbound sizes")
            self.begins.append(int(b))
            extents.append(max(int(e) - int(b), 0))
        if rows is not None:  # one block: rows [lo, hi) of the first axis (``ir.blocks``)
            self.begins[0] += rows[0]
            extents[0] = rows[1] - rows[0]
        self.symbols = tasklet.index_symbols
        self.full_shape = tuple(extents)
        self._grids: list[np.ndarray] | None = None
        self.shape = self.full_shape
        self.masked = False
        cond = tasklet.condition
        if cond is not sympy.true and extents:
            ranges = self._ranges()
            cond = substitute_sizes(cond, sizes)
            # full-shape grids: lambdify turns And(a, b, c) into logical_and.reduce((a, b, c)),
            # which cannot stack open grids of different shapes
            full = [np.broadcast_to(g, self.full_shape) for g in self.grids]
            mask = _evaluate(self.symbols, (cond,), full, self.full_shape)[0]
            coords = np.nonzero(mask)
            self._grids = [r[c] for r, c in zip(ranges, coords)]
            self.shape = (len(coords[0]),)
            self.masked = True

    def _ranges(self) -> list[np.ndarray]:
        return [np.arange(b, b + n, dtype=np.int64) for b, n in zip(self.begins, self.full_shape)]

    @property
    def grids(self) -> list[np.ndarray]:
        if self._grids is None:
            self._grids = list(np.ix_(*self._ranges())) if self.begins else []
        return self._grids


def _index_arrays(memlet: Memlet, point: _Point, int_values: dict, sizes) -> tuple:
    args = point.symbols + tuple(int_values)
    exprs = tuple(substitute_sizes(e, sizes) for e in memlet.index)
    if not exprs:
        return ()
    vals = _evaluate(args, exprs, point.grids + list(int_values.values()), point.shape)
    return tuple(np.asarray(v, dtype=np.int64) for v in vals)


def _view(memlet: Memlet, point: _Point, array: np.ndarray, sizes: Mapping[str, int]) -> np.ndarray | None:
    """The elements ``memlet`` touches, as a view of ``array`` whose axes
    follow the domain's (size 1 where the index does not use a domain
    symbol), when every index component is a unit shift within bounds and the
    point's grids are open; None otherwise (then index arrays are built).
    A view costs no copy and no int64 index array per component: at millions
    of elements those were most of the numpy device's memory."""
    if point.masked or not memlet.index:
        return None
    shifts = unit_shifts(memlet.index, point.symbols)
    if shifts is None:
        return None
    key, axes = [], []
    for (sym, offset), extent in zip(shifts, array.shape):
        offset = substitute_sizes(offset, sizes)
        if not offset.is_Integer:
            return None
        if sym is None:
            if not 0 <= int(offset) < extent:
                return None  # out of range: the index path reports it
            key.append(int(offset))
            continue
        k = point.symbols.index(sym)
        lo = point.begins[k] + int(offset)
        hi = lo + point.full_shape[k]
        if lo < 0 or hi > extent:
            return None
        key.append(slice(lo, hi))
        axes.append(k)
    if not axes:
        return None  # one element: numpy gives a scalar, not a view
    view = array[tuple(key)].transpose(np.argsort(axes))
    return np.expand_dims(view, tuple(k for k in range(len(point.shape)) if k not in axes))


def _check_bounds(index: tuple, shape: tuple[int, ...], tasklet: Tasklet, memlet: Memlet) -> None:
    for axis, (idx, extent) in enumerate(zip(index, shape)):
        if idx.size and (idx.min() < 0 or idx.max() >= extent):
            bad = idx.min() if idx.min() < 0 else idx.max()
            raise IndexOutOfRange(f"tasklet {tasklet.name}{' (' + tasklet.source + ')' if tasklet.source else ''}: "
                             f"index {bad} out of range for axis {axis} of {memlet.container} "
                             f"(extent {extent}) in access {memlet}")


def _affine_axes(memlet: Memlet, point: _Point) -> list[int] | None:
    """Domain axes a write index uses when it is a unit shift per component
    (``ir.index_analysis.unit_shifts``); None when it is not, or when a
    condition removed points (the grids are then flat)."""
    if point.masked:
        return None
    shifts = unit_shifts(memlet.index, point.symbols)
    if shifts is None:
        return None
    return [point.symbols.index(s) for s, _ in shifts if s is not None]


def _write(target: np.ndarray, memlet: Memlet, value: np.ndarray, point: _Point, index: tuple) -> None:
    value = value.astype(target.dtype, copy=False)
    if not index:  # 0-d target: every point hits its one element, whatever the domain's shape
        if value.size and memlet.accumulate is None:
            target[()] = value.flat[-1]
        elif value.size:
            ufunc = _UFUNC[memlet.accumulate]
            target[()] = ufunc(target[()], ufunc.reduce(value, axis=None))
        return
    if memlet.accumulate is None:
        target[index] = value
        return
    ufunc = _UFUNC[memlet.accumulate]
    axes = _affine_axes(memlet, point)
    if axes is None:
        ufunc.at(target, tuple(np.broadcast_to(i, point.shape) for i in index), value)
        return
    unused = tuple(k for k in range(len(point.shape)) if k not in axes)
    reduced = ufunc.reduce(value, axis=unused) if unused else value
    # remaining axes of `reduced` are the used ones in domain order; index by reduced grids
    kept = tuple(slice(None) if k in axes else 0 for k in range(len(point.shape)))
    sub_index = tuple(np.broadcast_to(i, point.shape)[kept] for i in index)
    target[sub_index] = ufunc(target[sub_index], reduced)


class _Block:
    """Rows ``[lo, hi)`` of a run's domain (None: all of it) and the run's local versions'
    values for those rows, each of the block's shape."""

    def __init__(self, rows: tuple[int, int] | None, dtypes: Mapping[str, type]):
        self.rows, self.dtypes = rows, dtypes
        self.values: dict[str, np.ndarray] = {}


def run_tasklet(graph: DataflowGraph, name: str, values: dict[str, np.ndarray],
                sizes: Mapping[str, int], check_bounds: bool = True, block: _Block | None = None) -> None:
    """Evaluate one tasklet over its domain (or ``block``'s rows of it), reading and writing
    ``values`` (and ``block``'s local versions)."""
    t: Tasklet = graph.node(name)
    point = _Point(t, sizes, block.rows if block else None)
    if 0 in point.shape:
        return  # an empty domain runs no point: it reads and writes nothing
    reads = graph.reads(name)
    conn_values: dict[sympy.Symbol, np.ndarray] = {}
    # direct reads first, then reads whose index uses an integer connector (gather)
    pending = list(reads)
    while pending:
        progressed = False
        for access, memlet in list(pending):
            needs = set().union(*[sympy.sympify(e).free_symbols for e in memlet.index]) - set(point.symbols)
            needs = {s for s in needs if not s.is_positive}
            if not needs <= set(conn_values):
                continue
            int_vals = {s: conn_values[s] for s in needs}
            if block is not None and access in block.values:  # local: read point for point
                conn_values[t.inputs[memlet.connector]] = block.values[access]
                pending.remove((access, memlet))
                progressed = True
                continue
            src = values[access]
            v = _view(memlet, point, src, sizes)
            if v is None:
                index = _index_arrays(memlet, point, int_vals, sizes)
                if check_bounds:
                    _check_bounds(index, src.shape, t, memlet)
                v = src[index] if index else src[()]
            conn_values[t.inputs[memlet.connector]] = np.broadcast_to(v, point.shape)
            pending.remove((access, memlet))
            progressed = True
        if not progressed:
            raise GraphError(f"tasklet {name}: indices of {[str(m) for _, m in pending]} depend on "
                             "connectors that are not read")
    conns = list(t.body)
    exprs = tuple(substitute_sizes(t.body[c], sizes) for c in conns)
    used = set().union(*(e.free_symbols for e in exprs))
    indices = [k for k, s in enumerate(point.symbols) if s in used]  # index values the body computes with
    arg_syms = tuple(conn_values) + tuple(point.symbols[k] for k in indices)
    arg_vals = list(conn_values.values()) + [np.broadcast_to(point.grids[k], point.shape) for k in indices]
    outs = dict(zip(conns, _evaluate(arg_syms, exprs, arg_vals, point.shape)))
    for access, memlet in graph.writes(name):
        if block is not None and access in block.dtypes:  # local: written point for point
            block.values[access] = np.asarray(outs[memlet.connector]).astype(block.dtypes[access], copy=False)
            continue
        target = values[access]
        view = _view(memlet, point, target, sizes)
        if view is not None and view.shape == point.shape:  # every point its own element
            with np.errstate(over="ignore"):  # past a 16-bit float's range is infinity, as on every device
                value = outs[memlet.connector].astype(target.dtype, copy=False)
            if memlet.accumulate is None:
                view[...] = value
            else:
                _UFUNC[memlet.accumulate](view, value, out=view)
            continue
        int_vals = {s: v for s, v in conn_values.items() if s.is_integer}
        index = _index_arrays(memlet, point, int_vals, sizes)
        if check_bounds:
            _check_bounds(index, target.shape, t, memlet)
        _write(target, memlet, outs[memlet.connector], point, index)


def _float_dtype(dtype: str, float_dtype: str | None) -> type:
    return DTYPES[float_dtype if (float_dtype and dtype in FLOAT_DTYPES) else dtype]


def run(graph: DataflowGraph, inputs: Mapping[str, np.ndarray], sizes: Mapping[str, int] | None = None,
        float_dtype: str | None = None, check_bounds: bool = True,
        keep: bool = False) -> dict[str, np.ndarray]:
    """Execute ``graph`` on numpy arrays.

    ``inputs`` maps argument names to arrays (missing arguments are an error);
    returns ``{result_name: array}`` holding each result's latest version.
    ``float_dtype="float64"`` computes every float container in double
    precision (finite differences, oracles).  ``keep=True`` returns every
    access node's value too, keyed by node id, for inspection.

    A version is dropped once its last reader has run (unless ``keep``), one
    that only its run of tasklets uses lives a block at a time (``ir.blocks``),
    and an argument is copied only when the graph writes into its first
    version, so host memory stays near what numpy itself needs for the
    expression (the numpy device runs programs of hundreds of millions of
    elements).
    """
    missing = [a for a in graph.arguments if a not in inputs]
    if missing:
        raise GraphError(f"missing arguments {missing} (graph {graph.name!r} takes {graph.arguments})")
    bound = bind_sizes(graph, inputs, sizes)
    values: dict[str, np.ndarray] = {}

    def allocate(node_id: str) -> None:
        node = graph.node(node_id)
        c = graph.containers[node.container]
        dtype = _float_dtype(c.dtype, float_dtype)
        if c.role == "argument" and node.version == 0:
            written = bool(graph.writers(node_id))  # the caller's array must not change
            values[node_id] = np.array(inputs[c.name], dtype=dtype, copy=True if written else None)
            return
        fill = ACCUMULATION_IDENTITY[graph.accumulation(node_id)]
        if dtype is np.bool_:
            fill = bool(fill) if np.isfinite(fill) else fill > 0
        elif np.issubdtype(dtype, np.integer) and not np.isfinite(fill):
            fill = np.iinfo(dtype).min if fill < 0 else np.iinfo(dtype).max
        values[node_id] = np.full(c.concrete_shape(bound), fill, dtype=dtype)

    needed = {graph.latest(r) for r in graph.results}
    readers_left = {n.id: len({t for t, _ in graph.readers(n.id)}) for n in graph.access_nodes()}
    steps = plan_runs(graph, bound, keep)
    local = set().union(*(s.local for s in steps if isinstance(s, Run)))
    for step in steps:
        if not isinstance(step, Run) and isinstance(graph.node(step), LibraryNode):
            node = graph.node(step)  # a whole-array operation through numpy (ir.library)
            reads = {a for a, _ in graph.reads(step)}
            run_node(graph, node, values, {a: _float_dtype(graph.containers[graph.node(a).container].dtype,
                                                           float_dtype) for a, _ in graph.writes(step)})
            for access in reads:
                readers_left[access] -= 1
                if not (readers_left[access] or keep or access in needed) and access in values:
                    del values[access]
            continue
        if not isinstance(step, Run):
            if step not in values and step not in local:
                allocate(step)
            continue
        for name in step.tasklets:
            for access, _ in graph.writes(name):
                if access not in values and access not in step.local:
                    allocate(access)
        dtypes = {a: _float_dtype(graph.containers[graph.node(a).container].dtype, float_dtype) for a in step.local}
        for rows in step.blocks():
            block = _Block(rows, dtypes)
            for name in step.tasklets:
                run_tasklet(graph, name, values, bound, check_bounds, block)
        for name in step.tasklets:
            for access in {a for a, _ in graph.reads(name)}:
                readers_left[access] -= 1
                if not (readers_left[access] or keep or access in needed) and access in values:
                    del values[access]
    out = {r: values[graph.latest(r)] for r in graph.results}
    if keep:
        out.update(values)
    return out
