"""Kernel planning: which tasklets share a compute kernel, and how each write lands.

Planning works on a *concrete* graph (sizes bound, ``rewrites.bind``) so extents,
strides and fusion decisions are plain integers.  This module is the pipeline:
``PASSES`` lists the rewrites and passes of the sibling modules in order
(run by ``lowering.pipeline``), with placing tasklets in kernels and deciding
each write's mode, this module's own; ``ALTERNATIVES`` lists its trials.  The
records it builds are ``lowering.plan_types``'.  The rules:

* A tasklet's **parallel symbols** are the domain symbols its write indices
  use; the others are **reduced** symbols, run as a loop inside the thread
  (an accumulating write then happens once per thread, from a register).
  A reduction too large for one thread while there are few parallel points is
  first rewritten into two tasklets (``rewrites.split_large_reductions``): partial
  results per chunk, then a reduction over the chunks.
* The kernel's thread box is the parallel extents.  A tasklet joins an
  existing kernel with the same box when every version it reads is either
  finished by an earlier kernel or produced in that kernel by a single plain
  (or sole accumulating) writer at the same thread point: the value is then
  passed in a register and the version needs no buffer unless read elsewhere.
* A write is **exclusive** when its index is injective over the thread points
  and no other tasklet of the kernel writes that version: accumulation is then
  a read-modify-write (or a plain store when the writer alone covers the whole
  version).  Otherwise threads collide and the write is atomic.
"""
from __future__ import annotations

import math

import sympy

from symdiff.ir.graph import ACCUMULATION_IDENTITY, DataflowGraph, Memlet, Tasklet
from symdiff.ir.index_analysis import covers_once, extent, one_each, uses_connectors

from . import targets
from .cost_model import CostModel, recomputed
from .in_place import share_versions
from .last_workgroup import finish_in_last_workgroup
from .matmul import matmul_shape
from .pipeline import Alternative, Choice, Pass, Pipeline, Planning, Problem, evaluate
from .host_products import host_product
from .plan_types import HostKernel, Kernel, LoweringError, Plan, Read, Step, Write, parallel_symbols, same_point
from .reduce_fusion import chunk_producers, fold_producers
from .remembered import remembering
from .rematerialise import (cheap_on_gpu, expansions_in, free_buffered, merge_duplicates, recompute_cheap,
                            recompute_expansions, rematerialise, split_free_copies)
from .rewrites import bind, drop_empty_tasklets, split_large_reductions, split_multi_output_tasklets
from .rowfusion import RowKernel, fuse_rows
from .sibling_reductions import merge_sibling_reductions


def _forwardable(graph: DataflowGraph, access: str, kernel: Kernel, consumer: Step, r: Memlet) -> str | None:
    writers = graph.writers(access)
    if len(writers) != 1:
        return None
    name, w = writers[0]
    step = next((s for s in kernel.steps if s.tasklet.name == name), None)
    if step is None or step.tasklet.condition is not sympy.true or uses_connectors(w.index, step.tasklet):
        return None
    if not covers_once(w.index, step.parallel, graph.containers[w.container].shape):
        return None
    return name if same_point(step, w, consumer, r) else None


def _distinct_elements(a: Memlet, b: Memlet) -> bool:
    """Whether two writes of one version provably touch different elements:
    both at constant indices, and not the same (the per-tap sums of a
    convolution's kernel gradient, ``dk[0]``, ``dk[1]``, ...)."""
    constant = all(sympy.sympify(e).is_Integer for e in a.index + b.index)
    return constant and tuple(map(int, a.index)) != tuple(map(int, b.index))


def _shares_written_elements(graph: DataflowGraph, t: Tasklet, other: Tasklet) -> bool:
    """Whether ``t`` and ``other`` may write one element of a version."""
    theirs = graph.writes(other.name)
    return any(a == b and not _distinct_elements(m, w) for a, m in graph.writes(t.name) for b, w in theirs)


def _tiled(graph: DataflowGraph, t: Tasklet, box: tuple[int, ...], target: "targets.Target | None") -> bool:
    """Whether ``t`` gets register tiles of its own (``lowering.matmul``) in a kernel over ``box``."""
    return math.prod(box) >= targets.tuning_of(target).min_tiled_outputs and matmul_shape(graph, t) is not None


def _place(graph: DataflowGraph, kernels: list[Kernel], kernel_of: dict[str, int], t: Tasklet,
           target: "targets.Target | None", written: list[dict[str, list[Memlet]]]) -> None:
    """Put ``t`` in the first kernel it may join (same box, what it reads finished
    before or passed at its thread point), else in a kernel of its own; a product
    the host runs (``host_products``) is a kernel of its own that nothing joins.
    ``written``: per kernel, the memlets its steps write each version through (kept up to date here)."""
    par = parallel_symbols(graph, t)
    parallel = tuple(rng for rng in t.domain if rng[0] in par)
    loop = tuple(rng for rng in t.domain if rng[0] not in par)
    box = tuple(extent(rng) for rng in parallel)
    tiled = _tiled(graph, t, box, target)
    reads, writes = graph.reads(t.name), graph.writes(t.name)
    writers_of = {access: [w for w, _ in graph.writers(access)] for access, _ in reads}
    # A kernel before one writing a version ``t`` reads can neither have that version finished
    # nor pass it in a register: the search starts there (all kernels each time was quadratic).
    first = max((kernel_of[w] for ws in writers_of.values() for w in ws), default=0)
    product = host_product(graph, t, target)
    for k in range(first, len(kernels)) if product is None else ():  # a host product joins no kernel
        kernel = kernels[k]
        if kernel.box != box or isinstance(kernel, HostKernel):
            continue
        step = Step(t, parallel, loop)
        ok = True
        for access, m in reads:
            writers = writers_of[access]
            if all(kernel_of[w] < k for w in writers):
                step.reads.append(Read(m.connector, access, m))
                continue
            producer = _forwardable(graph, access, kernel, step, m)
            if producer is None:
                ok = False
                break
            step.reads.append(Read(m.connector, access, m, producer))
        # a second accumulating writer of a version would collide with the first; a second
        # matmul would run one output per thread behind the first's register tiles (lowering.matmul)
        if ok and not (any(not _distinct_elements(m, w) for a, m in writes for w in written[k].get(a, ()))
                       or tiled and any(_tiled(graph, s.tasklet, box, target) for s in kernel.steps)):
            kernel.steps.append(step)
            kernel_of[t.name] = k
            for a, m in writes:
                written[k].setdefault(a, []).append(m)
            return
    step = Step(t, parallel, loop, [Read(m.connector, a, m) for a, m in reads])
    name = f"k{len(kernels)}_{t.name}"
    kernels.append(Kernel(name, box, [step]) if product is None else HostKernel(name, box, [step], product=product))
    kernel_of[t.name] = len(kernels) - 1
    written.append({})
    for a, m in writes:
        written[-1].setdefault(a, []).append(m)


def sink_one_point_kernels(graph: DataflowGraph, kernels: list[Kernel]) -> list[Kernel]:
    """Merge each one-point kernel (no thread axes) into the next one-point
    kernel when no kernel between them reads what it writes, and the later
    kernel reads its values at the one point (passed in registers) or not at
    all.  ``placement_order`` places a reverse pass's seed steps (``d out = g``)
    first, so that the large kernels reading them can take them from buffers;
    they then made a kernel of their own, one dispatch and one launch of a
    GPU's one-thread tail (softplus + logsumexp, the MLP): merged into the
    program's next one-point kernel (a reduction's second stage), they cost
    nothing.  Kernels in dispatch order; returns the new list."""
    out = list(kernels)
    k = 0
    while k < len(out):
        if out[k].box == ():
            merged = _merge_forward(graph, out, k)
            if merged is not None:
                out[merged].steps[:0] = out[k].steps
                del out[k]
                continue
        k += 1
    return out


def _merge_forward(graph: DataflowGraph, kernels: list[Kernel], k: int) -> int | None:
    """The position of the next one-point kernel ``kernels[k]``'s steps can run
    at the start of (``sink_one_point_kernels``), after rewiring its reads of
    them to registers; None if there is none."""
    early = kernels[k]
    written = {a for s in early.steps for a, _ in graph.writes(s.tasklet.name)}
    for n in range(k + 1, len(kernels)):
        later = kernels[n]
        if later.box == ():
            if any(_shares_written_elements(graph, s.tasklet, e.tasklet) for s in later.steps for e in early.steps):
                return None
            staged = Kernel(later.name, (), early.steps + later.steps)
            rewired = []
            for step in later.steps:
                for r in step.reads:
                    if r.access in written:
                        producer = _forwardable(graph, r.access, staged, step, r.memlet)
                        if producer is None:
                            return None
                        rewired.append((r, producer))
            for r, producer in rewired:
                r.producer = producer
            return n
        if any(a in written for s in later.steps for a, _ in graph.reads(s.tasklet.name)):
            return None
    return None


def placement_order(graph: DataflowGraph) -> list[str]:
    """Tasklets in a dependency order that, among those ready, takes one-point
    tasklets (no thread axes) first, then the graph's order.  A reverse pass's
    seeds (the gradient of a mean: one point) depend on nothing big, but come
    after the forward pass in the graph; placed after a large elementwise
    kernel, the backward steps reading them could not join that kernel
    (``_place``: they would read a version written by a later kernel), and the
    large pass over the data ran twice (softplus + logsumexp on 64M elements)."""
    def key(n: str) -> int:
        node = graph.node(n)
        if not isinstance(node, Tasklet):
            return 0
        par = parallel_symbols(graph, node)
        return 0 if all(r[0] not in par for r in node.domain) else 1
    return [n for n in graph.topological_order(key) if isinstance(graph.node(n), Tasklet)]


def check_order(graph: DataflowGraph, kernels: list[Kernel]) -> None:
    """Refuse a kernel order in which a tasklet runs before a writer of a version
    it reads: every writer must be in an earlier kernel, or earlier in the same
    one.  Fusion moves tasklets between kernels (``_place``, ``fuse_rows``); a
    slip there would read a buffer before it is written, silently."""
    position = {s.tasklet.name: (k, n) for k, kernel in enumerate(kernels) for n, s in enumerate(kernel.all_steps)}
    for kernel in kernels:
        for step in kernel.all_steps:
            reader = position[step.tasklet.name]
            for access, _ in graph.reads(step.tasklet.name):
                late = [w for w, _ in graph.writers(access) if position[w] >= reader]
                if late:
                    raise LoweringError(f"kernel plan out of order: {step.tasklet.name} (kernel "
                                        f"{kernel.name}) reads {access} before {late[0]} writes it")


def plan(graph: DataflowGraph, sizes: dict[str, int], target: "str | targets.Target | None" = None) -> Plan:
    """Bind sizes, split multi-output tasklets, recompute the producers a memory budget named
    (``cost_model.recomputed``) where they are read (``lowering.rematerialise``), fold elementwise producers into
    reductions, split long reductions, run the elementwise passes feeding a first stage over its
    chunks (``reduce_fusion.chunk_producers``), group tasklets into kernels and decide buffers,
    fills and write modes: the passes of ``PASSES``, in order.  ``target`` (a ``lowering.targets`` name or
    ``Target``) sets which producers are recomputed, how long reductions are split and how long a row kernel's
    rows may be; without one the plan suits every target.

    The trials are ``ALTERNATIVES``, each planned by the passes after the first that reads what it changes
    (``pipeline.Pipeline``: those before it ran once, for every trial).  A value whose
    recomputation reads nothing more (``rematerialise.free_candidates``: a copy, a scale, ``g / n`` of a
    scalar) but that the plan passes to another kernel in a buffer is then recomputed where it is read, and
    the program planned once more: its buffer and its write go for a few flops (in up to
    ``Tuning.free_recompute_rounds`` more plans), and so are the free values it is computed from
    (``rematerialise.free_buffered``).  Other values passed in registers inside a kernel stay as they are.
    On targets that do not recompute cheap values anyway, those are then tried recomputed
    (``rematerialise.cheap_on_gpu``).  Values made only of elements broadcast along them are recomputed
    where they are read (``rematerialise.recompute_expansions``): from the first plan where that reads
    nothing more (a seed's broadcast: ``first_choice``), else (n-body's pair values) tried as a whole
    other plan with its own rounds and trial (``WHOLE_PLAN_ALTERNATIVES``).  Each trial but the free rounds
    is kept where the plan stores fewer elements in no more kernels (``CostModel.stores_less``).  Every
    choice asks the target's cost model (``lowering.cost_model``)."""
    target = None if target is None else targets.of(target)
    problem = Problem(graph, sizes, target, CostModel.of(target))
    runs = Pipeline(PASSES, problem)
    with remembering():  # its trials ask the same questions of the tasklets they share (lowering.remembered)
        return evaluate(WHOLE_PLAN_ALTERNATIVES, problem, first_choice(problem),
                        lambda choice: evaluate(ALTERNATIVES, problem, choice, runs.run))


def _more_free_values(problem: Problem, p: Plan, choice: Choice) -> Choice | None:
    """``choice`` with the free values ``p`` still buffers recomputed (a recomputed value's own inputs may now
    be buffered: hence rounds); None when there are none."""
    buffered = tuple(n for n in free_buffered(p, problem.model) if n not in choice.recompute)
    return Choice(choice.recompute + buffered, choice.expand) if buffered else None


def _cheap_values(problem: Problem, p: Plan, choice: Choice) -> Choice | None:
    """lavapipe: ``choice`` with the values a GPU recomputes where read (``rematerialise.cheap_on_gpu``) also
    recomputed, on targets with a trial (``CostModel.trial_ops``); None when there are none.
    (bench.gpu --scale 64: softmax_xent's 8 kernels became 10 and ran 15% slower; those with fewer kernels
    ran as fast or faster.)  On the CPU device only arithmetic ones: its reduction loop recomputing tanh ran
    185 -> 352 ms at 20M elements, softplus + logsumexp recomputing exp 7.5 -> 19.9 ms at 1M; layer norm
    recomputing x - m and its quotient stores 16 MiB instead of 32 at 1Kx1K), and only where a value has
    Tuning.trial_min_elements (CostModel.trial_pays)."""
    if problem.model.trial_ops is None:
        return None
    extra = tuple(n for n in cheap_on_gpu(p, problem.model) if n not in choice.recompute)
    return Choice(choice.recompute + extra, choice.expand) if extra else None


def _expansions(problem: Problem, p: Plan, choice: Choice) -> Choice | None:
    """``choice`` with every value expanding its inputs recomputed (``rematerialise.recompute_expansions``)
    where the graph has one that ``choice`` does not recompute already (n-body's pair values; a seed's
    broadcast too where ``first_choice`` leaves it: CUDA).  Recomputed where a kernel passed it in a register
    anyway, gesummv's outer product g[i] * x[j] was computed once per gradient and ran 7-10% slower on
    lavapipe.  Its trial is a whole plan, rounds included."""
    left = False if choice.expand == "free" else None  # free: those reading nothing more are recomputed
    if not expansions_in(problem.graph, problem.sizes, problem.model, free=left):
        return None
    return Choice(choice.recompute, expand="all")


def first_choice(problem: Problem) -> Choice:
    """The choice a plan starts from: what the traced graph names recomputed (a memory budget's choice,
    ``cost_model.recomputed``), and the values expanding their inputs whose recomputation reads nothing
    more (a seed's broadcast: ``g / n`` over a matrix) recomputed where read.  This was the expansions
    trial's, which also recomputed the others where there were any: recomputing a seed's broadcast first
    changes which values the rounds recompute.  On the CPU device that trial stored less for attention,
    attention_einsum, ffn_block and layer_norm at both bench sizes and mlp_softmax_xent at the large one
    (softmax_xent 23 MiB instead of 27 at 1Kx1000), and exactly as much in as many kernels for elman_rnn,
    jacobi_2d, mlp_tanh and embedding_bag, never more; as a trial it cost elman_rnn's large plan three of
    its six pipeline runs (0.14 of 0.36 s).  Over 550 fuzzed programs' plans (the CPU device and lavapipe),
    starting from it stored less in 9 (by up to 30%) and more in 2 (by 5%), in as many kernels.  Not where
    the target recomputes calls (``CostModel.recompute_calls``: CUDA), whose cheap values' recomputation
    left a seed's one-point copy a kernel of its own (softplus + logsumexp: 4 kernels instead of 3): there
    the trial decides."""
    free = not problem.model.recompute_calls and expansions_in(problem.graph, problem.sizes, problem.model, free=True)
    return Choice(tuple(recomputed(problem.graph)), expand="free" if free else "none")


def _kept(model: CostModel, trial: Plan, current: Plan) -> bool:
    """A free value's round is always kept: its buffer and write go for a few flops."""
    return True


def _stores_less(model: CostModel, trial: Plan, current: Plan) -> bool:
    """The trial wins where it stores fewer elements in no more kernels (``CostModel.stores_less``)."""
    return model.stores_less(trial, current)


# Tried in this order on each whole plan's first pipeline run, each from the plan kept so far.
ALTERNATIVES: tuple[Alternative, ...] = (
    Alternative("free values recomputed", "recompute", _more_free_values, _kept,
                rounds=lambda model: model.tuning.free_recompute_rounds),
    Alternative("cheap values recomputed", "recompute", _cheap_values, _stores_less),
)
# Tried against the plan from the traced graph's recompute list, each with ``ALTERNATIVES`` of its own.
WHOLE_PLAN_ALTERNATIVES: tuple[Alternative, ...] = (
    Alternative("expansions recomputed", "expand", _expansions, _stores_less),
)


def _bind(planning: Planning) -> None:
    planning.graph = bind(planning.graph, planning.problem.sizes)


def _drop_empty_tasklets(planning: Planning) -> None:
    planning.empty_fills = drop_empty_tasklets(planning.graph)


def _placement(planning: Planning) -> None:
    """Each tasklet in placement order into the first kernel it may join (``_place``)."""
    g, kernel_of, written = planning.graph, {}, [{} for _ in planning.kernels]
    for name in placement_order(g):
        _place(g, planning.kernels, kernel_of, g.node(name), planning.problem.target, written)


def _sink_one_point_kernels(planning: Planning) -> None:
    planning.kernels = sink_one_point_kernels(planning.graph, planning.kernels)


def _fuse_rows(planning: Planning) -> None:
    target = planning.problem.target
    planning.kernels = fuse_rows(planning.graph, planning.kernels, None if target is None else target.max_row)


def _finishes_in_last_workgroup(planning: Planning) -> bool:
    target = planning.problem.target
    return target is not None and target.single_pass_reductions and target.workgroup_reductions


def _finish_in_last_workgroup(planning: Planning) -> None:
    planning.kernels = finish_in_last_workgroup(planning.graph, planning.kernels, planning.problem.target)


def _share_versions(planning: Planning) -> None:
    planning.plan = share_versions(planning.plan, planning.problem.target, planning.problem.elements)


def _write_modes(planning: Planning) -> None:
    """Buffers, fills and each write's mode (this module's docstring): the ``Plan``."""
    g, kernels, empty_fills = planning.graph, planning.kernels, planning.empty_fills
    # a finish runs in its kernel's dispatch, but its steps share nothing else with the kernel's
    planned = kernels + [k.finish for k in kernels if k.finish]
    buffer_reads = {r.access for k in planned for s in k.steps for r in s.reads if r.producer is None}
    latest_results = {g.latest(c) for c in g.results}
    counters = {k.counter: 0.0 for k in kernels if k.counter}
    stored: set[str] = set(buffer_reads | latest_results | set(counters))
    fills: dict[str, float] = {a: v for a, v in empty_fills.items() if a in stored} | counters
    overwritten: set[str] = set()
    for kernel in planned:
        for step in kernel.steps:
            t = step.tasklet
            for access, m in g.writes(t.name):
                # a plain write is one point's, also where a row kernel loops over points in a thread
                points = step.parallel + (step.loop if m.accumulate is None else ())
                writers = g.writers(access)
                # (a row kernel's steps run in turn in the thread owning the row, so another
                # step's write keeps the element this thread's own only at the same point:
                # at a shifted index it is a neighbouring thread's element, issue 18)
                others = [s for s in kernel.steps if s is not step
                          and any(a == access and not (isinstance(kernel, RowKernel) and same_point(step, m, s, w))
                                  and not _distinct_elements(m, w) for a, w in g.writes(s.tasklet.name))]
                # a second write of this tasklet at another index collides with other threads' writes
                shifted = any(a == access and w.index != m.index for a, w in g.writes(t.name))
                shape = g.containers[m.container].shape
                exclusive = (not uses_connectors(m.index, t) and one_each(m.index, points, shape)
                             and not others and not shifted)
                sole = (len(writers) == 1 and exclusive and t.condition is sympy.true
                        and covers_once(m.index, points, shape))
                if sole:
                    overwritten.add(access)
                if m.accumulate is None or sole:
                    mode = "store"
                else:
                    mode = "combine" if exclusive else "atomic"
                step.writes.append(Write(access, m, mode))
                if not sole and access in stored:
                    fills[access] = ACCUMULATION_IDENTITY[m.accumulate]
    planning.plan = Plan(g, kernels, stored, fills, overwritten)


# The pipeline, in order: graph rewrites, then kernels and their writes (docs/design.md lists it).
PASSES: tuple[Pass, ...] = (
    Pass("bind", _bind),
    Pass("drop_empty_tasklets", _drop_empty_tasklets),
    Pass("split_multi_output_tasklets", lambda c: split_multi_output_tasklets(c.graph)),
    Pass("merge_duplicates", lambda c: merge_duplicates(c.graph)),
    Pass("split_free_copies", lambda c: split_free_copies(c.graph, c.problem.model)),
    Pass("rematerialise", lambda c: rematerialise(c.graph, list(c.choice.recompute), c.problem.model),
         reads=("recompute",)),
    Pass("recompute_expansions",
         lambda c: recompute_expansions(c.graph, c.problem.model, free_only=c.choice.expand == "free"),
         when=lambda c: c.choice.expand != "none", reads=("expand",)),
    Pass("recompute_cheap", lambda c: recompute_cheap(c.graph, c.problem.model),
         when=lambda c: c.problem.model.recompute_calls),
    Pass("fold_producers", lambda c: fold_producers(c.graph, c.problem.target)),
    Pass("merge_sibling_reductions", lambda c: merge_sibling_reductions(c.graph, c.problem.target)),
    Pass("split_large_reductions", lambda c: split_large_reductions(c.graph, c.problem.target)),
    Pass("chunk_producers", lambda c: chunk_producers(c.graph)),
    Pass("placement", _placement),
    Pass("sink_one_point_kernels", _sink_one_point_kernels),
    Pass("fuse_rows", _fuse_rows),
    Pass("finish_in_last_workgroup", _finish_in_last_workgroup, when=_finishes_in_last_workgroup),
    Pass("check_order", lambda c: check_order(c.graph, c.kernels)),
    Pass("write_modes", _write_modes),
    Pass("share_versions", _share_versions),
)
