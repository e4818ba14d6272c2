"""In-place versions: a new version of a container written into the buffer of
the version before it, where no access can tell the difference.

The tracer turns ``A[i] = v`` on an array with content into a new version of
``A``: a copy tasklet takes every element the write does not (its condition is
the complement of the written elements, ``ir.index_analysis.written_elements``)
and the write stores the rest.  Planned as they are, each such update is a copy
kernel over the whole array and a buffer per version: an unrolled seidel-2d
was half copy kernels, and a one-element update of a large array doubled its
memory.  Here a chain of versions ``v0 <- v1 <- ...`` linked by such copies
shares one buffer, the copy is dropped, and the write lands on the old
version's elements.

That is only right when every access to the shared buffer meets the values
the versions would have held.  In dispatch order, with ``X`` before ``Y``
required for each pair where one writes and the versions say so (a write of
an older version before a write or read of a newer one, a read of an older
version before a write of a newer one), the pair is kept in order when:

* ``X``'s kernel runs before ``Y``'s (kernels are ordered, a finish after its
  kernel's steps); or
* the elements they touch are disjoint (enumerated over their domains, which
  planning has made concrete; a step touches elements only where its condition
  holds, and a read counts only where its value can reach a result: a reverse
  pass's gather reads every version everywhere and selects each where it was
  read); or
* they are in one kernel that runs one thread a point, each thread touches
  the same element in both, at its own point only (an injective index), and
  ``X``'s step comes first (a tasklet reads before it writes).

With the copies gone, neighbouring one-thread kernels join: an unrolled loop's
one-element updates then run in order in one thread.

A pair that fails keeps its copy (and its version's own buffer): this is
purely an optimisation, never a change of meaning.  Arguments' first versions
are the caller's and never written; a chain's first version must be written
whole by every call (overwritten, filled, or a kept copy plus its write), or
a call would see the later versions' elements of the call before.
"""
from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from typing import Callable

import numpy as np
import sympy

from symdiff.ir.graph import DataflowGraph, Memlet
from symdiff.ir.index_analysis import Unanalysable, symbols_in, uses_connectors, written_elements

from . import targets
from .matmul import tiling
from .plan_types import Kernel, Plan, Step, same_point
from .workgroups import layout


@dataclass
class _Access:
    """One step's read or write of a version in a chain."""

    write: bool
    unit: tuple[int, int]  # (kernel, 0 for its steps or 1 for its finish): units run in this order
    order: int  # the step's position in its unit
    step: Step
    memlet: Memlet


class _Elements:
    """Flat element positions an access touches, enumerated once (None: unknown, any).
    Domains of more than ``max_points`` points are not enumerated: their accesses
    count as touching every element (safe: such a pair is kept in order or keeps
    its copy).  ``known``: enumerations by what decides them (domain, condition,
    connectors, index, shape, guards), shared with the other plans of one ``plan``
    call, whose trials ask for the same steps' elements again (jacobi-2d: 28
    enumerations of 512x512 points in each of six plans)."""

    def __init__(self, graph: DataflowGraph, max_points: int, known: dict | None = None):
        self.graph = graph
        self.max_points = max_points
        self.found: dict[tuple[str, Memlet, bool], tuple[np.ndarray | None, bool]] = {}
        self.known = {} if known is None else known

    def of(self, step: Step, memlet: Memlet, write: bool) -> tuple[np.ndarray | None, bool]:
        """(sorted unique positions or None, whether each domain point has its own element)."""
        t = step.tasklet
        key = (t.name, memlet, write)
        if key not in self.found:
            guards = [()] if write else _used_where(self.graph, t, memlet.connector)
            decided_by = (t.domain, t.condition, tuple(t.inputs.values()), tuple(memlet.index),
                          self.graph.containers[memlet.container].shape, tuple(guards))
            if decided_by not in self.known:
                self.known[decided_by] = self._enumerate(t, memlet, guards)
            self.found[key] = self.known[decided_by]
        return self.found[key]

    def _enumerate(self, t, m: Memlet, guards: list[tuple]) -> tuple[np.ndarray | None, bool]:
        """The elements ``m`` touches where ``t``'s condition holds and one of ``guards``
        (conjunctions of conditions, ``_used_where``) does."""
        domain = [(s, int(b), int(e)) for s, b, e in t.domain]
        count = math.prod(max(e - b, 0) for _, b, e in domain)
        if uses_connectors(m.index, t) or count > self.max_points:
            return None, False
        shape = [int(d) for d in self.graph.containers[m.container].shape]
        axes = [a.reshape(-1) for a in np.meshgrid(*[np.arange(b, e, dtype=np.int64) for _, b, e in domain],
                                                   indexing="ij")]
        symbols = [s for s, _, _ in domain]
        flat = np.zeros((count,), dtype=np.int64)
        for k, expr in enumerate(m.index):
            value = _evaluate(sympy.sympify(expr), symbols, axes, count)
            if value is None:
                return None, False
            flat += value * math.prod(shape[k + 1:])
        unique = _sorted_unique(flat)
        injective = unique.size == count
        if t.condition.free_symbols <= set(symbols):
            # only the points where it matters: a step reads and stores inside its condition (a kept
            # copy: the elements its update leaves), and a value a select() discards is not used
            held = _held([(t.condition, *guard) for guard in guards], symbols, axes, count)
            if held is not None:
                unique = _sorted_unique(flat[held])
        return unique, injective

    def disjoint(self, x: _Access, y: _Access) -> bool:
        ex, _ = self.of(x.step, x.memlet, x.write)
        ey, _ = self.of(y.step, y.memlet, y.write)
        if ex is None or ey is None:
            return False
        # by the enumerations, which ``known`` keeps alive: the other plans ask of the same pairs
        # (jacobi-2d: a sort of 2x512x512 positions each, 112 times in its six plans)
        pair = ("disjoint", id(ex), id(ey))
        if pair not in self.known:
            self.known[pair] = _disjoint(ex, ey)
        return self.known[pair]

    def own_point(self, x: _Access, y: _Access) -> bool:
        """Both touch, at each thread point, that point's own element (same index, injective)."""
        writer = x if x.write else y
        _, injective = self.of(writer.step, writer.memlet, True)
        return injective and same_point(x.step, x.memlet, y.step, y.memlet)


def _sorted_unique(flat: np.ndarray) -> np.ndarray:
    """``np.unique(flat)``, by a sort: numpy 2.4's unique hashes, 0.12 s for the 512x512
    points of one of jacobi-2d's steps (its plan took 33 s); an index enumerated in
    domain order is most often increasing already, then returned as it is."""
    if flat.size < 2 or bool(np.all(flat[1:] > flat[:-1])):
        return flat
    ordered = np.sort(flat)
    return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))]


def _disjoint(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether sorted unique ``a`` and ``b`` share no element: a stable sort of both merges
    two sorted runs in one pass (``np.intersect1d`` sorted them again, five times slower)."""
    if not a.size or not b.size or a[-1] < b[0] or b[-1] < a[0]:
        return True
    both = np.concatenate((a, b))
    both.sort(kind="stable")
    return not bool(np.any(both[1:] == both[:-1]))


def _held(conjunctions: list[tuple], symbols: list, axes: list[np.ndarray], count: int) -> np.ndarray | None:
    """Where one of ``conjunctions`` (tuples of conditions) holds, per point; None if a
    condition cannot be evaluated.  Each distinct condition is evaluated once, and no
    sympy ``And``/``Or`` is built: a reverse pass's gather guards a value by hundreds of
    branches, and sympy simplified their disjunction for seconds (lavapipe ludcmp)."""
    values: dict = {}
    for condition in {c for conjunction in conjunctions for c in conjunction}:
        values[condition] = _evaluate(condition, symbols, axes, count, bool)
        if values[condition] is None:
            return None
    held = np.zeros((count,), dtype=bool)
    for conjunction in set(conjunctions):
        held |= functools.reduce(np.logical_and, [values[c] for c in conjunction], np.ones((count,), dtype=bool))
    return held


def _used_where(g: DataflowGraph, t, connector: str) -> list[tuple]:
    """Where a read's value can reach ``t``'s results, as conjunctions (one holding
    suffices): the conditions of the ``Piecewise`` branches it appears in (a reverse
    pass's gathers read each version at every point but use it only where that version
    was read), over the domain's symbols (a condition on data counts as true).  ``[()]``
    (everywhere) where it is used unguarded, or as an index (then it picks elements
    anywhere); ``[]`` where it is not used."""
    symbol = t.inputs.get(connector)
    if symbol is None or any(symbol in sympy.sympify(e).free_symbols
                             for _, m in g.reads(t.name) + g.writes(t.name) for e in m.index):
        return [()]
    domain = {s for s, _, _ in t.domain}
    guards: list[tuple] = []

    def visit(expr: sympy.Basic, guard: tuple) -> None:
        if symbol not in symbols_in(expr):  # (cached per node: free_symbols walked each subtree again)
            return
        if expr == symbol:
            guards.append(guard)
        elif isinstance(expr, sympy.Piecewise):
            for value, cond in expr.args:
                visit(cond, guard)
                visit(value, (*guard, cond) if cond.free_symbols <= domain else guard)
        else:
            for arg in expr.args:
                visit(arg, guard)

    for expr in t.body.values():
        visit(sympy.sympify(expr), ())
    return guards


def _evaluate(expr: sympy.Basic, symbols: list, axes: list[np.ndarray], count: int,
              dtype: type = np.int64) -> np.ndarray | None:
    """``expr`` (an index, or a condition with ``dtype=bool``) at every point of a domain
    (``axes``: each symbol's value per point), by ``_at_points`` where it can (nearly all:
    sympy's code generation cost ~4 ms an expression, and each round of planning an unrolled
    loop asked hundreds), else by ``lambdify``; None if that fails too."""
    try:
        value = _at_points(sympy.sympify(expr), dict(zip(symbols, axes)))
    except _NotVectorised:
        try:
            value = sympy.lambdify(symbols, expr, "numpy")(*axes)
        except (TypeError, ValueError, NameError):  # a function numpy's printer cannot vectorise
            return None
    return np.broadcast_to(np.asarray(value).astype(dtype, copy=False), (count,))


class _NotVectorised(Exception):
    """An expression ``_at_points`` does not evaluate (``lambdify`` then does)."""


_FOLDS = {sympy.Add: np.add, sympy.Mul: np.multiply, sympy.Max: np.maximum, sympy.Min: np.minimum,
          sympy.And: np.logical_and, sympy.Or: np.logical_or}
_COMPARISONS = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
                "==": np.equal, "!=": np.not_equal}


def _at_points(expr: sympy.Basic, values: dict) -> "np.ndarray | int | bool":
    """Integer arithmetic (``+``, ``*``, ``Min``, ``Max``), comparisons and logic over the
    symbols in ``values`` (numpy arrays), exactly in int64; ``_NotVectorised`` for anything else."""
    if expr in values:
        return values[expr]
    if expr.is_Integer:
        return int(expr)
    if expr is sympy.true or expr is sympy.false:
        return bool(expr)
    fold = _FOLDS.get(type(expr))
    if fold is not None:
        return functools.reduce(fold, [_at_points(a, values) for a in expr.args])
    if isinstance(expr, sympy.Not):
        return np.logical_not(_at_points(expr.args[0], values))
    if isinstance(expr, sympy.core.relational.Relational) and expr.rel_op in _COMPARISONS:
        return _COMPARISONS[expr.rel_op](_at_points(expr.lhs, values), _at_points(expr.rhs, values))
    raise _NotVectorised(expr)


def _in_order(x: _Access, y: _Access, elements: _Elements, one_thread_a_point: Callable[[int], bool]) -> bool:
    """Whether ``y`` sees the buffer as it is after ``x``, where it matters
    (``one_thread_a_point``: of a kernel, by its position)."""
    if x.unit != y.unit:
        return x.unit < y.unit or elements.disjoint(x, y)
    if elements.disjoint(x, y):
        return True
    first = x.order < y.order or (x.order == y.order and not x.write and y.write)
    return first and x.unit[1] == 0 and one_thread_a_point(x.unit[0]) and elements.own_point(x, y)


def _plain_copy(g: DataflowGraph, step: Step) -> tuple[str, str] | None:
    """``(source version, new version)`` when the step is an identity copy of
    every element (but those its condition leaves out) into a newer version of
    the same container, else None."""
    t = step.tasklet
    reads, writes = g.reads(t.name), g.writes(t.name)
    if len(reads) != 1 or len(writes) != 1 or len(t.body) != 1:
        return None
    (src, r), (dst, w) = reads[0], writes[0]
    if r.container != w.container or w.accumulate is not None or g.node(dst).version <= g.node(src).version:
        return None
    symbols = [s for s, _, _ in t.domain]
    shape = g.containers[w.container].shape
    full = len(t.domain) == len(shape) and all(int(b) == 0 and int(e) == int(n) for (_, b, e), n in zip(t.domain, shape))
    if not full or list(r.index) != symbols or list(w.index) != symbols:
        return None
    if next(iter(t.body.values())) != t.inputs.get(r.connector):
        return None
    return src, dst


def _writes_the_rest(g: DataflowGraph, copy: Step, writer: Step, m: Memlet, elements: _Elements) -> bool:
    """Whether ``writer`` stores exactly the elements ``copy``'s condition leaves
    out: by the tracer's own analysis of the write, else by enumerating both."""
    t, c = writer.tasklet, copy.tasklet
    if t.condition is not sympy.true or uses_connectors(m.index, t):
        return False
    shape = g.containers[m.container].shape
    try:
        written, _ = written_elements(m.index, t.domain, shape, [s for s, _, _ in c.domain])
        if c.condition == sympy.Not(written):
            return True
    except Unanalysable:
        pass
    copied, _ = elements.of(copy, g.writes(c.name)[0][1], True)  # where its condition holds
    stored, _ = elements.of(writer, m, True)
    return (copied is not None and stored is not None and _disjoint(copied, stored)
            and copied.size + stored.size == math.prod(int(n) for n in shape))


def _one_thread_a_point(g: DataflowGraph, kernel: Kernel, target: "targets.Target | None") -> bool:
    """Whether each point of the kernel is one thread's, its steps run in order:
    no rows, no matmul tiles, no lanes sharing a point's loops (``lowering.workgroups``;
    without a target, only a kernel without loops is sure to have none)."""
    if type(kernel) is not Kernel:
        return False
    if not any(step.loop for step in kernel.steps):
        return True
    return target is not None and tiling(g, kernel, target) is None and layout(g, kernel, target, False) is None


def share_versions(p: Plan, target: "targets.Target | None" = None, known: dict | None = None) -> Plan:
    """``p`` with the copies of in-place updates dropped where their versions
    can share a buffer (the module docstring); ``p.storage`` maps each version
    written into an older one's buffer to the chain's first version.  ``target``
    tells which kernels run one thread a point (``_one_thread_a_point``) and how
    large a domain is enumerated (``Tuning.max_enumerated_points``); ``known``:
    element sets enumerated for other plans of the same graph (``_Elements``)."""
    g = p.graph
    where: dict[str, tuple[tuple[int, int], int, Step]] = {}
    for k, kernel in enumerate(p.kernels):
        for n, step in enumerate(kernel.steps):
            where[step.tasklet.name] = ((k, 0), n, step)
        for n, step in enumerate(kernel.finish.steps if kernel.finish else ()):
            where[step.tasklet.name] = ((k, 1), n, step)
    elements = _Elements(g, targets.tuning_of(target).max_enumerated_points, known)
    # asked only of a pair sharing a kernel (tiles and lanes cost a matmul and a workgroup analysis)
    one_thread_a_point = functools.cache(lambda k: _one_thread_a_point(g, p.kernels[k], target))

    def accesses(version: str, skip: str) -> list[_Access] | None:
        found = [(True, a) for a in g.writers(version)] + [(False, a) for a in g.readers(version)]
        if any(name not in where for _, (name, _) in found):
            return None
        return [_Access(write, *where[name], m) for write, (name, m) in found if name != skip]

    def whole_each_call(version: str) -> bool:
        if version in p.overwritten or version in p.fills:
            return True
        writers = g.writers(version)
        copies = [(n, m) for n, m in writers if n in where and _plain_copy(g, where[n][2])]
        rest = [(n, m) for n, m in writers if (n, m) not in copies]
        return (len(copies) == 1 and len(rest) == 1 and rest[0][1].accumulate is None and rest[0][0] in where
                and _writes_the_rest(g, where[copies[0][0]][2], where[rest[0][0]][2], rest[0][1], elements))

    root: dict[str, str] = {}  # version -> first version of its chain
    chains: dict[str, list[_Access]] = {}  # first version -> every access of the chain, by unit
    dropped: set[str] = set()
    steps = [(kernel, step) for kernel in p.kernels if type(kernel) is Kernel and kernel.finish is None
             for step in kernel.steps]
    for kernel, copy in steps:
        found = _plain_copy(g, copy)
        if found is None or any(r.producer == copy.tasklet.name for s in kernel.steps for r in s.reads):
            continue  # (a step of its kernel takes the copied value in a register)
        src, dst = found
        first = root.get(src, src)
        node = g.node(first)
        if g.containers[node.container].role == "argument" and node.version == 0:
            continue  # the caller's array
        others = [(n, m) for n, m in g.writers(dst) if n != copy.tasklet.name]
        if (len(others) != 1 or others[0][1].accumulate is not None or others[0][0] not in where
                or not _writes_the_rest(g, copy, where[others[0][0]][2], others[0][1], elements)):
            continue
        if first not in chains and not whole_each_call(first):
            continue
        old = chains.get(first) or accesses(first, skip="")
        new = accesses(dst, skip=copy.tasklet.name)
        if old is None or new is None:
            continue
        old = [a for a in old if a.step is not copy]
        start = min((a.unit for a in new), default=(len(p.kernels), 0))
        if not all(_in_order(x, y, elements, one_thread_a_point)
                   for x in old if x.unit >= start for y in new if x.write or y.write):
            continue
        chains[first] = sorted(old + new, key=lambda a: a.unit)
        root[dst] = first
        dropped.add(copy.tasklet.name)
    if not dropped:
        return p
    for kernel in p.kernels:
        kernel.steps = [s for s in kernel.steps if s.tasklet.name not in dropped]
    kernels = _join_scalar_runs([k for k in p.kernels if k.steps])
    for n, kernel in enumerate(kernels):  # numbered in dispatch order again, as generated Slang shows them
        kernel.name = re.sub(r"^k\d+_", f"k{n}_", kernel.name)
    members = set(root) | set(root.values())
    # a later version's zero fill (its writes are plain, the fill is for elements nobody writes)
    # would clear the chain's buffer: its elements come from the older versions now
    fills = {a: v for a, v in p.fills.items() if a not in root}
    return Plan(g, kernels, p.stored | members, fills, p.overwritten, storage=root)


def _scalar(kernel: Kernel) -> bool:
    """A one-thread kernel of loop-free steps (no lanes, no tiles, no finish)."""
    return (type(kernel) is Kernel and kernel.box == () and kernel.finish is None
            and not any(step.loop for step in kernel.steps))


def _join_scalar_runs(kernels: list[Kernel]) -> list[Kernel]:
    """Neighbouring one-thread kernels as one: the copies between an unrolled
    loop's one-element updates (seidel-2d's ``A[i, j] = ...``) kept them apart,
    and in one thread each step still runs after the one before it, reading
    what it stored (a launch each cost lavapipe ~50 us a call and a pipeline
    compile on the first)."""
    out: list[Kernel] = []
    for kernel in kernels:
        if out and _scalar(out[-1]) and _scalar(kernel):
            out[-1].steps.extend(kernel.steps)
        else:
            out.append(kernel)
    return out
