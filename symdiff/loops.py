"""Loops that stay loops: ``sd.fori_loop`` and ``sd.while_loop``.

A Python ``for`` in a traced program unrolls: every iteration becomes its own
tasklets, planned, generated and compiled again (compile time grows with the
trip count).  ``fori_loop(lo, hi, body, state)`` instead traces ``body`` once
into a graph of its own and keeps the loop out of the program's graph:

* the state going in is copied into fresh containers (``loopK_in*``), which the
  loop reads, and the state coming out is a set of new *argument* containers
  (``loopK_out*``) of the program's graph, so that graph stays an ordinary
  DAG that every stage (validation, differentiation, planning, every device)
  handles as before;
* ``GraphNotes(graph).loops`` lists the loops (``Loop``: bounds, body graph, which
  containers go in and come out), and ``symdiff.loop_runtime`` runs such a
  graph: the program's stages between loops, and each loop as a host-side
  loop of calls of the compiled body;
* the reverse pass runs the body's vector-Jacobian product backwards over the
  iterations from the states the forward run stored, recomputing the others
  (``Loop.schedule``: every state while they fit in the memory left to the
  loop, else binomial checkpointing, ``symdiff.checkpoint_schedule``).

Outside a trace both functions run eagerly on numpy values, so a program
written with them still runs under plain numpy (and its JAX twin uses
``jax.lax.fori_loop`` / ``while_loop`` with the same arguments).
"""
from __future__ import annotations

import collections
import math
import os
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Union

import numpy as np
import sympy

from symdiff import ir
from symdiff.ir.graph_notes import GraphNotes
from symdiff.ir.specs import ArraySpec
from symdiff.ir.tracer import context
from symdiff.ir.tracer.errors import TraceError, user_location
from symdiff.ir.tracer.trace import _trace
from symdiff.ir.tracer.traced_array import TracedArray

from . import checkpoint_schedule
from .loop_closures import Closures

_HERE = os.path.dirname(os.path.abspath(__file__))  # errors name the user's line, not ours


CHECKPOINT_BYTES = 64 * 2 ** 20  # states a loop's reverse pass may hold without a memory_budget (Loop.schedule)
UNROLLED_HINT_TASKLETS = 64   # tasklets traced from one line before the hint below is given
_hinted: set[str] = set()


class UnrolledLoopWarning(UserWarning):
    """A Python loop unrolled into many copies of the same tasklets (``hint_unrolled``)."""


class LoopError(RuntimeError):
    """A ``while_loop`` ran past ``max_iters``: its result would be truncated, so there is none."""


Bound = Union[int, sympy.Expr]  # a Python int, or an integer expression of size symbols (sd.symbol)


@dataclass(frozen=True)
class Loop:
    """One loop kept out of a program's graph (``GraphNotes.loops``).

    ``body`` is the traced body: arguments ``i`` (int32, the iteration) and the
    state (``s0, s1, ...``), results the new state in the same order; ``cond``
    (while loops) has the state as arguments and one bool result.  ``inputs``
    are the program's containers holding the state going in, ``outputs`` the
    program's argument containers holding the state coming out."""

    name: str
    lo: Bound
    hi: Bound | None             # None: a while loop, ``cond`` decides
    body: ir.DataflowGraph
    cond: ir.DataflowGraph | None
    max_iters: Bound | None
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    dtypes: tuple[str, ...]
    checkpoint_every: int | None  # store every k-th state (the user's choice), or
    checkpoints: int | None       # hold at most this many states (the user's choice); neither: from the memory
    where: str | None            # the user's line, for errors

    def bounds(self, sizes: Mapping[str, int]) -> tuple[int, int]:
        """``(lo, end)`` for the sizes a call binds: the first iteration, and ``hi`` (a fori
        loop) or ``lo + max_iters`` (a while loop, which may stop earlier)."""
        lo = self._value(self.lo, "lo", sizes)
        if self.hi is not None:
            return lo, self._value(self.hi, "hi", sizes)
        return lo, lo + self._value(self.max_iters, "max_iters", sizes)

    def _value(self, bound: Bound, what: str, sizes: Mapping[str, int]) -> int:
        if isinstance(bound, int):
            return bound
        value = bound.subs({ir.size_symbol(k): v for k, v in sizes.items()})
        if not value.is_Integer:
            missing = sorted(str(s) for s in value.free_symbols)
            raise ir.GraphError(f"{self.where or self.name}: {what} = {bound} uses size symbol(s) {missing} that "
                                "no argument's shape binds; give an argument that size (e.g. x: sd.f64[T]) or pass "
                                "a Python int")
        return int(value)

    def size_names(self) -> frozenset[str]:
        """Names of the size symbols a run of this loop needs bound: its bounds', its body's and
        condition's shapes' and those of loops nested in them."""
        names = {str(s) for b in (self.lo, self.hi, self.max_iters) if isinstance(b, sympy.Basic)
                 for s in b.free_symbols}
        for graph in (self.body, self.cond):
            if graph is not None:
                names |= size_names(graph)
        return frozenset(names)

    def schedule(self, trips: int, sizes: Mapping[str, int] | None = None,
                 state_memory: int | None = None) -> checkpoint_schedule.Schedule:
        """Which states a run of ``trips`` iterations stores for its reverse pass: every
        ``checkpoint_every``-th if given; else as many as ``checkpoints`` (if given) or as fit in
        ``state_memory`` bytes (default ``CHECKPOINT_BYTES``) hold, every state if all fit,
        else binomial checkpointing (``symdiff.checkpoint_schedule``).  At least the state going
        in is held."""
        if self.checkpoint_every:
            return checkpoint_schedule.every(trips, self.checkpoint_every)
        budget = CHECKPOINT_BYTES if state_memory is None else state_memory
        slots = self.checkpoints or max(1, budget // max(self.state_bytes(sizes), 1))
        return checkpoint_schedule.binomial(trips, slots)

    def state_bytes(self, sizes: Mapping[str, int] | None = None) -> int:
        """Bytes of one state (for the sizes a call binds)."""
        shapes = (self.body.containers[f"s{k}"].concrete_shape(sizes) for k in range(len(self.dtypes)))
        return sum(math.prod(s) * np.dtype(ir.DTYPES[d]).itemsize for s, d in zip(shapes, self.dtypes))


def size_names(graph: ir.DataflowGraph) -> frozenset[str]:
    """Names of the size symbols running ``graph`` needs: its shapes' and its loops' (bounds, bodies)."""
    names = {str(s) for s in graph.size_symbols()}
    for loop in loops_of(graph):
        names |= loop.size_names()
    return frozenset(names)


def fori_loop(lo: int | sympy.Expr, hi: int | sympy.Expr, body: Callable, state: Any, *,
              checkpoints: int | None = None, checkpoint_every: int | None = None) -> Any:
    """``state = body(i, state)`` for ``i`` in ``range(lo, hi)``, traced once and kept a loop.

    ``state`` is an array or a tuple of arrays; ``body`` returns the new state
    with the same shapes and dtypes.  In a traced program ``i`` is an int32
    scalar array.  ``lo`` and ``hi`` are Python ints or integer expressions of
    size symbols (``T = sd.symbol("T")``, ``hi=T`` or ``hi=N - 1``) that the
    arguments' shapes bind at each call: another trip count runs the same
    compiled body.  The reverse pass needs the state going into every
    iteration: it stores every state while they fit in the memory left to it
    (the program's ``memory_budget``, else ``CHECKPOINT_BYTES``), else holds
    ``checkpoints`` states (if given; else as many as fit) and recomputes the
    others by binomial checkpointing, or stores every ``checkpoint_every``-th
    state and recomputes those in between (``Loop.schedule``)."""
    where = user_location(skip=(_HERE,))
    lo, hi = _bound(lo, "lo", where), _bound(hi, "hi", where)
    _checkpointing(checkpoints, checkpoint_every, where)
    if context.active() is None:
        _eager_bounds("fori_loop", where, lo, hi)
        for i in range(lo, hi):
            state = body(i, state)
        return state
    return _traced_loop(lo, hi, body, body, None, None, state, (checkpoint_every, checkpoints), where)


def while_loop(cond: Callable, body: Callable, state: Any, *, max_iters: int | sympy.Expr,
               checkpoints: int | None = None, checkpoint_every: int | None = None) -> Any:
    """``while cond(state): state = body(state)``, at most ``max_iters`` times.

    A loop still running after ``max_iters`` iterations raises ``LoopError``
    when the program runs (never a truncated result).  ``cond`` returns a
    scalar bool array; no gradient flows through it (the trip count is
    piecewise constant).  ``checkpoints`` / ``checkpoint_every`` as in
    ``fori_loop``; the trip count is known only when the loop ends, so the
    states stored are every one while they fit, then every 2nd, 4th, ...
    (``checkpoint_schedule.Online``)."""
    where = user_location(skip=(_HERE,))
    max_iters = _bound(max_iters, "max_iters", where)
    _checkpointing(checkpoints, checkpoint_every, where)
    if context.active() is None:
        _eager_bounds("while_loop", where, max_iters)
        for _ in range(max_iters):
            if not bool(cond(state)):
                return state
            state = body(state)
        if bool(cond(state)):
            raise LoopError(f"while_loop ({where}) still running after max_iters={max_iters} iterations; "
                            "raise max_iters if the loop converges more slowly")
        return state
    return _traced_loop(0, None, lambda i, s: body(s), body, cond, max_iters, state,
                        (checkpoint_every, checkpoints), where)


def _bound(value: Any, what: str, where: str | None) -> Bound:
    """A Python int, or an integer expression of size symbols (bound when the program is called)."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, sympy.Expr):
        expr = sympy.sympify(value)
        if expr.is_Integer:
            return int(expr)
        if expr.free_symbols and all(s.is_integer and s.is_positive for s in expr.free_symbols) and expr.is_integer:
            return expr
        raise TraceError("fori_loop", f"{what} = {expr} is not an integer expression of size symbols; use "
                         "symbols from sd.symbol (integer, positive) and integer arithmetic (N - 1, N // 2)", where)
    raise TraceError("fori_loop", f"{what} must be a Python int or a size symbol (sd.symbol) bound by an "
                     f"argument's shape (got {type(value).__name__}); a trip count that depends on data is a "
                     "while_loop(cond, body, state, max_iters=N)", where)


def _checkpointing(checkpoints: int | None, every: int | None, where: str | None) -> None:
    for name, value in (("checkpoints", checkpoints), ("checkpoint_every", every)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1):
            raise TraceError("fori_loop", f"{name} must be a positive int (got {value!r})", where)
    if checkpoints is not None and every is not None:
        raise TraceError("fori_loop", "pass checkpoints= (states held: binomial checkpointing) or "
                         "checkpoint_every= (a state stored every k iterations), not both", where)


def _eager_bounds(op: str, where: str | None, *bounds: Bound) -> None:
    if any(not isinstance(b, int) for b in bounds):
        raise TraceError(op, "a bound given as a size symbol (sd.symbol) is bound by a traced program's "
                         "arguments; outside a traced program pass Python ints", where)


def _leaves(state: Any, where: str | None) -> tuple[list[TracedArray], bool]:
    single = not isinstance(state, (tuple, list))
    leaves = [state] if single else list(state)
    for k, leaf in enumerate(leaves):
        if not isinstance(leaf, TracedArray):
            raise TraceError("fori_loop", f"state element {k} is a {type(leaf).__name__}; the state of a traced "
                             "loop is traced arrays (np.asarray(value) inside the program makes one)", where)
    return leaves, single


class _Traceable:
    """What ``ir.tracer.trace._trace`` needs of a function: a name, the user's
    globals (``np.zeros`` inside the body is traced) and a call."""

    def __init__(self, name: str, fn: Callable, user_fn: Callable):
        self.__name__ = name
        self.__globals__ = getattr(user_fn, "__globals__", {})
        self._fn = fn

    def __call__(self, *args):
        return self._fn(*args)


def _trace_part(name: str, fn: Callable, user_fn: Callable, names: list[str], specs: tuple[ArraySpec, ...],
                outer: ir.DataflowGraph, where: str | None, closures: Closures) -> ir.DataflowGraph:
    """Trace ``fn`` on its own; outer arrays it reads go to ``closures``."""
    nodes = outer.nx.number_of_nodes()
    try:
        graph = _trace(_Traceable(name, fn, user_fn), names, specs, capture=closures)
    except KeyError as exc:
        raise TraceError("fori_loop", f"the loop body uses an array from outside the loop in a way that cannot be "
                         f"captured ({exc}); pass it in the state (and return it unchanged)", where) from None
    if outer.nx.number_of_nodes() != nodes:
        raise TraceError("fori_loop", "the loop body uses an array from outside the loop in a way that cannot be "
                         "captured; pass it in the state (and return it unchanged)", where)
    return graph


def _spec(leaf: TracedArray) -> ArraySpec:
    return ArraySpec(leaf.dtype_name)[leaf.sym_shape] if leaf.sym_shape else ArraySpec(leaf.dtype_name)


def _trace_parts(name: str, body: Callable, user_body: Callable, cond: Callable | None, leaves: list[TracedArray],
                 single: bool, extra: list[TracedArray], closures: Closures, outer: ir.DataflowGraph,
                 where: str | None) -> tuple[ir.DataflowGraph, ir.DataflowGraph | None]:
    """The body's and condition's graphs, whose state is ``leaves`` plus the
    closure arrays ``extra`` (passed through the body unchanged)."""
    n = len(leaves)
    specs = tuple(_spec(leaf) for leaf in leaves + extra)
    state_names = [f"s{k}" for k in range(len(specs))]

    def body_fn(i, *s):
        if extra:
            closures.bind(s[n:])
        new = body(i, s[0] if single else tuple(s[:n]))
        new_leaves = [new] if single else (list(new) if isinstance(new, (tuple, list)) else [new])
        if len(new_leaves) != n:
            raise TraceError("fori_loop", f"the body returns {len(new_leaves)} state element(s) for "
                             f"{n} going in; it must return the state's structure", where)
        for k, (a, b) in enumerate(zip(leaves, new_leaves)):
            shape = getattr(b, "sym_shape", None)
            dtype = getattr(b, "dtype_name", None)
            if shape is not None and (tuple(shape) != tuple(a.sym_shape) or dtype != a.dtype_name):
                raise TraceError("fori_loop", f"state element {k} goes in as {a.dtype_name}{list(a.sym_shape)} "
                                 f"and comes out as {dtype}{list(shape)}; the body must keep shapes and dtypes",
                                 where)
        return tuple(new_leaves) + tuple(s[n:])

    body_graph = _trace_part(f"{name}_body", body_fn, user_body, ["i", *state_names],
                             (ArraySpec("int32"), *specs), outer, where, closures)
    if cond is None:
        return body_graph, None

    def cond_fn(*s):
        if extra:
            closures.bind(s[n:])
        return cond(s[0] if single else tuple(s[:n]))

    cond_graph = _trace_part(f"{name}_cond", cond_fn, cond, state_names, specs, outer, where, closures)
    (result,) = GraphNotes(cond_graph).result_names
    c = cond_graph.containers[result]
    if c.dtype != "bool" or c.shape != ():
        raise TraceError("while_loop", f"cond returns {c.dtype}{list(c.shape)}; it must return one bool "
                         "(a scalar comparison such as `np.max(abs(r)) > tol`)", where)
    return body_graph, cond_graph


def _traced_loop(lo: int, hi: int | None, body: Callable, user_body: Callable, cond: Callable | None,
                 max_iters: int | None,
                 state: Any, checkpointing: tuple[int | None, int | None], where: str | None) -> Any:
    tr = context.current("fori_loop")
    if tr.map_ranges:
        raise TraceError("fori_loop", "a loop cannot run inside an sd.map body", where)
    leaves, single = _leaves(state, where)
    outer = tr.graph
    name = f"loop{len(GraphNotes(outer).loops)}"  # per program: the same program gives the same Slang
    closures = Closures(where)
    body_graph, cond_graph = _trace_parts(name, body, user_body, cond, leaves, single, [], closures, outer, where)
    extra = list(closures.arrays.values())
    if extra:   # the body reads outer arrays: trace again with them as state (loop_closures)
        body_graph, cond_graph = _trace_parts(name, body, user_body, cond, leaves, single, extra, closures, outer,
                                              where)
    inputs, outputs, new_state = [], [], []
    for k, leaf in enumerate(leaves + extra):
        copied = leaf.copy()  # a container of its own, written once: the loop's input
        for writer, _ in outer.writers(outer.latest(copied.container)):
            outer.node(writer).source = where  # the user's fori_loop line, not this module's
        inputs.append(copied.container)
        out = outer.unique_name(f"{name}_out{k}")
        outer.add_container(out, leaf.sym_shape, leaf.dtype_name, role="argument")
        outer.access(out)
        outputs.append(out)
        new_state.append(TracedArray(tr, out, leaf.sym_shape, leaf.dtype_name))
    loop = Loop(name, lo, hi, body_graph, cond_graph, max_iters, tuple(inputs), tuple(outputs),
                tuple(leaf.dtype_name for leaf in leaves + extra), *checkpointing, where)
    GraphNotes(outer).loops = [*GraphNotes(outer).loops, loop]
    return new_state[0] if single else tuple(new_state[:len(leaves)])


def loops_of(graph: ir.DataflowGraph) -> list[Loop]:
    """The loops kept out of ``graph`` (empty for a loop-free program)."""
    return list(GraphNotes(graph).loops)


def hint_unrolled(graph: ir.DataflowGraph, threshold: int = UNROLLED_HINT_TASKLETS) -> None:
    """Warn, once per source line, where one line of the program traced into ``threshold`` or more
    tasklets of the same structure: a Python loop unrolled around it, and every copy is planned,
    generated and compiled again (first-call time grows with the trip count); ``sd.fori_loop``
    traces the body once."""
    shapes = collections.Counter((t.source, len(t.domain), tuple(sorted(t.inputs)), tuple(t.body))
                                 for t in graph.tasklets() if t.source and not t.backward)
    for (line, *_), count in shapes.most_common():
        if count < threshold:
            return
        if line in _hinted:
            continue
        _hinted.add(line)
        warnings.warn(f"{line}: this line was traced {count} times with the same structure: a Python loop "
                      "around it is unrolled, and the first call compiles every copy. "
                      "sd.fori_loop(lo, hi, body, state) traces the body once and compiles in a time that "
                      "does not grow with the trip count.", UnrolledLoopWarning, stacklevel=2)
