"""Row kernels: a reduction over a modest extent fused with its producers and consumers.

Softmax, log-sum-exp and layer norm reduce along a row and broadcast the result
back over the same row, and their reverse passes mirror the pattern.  Planned
by thread box alone (``plan._place``), every reduction and every elementwise
stage between two of them is a kernel of its own: 14 for softmax
cross-entropy forward + backward, each dispatch costing 40-60 us on lavapipe
whatever its size.  A **row kernel** gives one thread a whole row instead: the
thread box is the rows (the *outer* axes), and the kernel is a sequence of
**loop groups**, each one loop over the row (the remaining axes) running
several tasklets point by point:

* an elementwise (map) tasklet stores every point of the row; a later tasklet
  of the same group reading that point takes the value from a register;
* a reduction keeps its sum in a register and stores it once the loop ends;
  the value is then a register for every later group, as is the output of a
  one-point group (``log`` of the row sum, ``1 / sqrt(var)``);
* any other in-kernel read goes through the version's buffer: the thread
  wrote the whole part of the row the read can touch, earlier, so no other
  thread is involved and no barrier is needed.

A kernel joins a row kernel only when every in-kernel read is of that kind
(checked per memlet, ``_owned``), its writes cannot collide across rows, and
no kernel it hops over writes what it reads (the row kernel runs at the
position of its first member; the kernels hopped over include those merged
into row kernels placed after it, which do not run where they were).
``plan.check_order`` refuses any plan that still runs a reader before a writer.

Cost rule: the total work and the memory traffic are the ones of the kernels
it replaces (an intermediate crossing loop groups is stored and reloaded, as
it was between kernels, and nothing is recomputed).  On a target whose threads
run in sequence (the CPU device) a thread owns the row and loops over it: rows
won at every length tried there (layer norm 1024x1024 32 -> 20 ms), but one
thread per row gives up the parallelism along the row, which on lavapipe cost
more than the dispatches saved once rows got long (layer norm value_and_grad,
separate kernels -> thread rows: 4096x128 35 -> 16 ms, 256x1024 14 -> 28 ms).
On a target with workgroups (``lowering.workgroups``) a workgroup owns the row
instead: its threads share each loop (coalesced, every lane busy) and combine
a reduction in groupshared memory, so rows may be much longer.  The longest
row is the target's ``max_row`` (``lowering.targets``); ``MAX_ROW`` when the
plan is made for no particular target.  Matmul-shaped reductions keep their
register-tiled kernels (``lowering.matmul``).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import sympy

from symdiff.ir.graph import DataflowGraph, Memlet
from symdiff.ir.index_analysis import covers_once, extent, injective, uses_connectors

from . import targets
from .matmul import matmul_shape
from .plan_types import HostKernel, Kernel, Read, Step
from .rewrites import first_stage

# Longest row of a plan made for no particular target: a thread's (module docstring).
MAX_ROW = targets.TUNING.row_of_a_thread


@dataclass
class LoopGroup:
    """Steps sharing one loop over the row, in order; ``shape`` is the loop's
    extents without unit axes (``()``: one point per thread, no loop)."""

    shape: tuple[int, ...]
    steps: list[Step] = field(default_factory=list)

    @property
    def length(self) -> int:
        return math.prod(self.shape)


@dataclass
class RowKernel(Kernel):
    """A kernel whose thread owns one row of its (outer) box; ``steps`` lists
    every step in order, ``groups`` how they share loops."""

    groups: list[LoopGroup] = field(default_factory=list)


def reduces(step: Step) -> bool:
    """Whether a planned row step sums into registers over its loop (else it
    stores every point of it)."""
    return bool(step.loop) and all(w.memlet.accumulate is not None for w in step.writes)


def _accumulates(graph: DataflowGraph, step: Step) -> bool:
    return all(m.accumulate is not None for _, m in graph.writes(step.tasklet.name))


def _loop_shape(step: Step) -> tuple[int, ...]:
    return tuple(extent(r) for r in step.loop if extent(r) != 1)


# -- which steps run per row ----------------------------------------------------------------
def _row_step(graph: DataflowGraph, step: Step, outer: int, max_row: int) -> Step | None:
    """The step with its first ``outer`` thread axes kept and the rest run as a
    loop, or None when it cannot run per row: a reduction must reduce exactly
    its row into elements owned by the row (so rows never collide), a map must
    write plainly; no row is longer than ``max_row``."""
    t = step.tasklet
    writes = [m for _, m in graph.writes(t.name)]
    if not writes or any(uses_connectors(m.index, t) for m in writes):
        return None
    if step.loop:
        thread = [s for s, _, _ in step.parallel]
        if len(step.parallel) != outer or any(m.accumulate is None or not injective(m.index, thread)
                                              for m in writes):
            return None
        if matmul_shape(graph, t) is not None:
            return None  # register tiles over its outputs (lowering.matmul)
        row = Step(t, step.parallel, step.loop)
    else:
        if len(step.parallel) < outer or any(m.accumulate is not None for m in writes):
            return None
        row = Step(t, step.parallel[:outer], step.parallel[outer:])
    return row if math.prod(extent(r) for r in row.loop) <= max_row else None


def _outer_lengths(kernel: Kernel) -> list[int]:
    """Thread axes a kernel could keep as rows, longest first: all of a
    reducing kernel's, any non-empty prefix of a map kernel's box."""
    if any(s.loop for s in kernel.steps):
        return [len(kernel.box)] if kernel.box else []
    return list(range(len(kernel.box), 0, -1))


# -- in-kernel reads ------------------------------------------------------------------------
@functools.lru_cache(maxsize=64)
def _axes(prefix: str, n: int) -> tuple[sympy.Symbol, ...]:
    return tuple(sympy.Symbol(f"_{prefix}{k}", integer=True) for k in range(n))


def _coordinates(step: Step, axes: tuple, along: tuple | None = None) -> tuple:
    """A step's domain symbols at thread coordinates ``axes``: unit loop axes at
    their start and, given ``along``, the other loop axes at those coordinates;
    as ``(symbol, value)`` pairs."""
    return _coordinates_over(step.parallel, step.loop, axes, along)


@functools.lru_cache(maxsize=16384)
def _coordinates_over(parallel: tuple, loop: tuple, axes: tuple, along: tuple | None) -> tuple:
    """``_coordinates``, cached by ranges (every kernel trying to join a row kernel asks them of each step
    reading or written, in each trial plan; sympy builds the sums anew each time)."""
    subs = {s: b + a for (s, b, _), a in zip(parallel, axes)}
    wide = iter(along or ())
    for s, b, e in loop:
        if extent((s, b, e)) == 1:
            subs[s] = b
        elif along is not None:
            subs[s] = b + next(wide)
    return tuple(subs.items())


def _differ(w: Memlet, ws: tuple, r: Memlet, rs: tuple) -> tuple[bool, ...]:
    """Per index component, whether the written and the read element may differ
    (``ws``, ``rs``: the coordinates, ``_coordinates``, of the writer and the reader)."""
    return _differ_at(w.index, ws, r.index, rs)


@functools.lru_cache(maxsize=16384)
def _differ_at(written: tuple, ws: tuple, read: tuple, rs: tuple) -> tuple[bool, ...]:
    ws, rs = dict(ws), dict(rs)
    return tuple(sympy.expand(sympy.sympify(a).xreplace(ws) - sympy.sympify(b).xreplace(rs)) != 0
                 for a, b in zip(written, read))


def _owned(graph: DataflowGraph, producer: Step, w: Memlet, consumer: Step, r: Memlet) -> bool:
    """Whether whatever ``consumer`` reads through ``r`` at a thread was written
    through ``w`` by ``producer`` at the same thread: the producer writes every
    element of the version (a reduction does whatever its condition), and each
    index component equals the producer's at the same row or runs along the
    producer's loop alone (the thread wrote that whole axis; a component that
    also holds a row symbol, as an einsum's packed ``p0 + 6*p1``, interleaves
    the rows' elements)."""
    p, c = producer.tasklet, consumer.tasklet
    if uses_connectors(r.index, c) or (w.accumulate is None and p.condition is not sympy.true):
        return False
    point = producer.parallel + (producer.loop if w.accumulate is None else ())
    if not covers_once(w.index, point, graph.containers[w.container].shape):
        return False
    axes = _axes("t", len(producer.parallel))
    along = {s for s, _, _ in producer.loop}
    rows = {s for s, _, _ in producer.parallel}
    differ = _differ(w, _coordinates(producer, axes), r, _coordinates(consumer, axes))
    return all(not d or (sympy.sympify(a).free_symbols & along and not sympy.sympify(a).free_symbols & rows)
               for a, d in zip(w.index, differ))


def _forwarded(producer: Step, w: Memlet, consumer: Step, r: Memlet, shared_loop: bool) -> bool:
    """Whether ``r`` reads the value the producer holds in a register at this
    point: in a shared loop the element written at the same point, otherwise
    the one element a reduction or a one-point step wrote for this thread."""
    axes = _axes("t", len(producer.parallel))
    along = _axes("l", len(_loop_shape(producer))) if shared_loop else None
    return not any(_differ(w, _coordinates(producer, axes, along), r, _coordinates(consumer, axes, along)))


# -- assembling a row kernel ----------------------------------------------------------------
def _reads(graph: DataflowGraph, step: Step, written: dict, group_of: dict, groups: list[LoopGroup],
           joining: bool) -> list[Read] | None:
    """The step's reads, register-forwarded where possible; None if it reads
    its group (the last one, when ``joining``) other than at the same point."""
    reads = []
    for access, m in graph.reads(step.tasklet.name):
        read = Read(m.connector, access, m)
        if access in written:
            if len(graph.writers(access)) > 1:  # a register holds one writer's part: read the buffer
                if joining and any(group_of[p.tasklet.name] == len(groups) - 1 for p, _ in written[access]):
                    return None  # once the loop has stored it
                reads.append(read)
                continue
            ((producer, w),) = written[access]
            k = group_of[producer.tasklet.name]
            if joining and k == len(groups) - 1:
                if w.accumulate is not None or not _forwarded(producer, w, step, m, True):
                    return None
                read.producer = producer.tasklet.name
            elif (w.accumulate is not None or not groups[k].shape) and _forwarded(producer, w, step, m, False):
                read.producer = producer.tasklet.name
        reads.append(read)
    return reads


@dataclass
class _Rows:
    """A row kernel under construction over the first ``outer`` box axes of its
    members; built step by step, so a kernel trying to join costs its own
    steps only."""

    outer: int
    box: tuple[int, ...]
    max_row: int
    members: list[Kernel] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    groups: list[LoopGroup] = field(default_factory=list)
    written: dict[str, list[tuple[Step, Memlet]]] = field(default_factory=dict)  # version -> writers here
    group_of: dict[str, int] = field(default_factory=dict)  # tasklet -> its group

    def extended(self, graph: DataflowGraph, kernel: Kernel) -> "_Rows | None":
        """A copy with ``kernel``'s steps appended, or None if one cannot run per row here."""
        if kernel.box[:self.outer] != self.box:
            return None
        steps = [_row_step(graph, s, self.outer, self.max_row) for s in kernel.steps]
        if None in steps:
            return None
        new = _Rows(self.outer, self.box, self.max_row, self.members + [kernel], list(self.steps),
                    [LoopGroup(g.shape, list(g.steps)) for g in self.groups],
                    {a: list(ws) for a, ws in self.written.items()}, dict(self.group_of))
        return new if all(new._add(graph, step) for step in steps) else None

    def _add(self, graph: DataflowGraph, step: Step) -> bool:
        name = step.tasklet.name
        for access, m in graph.reads(name):
            if not all(_owned(graph, producer, w, step, m) for producer, w in self.written.get(access, ())):
                return False
        shape = _loop_shape(step)
        joining = bool(self.groups) and self.groups[-1].shape == shape
        reads = _reads(graph, step, self.written, self.group_of, self.groups, True) if joining else None
        if reads is None:
            reads = _reads(graph, step, self.written, self.group_of, self.groups, False)
            self.groups.append(LoopGroup(shape))
        step.reads = reads
        self.steps.append(step)
        self.groups[-1].steps.append(step)
        self.group_of[name] = len(self.groups) - 1
        for access, m in graph.writes(name):
            self.written.setdefault(access, []).append((step, m))
        return True


def _writes(graph: DataflowGraph, kernels: list[Kernel]) -> set[str]:
    return {a for k in kernels for s in k.steps for a, _ in graph.writes(s.tasklet.name)}


Run = tuple[int, list[_Rows]]  # a row kernel: its position in the plan, its forms (most thread axes first)


def _runs_after(out: list[Kernel], runs: list[Run], pos: int) -> list[Kernel]:
    """Every kernel that runs after position ``pos``: those placed there and
    those merged into a row kernel placed there (a run's members after its
    first are not in ``out``, yet run at the run's position)."""
    return out[pos + 1:] + [m for p, forms in runs if p > pos for m in forms[0].members[1:]]


def _join(graph: DataflowGraph, out: list[Kernel], runs: list[Run], kernel: Kernel) -> bool:
    """Merge ``kernel`` into the latest row kernel of ``runs`` that takes it
    and that it may run at the position of."""
    reads = {a for s in kernel.steps for a, _ in graph.reads(s.tasklet.name)}
    for n in range(len(runs) - 1, -1, -1):
        pos, forms = runs[n]
        if reads & _writes(graph, _runs_after(out, runs, pos)):
            return False  # it cannot run before a kernel it reads from
        extended = [f for f in (form.extended(graph, kernel) for form in forms) if f is not None]
        if extended:
            runs[n] = (pos, extended)
            return True
    return False


def fuse_rows(graph: DataflowGraph, kernels: list[Kernel], max_row: int | None = None) -> list[Kernel]:
    """Merge kernels (in dispatch order) into row kernels of at most
    ``max_row`` points a row (default ``MAX_ROW``) where the module
    docstring's rules allow.  A kernel may hop over others it reads nothing
    from; a run of merged kernels holding no reduction is left as it was
    (nothing would run per row but elementwise work, better spread over
    every point)."""
    max_row = MAX_ROW if max_row is None else max_row
    out: list[Kernel] = []
    runs: list[Run] = []
    # only a row a reduction runs over can start a row kernel (and building one costs sympy work)
    rows = {k.box for k in kernels if k.box and any(s.loop and _accumulates(graph, s) for s in k.steps)}
    # a two-stage reduction's chunk is as long as the split made it for the target's parallelism
    # (its chunks are the threads; the row limit keeps parallelism along a row): elementwise
    # passes over the same chunks (reduce_fusion.chunk_producers) share its loop
    limit = {k.box: max(max_row, math.prod(extent(r) for r in s.loop))
             for k in kernels for s in k.steps if first_stage(graph, s.tasklet)}
    for kernel in kernels:
        if isinstance(kernel, HostKernel):  # the host's BLAS runs it alone (lowering.host_products)
            out.append(kernel)
            continue
        if not _join(graph, out, runs, kernel):
            out.append(kernel)
            lengths = [n for n in _outer_lengths(kernel) if kernel.box[:n] in rows]
            forms = [_Rows(n, kernel.box[:n], limit.get(kernel.box[:n], max_row)).extended(graph, kernel)
                     for n in lengths]
            if any(forms):
                runs.append((len(out) - 1, [f for f in forms if f is not None]))
    for pos, (rows, *_) in reversed(runs):
        if len(rows.members) > 1 and any(s.loop and _accumulates(graph, s) for s in rows.steps):
            out[pos] = RowKernel(out[pos].name, rows.box, rows.steps, groups=rows.groups)
        else:
            out[pos:pos + 1] = rows.members
    if len(out) == len(kernels):
        return kernels
    for n, kernel in enumerate(out):
        kernel.name = f"k{n}_{kernel.steps[0].tasklet.name}" + ("_rows" if isinstance(kernel, RowKernel) else "")
    return out
