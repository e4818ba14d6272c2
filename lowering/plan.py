"""Kernel planning: which tasklets share a compute kernel, and how each write lands.

Planning works on a *concrete* graph (sizes bound, see ``bind``) so extents,
strides and fusion decisions are plain integers.  The rules:

* A tasklet's **parallel symbols** are the domain symbols its write indices
  use; the others are **reduced** symbols, run as a loop inside the thread
  (an accumulating write then happens once per thread, from a register).
  A reduction too large for one thread while there are few parallel points is
  first rewritten into two tasklets (``split_large_reductions``): partial
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
from dataclasses import dataclass, field

import networkx as nx
import sympy

from symdiff.ir.graph import ACCUMULATION_IDENTITY, DataflowGraph, Memlet, Tasklet, connector_symbol
from symdiff.ir.index_analysis import covers, holds_on_ranges, injective, injective_over, replaced
from symdiff.ir.sizes import substitute_sizes

from . import targets
from .matmul import MIN_TILED_OUTPUTS, matmul_shape

# A reduction longer than this, with fewer parallel points than
# SPLIT_PARALLEL_LIMIT, is split in two stages: one thread summing millions of
# elements would leave every other core (or GPU lane) idle.
SPLIT_REDUCTION_MIN = 4096
SPLIT_PARALLEL_LIMIT = 4096
SPLIT_TARGET_THREADS = 8192
SPLIT_MIN_CHUNK = 256
# Where workgroups share each chunk's loop (lowering.workgroups), about as many
# workgroups as a large GPU holds at once (an H100: 132 SMs x 8 of 256 threads):
# 1024 chunks of a single sum, each a workgroup's; 32768 points (chunks x
# outputs) of a reduction with many outputs, 32 a workgroup; and chunks long
# enough to give every lane 16 elements or more.
SPLIT_TARGET_WORKGROUPS = 1024
SPLIT_TARGET_WORKGROUP_POINTS = 32768
SPLIT_MIN_WORKGROUP_CHUNK = 4096


class LoweringError(RuntimeError):
    """A graph this lowering cannot run (the message says why)."""


def bind(graph: DataflowGraph, sizes: dict[str, int]) -> DataflowGraph:
    """A copy of ``graph`` with every size symbol replaced by its value.  Each
    tasklet's ``meta["origin"]`` is its name here, kept by every later rewrite
    (splits rename tasklets), so a plan can be traced back to the graph."""
    g = DataflowGraph(graph.name)
    g.meta = dict(graph.meta)
    for c in graph.containers.values():
        g.add_container(c.name, c.concrete_shape(sizes), c.dtype, c.role, **c.meta)
    for node_id, data in graph.nx.nodes(data=True):
        node = data["node"]
        if isinstance(node, Tasklet):
            node = Tasklet(node.name, tuple((s, substitute_sizes(b, sizes), substitute_sizes(e, sizes))
                                            for s, b, e in node.domain),
                           {k: substitute_sizes(v, sizes) for k, v in node.body.items()}, dict(node.inputs),
                           substitute_sizes(node.condition, sizes), node.source, node.backward,
                           {**node.meta, "origin": node.name})
        g.nx.add_node(node_id, node=node)
    for u, v, data in graph.nx.edges(data=True):
        m = data["memlet"]
        g.nx.add_edge(u, v, memlet=Memlet(m.container, tuple(substitute_sizes(i, sizes) for i in m.index),
                                          m.connector, m.accumulate))
    return g


# -- index analysis ------------------------------------------------------------------
def extent(rng) -> int:
    return max(0, int(rng[2]) - int(rng[1]))


def one_each(index, points, shape) -> bool:
    """Distinct points of ``points`` (``(symbol, begin, end)`` ranges) write
    distinct elements of a container of ``shape``: unit shifts
    (``index_analysis.injective``), or an index affine in several symbols
    (an elementwise pass run over a first stage's chunks, ``c * L + r``:
    ``reduce_fusion.chunk_producers``) proved by ``injective_over``."""
    symbols = [s for s, _, _ in points]
    return injective(index, symbols) or (_several(index, symbols) and injective_over(index, points, shape))


def covers_once(index, points, shape) -> bool:
    """Every element of a container of ``shape`` is written exactly once by
    ``points``, each using every symbol: ``index_analysis.injective`` and
    ``covers``, or for an index affine in several symbols (``one_each``),
    distinct elements within bounds, as many as the points."""
    symbols = [s for s, _, _ in points]
    if injective(index, symbols) and covers(index, points, shape):
        return True
    ranges = {s: (b, e) for s, b, e in points}
    return (_several(index, symbols) and len(index) == len(shape)
            and math.prod(extent(r) for r in points) == math.prod(int(n) for n in shape)
            and injective_over(index, points, shape)
            and all(holds_on_ranges(sympy.Le(0, e), ranges) and holds_on_ranges(sympy.Lt(e, n), ranges)
                    for e, n in zip(index, shape)))


def _several(index, symbols) -> bool:
    """Some component uses more than one of ``symbols``."""
    return any(len(sympy.sympify(e).free_symbols & set(symbols)) > 1 for e in index)


def uses_connectors(index, tasklet: Tasklet) -> bool:
    """Whether an index depends on values read by the tasklet (gather/scatter)."""
    conns = set(tasklet.inputs.values())
    return any(sympy.sympify(e).free_symbols & conns for e in index)


def parallel_symbols(graph: DataflowGraph, tasklet: Tasklet) -> tuple[sympy.Symbol, ...]:
    """Domain symbols the writes depend on, in domain order; all of them for a
    scatter (its target is only known per point)."""
    writes = graph.writes(tasklet.name)
    if any(uses_connectors(m.index, tasklet) for _, m in writes):
        return tasklet.index_symbols
    used = set().union(*[sympy.sympify(e).free_symbols for _, m in writes for e in m.index]) if writes else set()
    if writes and all(m.accumulate is None for _, m in writes):
        return tasklet.index_symbols  # plain writes: every point is its own thread
    return tuple(s for s in tasklet.index_symbols if s in used)


# -- multi-output tasklets --------------------------------------------------------------
def split_multi_output_tasklets(graph: DataflowGraph) -> None:
    """Give each write its own tasklet when the writes index different domain
    symbols (the backward of a matmul writes ``da[i, k]`` and ``db[k, j]`` from
    one ``(i, j, k)`` body): together they would need a thread per point and
    atomics; apart each is a reduction looping inside its thread."""
    for t in list(graph.tasklets()):
        writes = graph.writes(t.name)
        used = {frozenset(s for s in t.index_symbols if any(s in sympy.sympify(e).free_symbols for e in m.index))
                for _, m in writes}
        if len(writes) < 2 or len(used) < 2 or any(uses_connectors(m.index, t) for _, m in writes):
            continue
        split_tasklet(graph, t)


def split_tasklet(graph: DataflowGraph, t: Tasklet) -> list[str]:
    """Replace tasklet ``t`` by one tasklet per write, ``<name>_<connector>``,
    each reading only what its output needs (and keeping ``t``'s meta, so
    its ``origin``); returns their names."""
    reads, writes = graph.reads(t.name), graph.writes(t.name)
    graph.remove_tasklet(t.name)
    names = []
    for access, m in writes:
        needed = sympy.sympify(t.body[m.connector]).free_symbols
        for _ in reads:  # a gathered read needs the connectors in its index
            needed |= {s for a, r in reads if t.inputs[r.connector] in needed for e in r.index
                       for s in sympy.sympify(e).free_symbols}
        names.append(f"{t.name}_{m.connector}")
        graph.add_tasklet(names[-1], t.domain, {m.connector: t.body[m.connector]},
                          {r.connector: (a, r.index) for a, r in reads if t.inputs[r.connector] in needed},
                          {m.connector: (access, m.index, m.accumulate)}, condition=t.condition,
                          source=t.source, backward=t.backward, **t.meta)
    return names


# -- two-stage reductions ------------------------------------------------------------
def split_large_reductions(graph: DataflowGraph, target: "targets.Target | None" = None) -> None:
    """Rewrite long reductions with few outputs into partial sums per chunk
    (many threads, or on a ``target`` with workgroups many workgroups)
    followed by a short reduction over the chunks."""
    workgroups = target is not None and target.workgroup_reductions
    for t in list(graph.tasklets()):
        writes = graph.writes(t.name)
        if not writes or any(m.accumulate is None or uses_connectors(m.index, t) for _, m in writes):
            continue
        par = parallel_symbols(graph, t)
        if not all(injective(m.index, par) for _, m in writes):
            continue
        par_ranges = [r for r in t.domain if r[0] in par]
        red_ranges = [r for r in t.domain if r[0] not in par]
        points = math.prod(extent(r) for r in par_ranges)
        length = math.prod(extent(r) for r in red_ranges)
        if not red_ranges or length < SPLIT_REDUCTION_MIN or points >= SPLIT_PARALLEL_LIMIT:
            continue
        if points >= MIN_TILED_OUTPUTS and matmul_shape(graph, t) is not None:
            continue  # register tiles over its outputs beat partial sums (lowering.matmul)
        if workgroups:
            most = SPLIT_TARGET_WORKGROUPS if points == 1 else SPLIT_TARGET_WORKGROUP_POINTS
            least = SPLIT_MIN_WORKGROUP_CHUNK
        else:
            most, least = SPLIT_TARGET_THREADS, SPLIT_MIN_CHUNK
        chunks = max(2, min(most // max(points, 1), length // least))
        chunk_len = -(-length // chunks)
        # a chunk length dividing the reduction (fewer, longer chunks) needs no bound check per element
        chunk_len = next((n for n in range(chunk_len, 2 * chunk_len) if length % n == 0), chunk_len)
        chunks = -(-length // chunk_len)
        _split(graph, t, par_ranges, red_ranges, chunks, chunk_len, length)


def _split(graph: DataflowGraph, t: Tasklet, par_ranges, red_ranges, chunks: int, chunk_len: int,
           length: int) -> None:
    c, r = sympy.Symbol(f"{t.name}_chunk", integer=True), sympy.Symbol(f"{t.name}_r", integer=True)
    flat = c * chunk_len + r
    subs, stride = {}, length
    for s, b, e in red_ranges:
        stride //= extent((s, b, e))
        digit = sympy.floor(flat / stride)
        # the outermost digit is in range wherever the bound below holds: no modulo per element
        subs[s] = b + (digit if s == red_ranges[0][0] else sympy.Mod(digit, extent((s, b, e))))
    par_index = tuple(s - b for s, b, _ in par_ranges)
    par_shape = tuple(extent(rng) for rng in par_ranges)
    reads, writes_1, stage_2 = {}, {}, []
    for access, m in graph.reads(t.name):
        reads[m.connector] = (access, tuple(sympy.sympify(i).xreplace(subs) for i in m.index))
    for access, m in graph.writes(t.name):
        dtype = graph.containers[m.container].dtype
        partial = graph.unique_name(f"{t.name}_{m.connector}_partial")
        # chunk-major: neighbouring outputs of one chunk are neighbouring points and elements
        # (a column sum's columns stay contiguous for workgroups across points, lowering.workgroups)
        graph.add_container(partial, (chunks,) + par_shape, dtype, "transient", two_stage=True)
        writes_1[m.connector] = (graph.access(partial, 0), (c,) + par_index, m.accumulate)
        stage_2.append((access, m, partial))
    bound = sympy.StrictLessThan(flat, length) if chunks * chunk_len != length else sympy.true
    cond = sympy.And(t.condition.xreplace(subs), bound)
    graph.remove_tasklet(t.name)
    graph.add_tasklet(f"{t.name}_stage1", ((c, 0, chunks),) + tuple(par_ranges) + ((r, 0, chunk_len),),
                      {k: v.xreplace(subs) for k, v in t.body.items()}, reads, writes_1, condition=cond,
                      source=t.source, backward=t.backward, origin=t.meta["origin"],
                      folded=t.meta.get("folded", ()), siblings=t.meta.get("siblings", ()))
    for access, m, partial in stage_2:
        v = connector_symbol("v", graph.containers[partial].dtype)
        graph.add_tasklet(f"{t.name}_stage2", tuple(par_ranges) + ((c, 0, chunks),), {m.connector: v},
                          {"v": (graph.access(partial, 0), (c,) + par_index)},
                          {m.connector: (access, m.index, m.accumulate)}, source=t.source,
                          backward=t.backward, origin=t.meta["origin"])


def first_stage(graph: DataflowGraph, t: Tasklet) -> bool:
    """Whether ``t`` is a first stage ``split_large_reductions`` made, over whole
    chunks (no bound on the last one): its domain is (chunk, outputs..., row)."""
    writes = graph.writes(t.name)
    return bool(writes) and t.condition is sympy.true and all(
        m.accumulate is not None and graph.containers[m.container].meta.get("two_stage") for _, m in writes)


# -- the plan --------------------------------------------------------------------------
@dataclass
class Read:
    connector: str
    access: str
    memlet: Memlet
    producer: str | None = None  # tasklet passing the value in a register, or None: buffer


@dataclass
class Write:
    access: str
    memlet: Memlet
    mode: str  # "store" | "combine" (exclusive read-modify-write) | "atomic"


@dataclass
class Step:
    """One tasklet inside a kernel: thread symbols, loop symbols, reads, writes."""

    tasklet: Tasklet
    parallel: tuple  # domain ranges bound to the kernel's thread axes, in order
    loop: tuple  # domain ranges run as a loop inside the thread
    reads: list[Read] = field(default_factory=list)
    writes: list[Write] = field(default_factory=list)


@dataclass
class Kernel:
    name: str
    box: tuple[int, ...]
    steps: list[Step] = field(default_factory=list)
    # a one-point kernel the last workgroup to finish runs after the others, in the same
    # dispatch, and the access node of the counter the workgroups count themselves done in
    # (lowering.last_workgroup); None: the kernel ends with its own steps
    finish: "Kernel | None" = None
    counter: str | None = None

    @property
    def threads(self) -> int:
        return math.prod(self.box)

    @property
    def all_steps(self) -> list[Step]:
        """Every step the kernel's dispatch runs, in order (its finish's last)."""
        return self.steps + (self.finish.steps if self.finish else [])


@dataclass
class Plan:
    graph: DataflowGraph  # the concrete (bound, rewritten) graph
    kernels: list[Kernel]
    stored: set[str]  # access nodes that need a buffer
    fills: dict[str, float]  # access node -> identity value to fill before each call
    overwritten: set[str] = field(default_factory=set)  # versions whose sole writer stores every element
    # version -> the older version whose buffer it is written into (lowering.in_place)
    storage: dict[str, str] = field(default_factory=dict)

    def buffer_of(self, access: str) -> str:
        """The version whose buffer holds ``access`` (itself, unless it shares one)."""
        return self.storage.get(access, access)

    @property
    def buffers(self) -> set[str]:
        """The stored versions that hold a buffer (the others are written into one of these)."""
        return {self.buffer_of(a) for a in self.stored}


def _same_point(producer: Step, w: Memlet, consumer: Step, r: Memlet) -> bool:
    """Whether the consumer reads exactly what the producer wrote at this thread."""
    if len(w.index) != len(r.index) or uses_connectors(r.index, consumer.tasklet):
        return False
    axes = [sympy.Symbol(f"_t{k}", integer=True) for k in range(len(producer.parallel))]
    ps = {s: b + a for (s, b, _), a in zip(producer.parallel, axes)}
    cs = {s: b + a for (s, b, _), a in zip(consumer.parallel, axes)}
    return all(sympy.expand(replaced(a, ps) - replaced(b, cs)) == 0
               for a, b in zip(w.index, r.index))


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
    return name if _same_point(step, w, consumer, r) else None


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


def _tiled(graph: DataflowGraph, t: Tasklet, box: tuple[int, ...]) -> bool:
    """Whether ``t`` gets register tiles of its own (``lowering.matmul``) in a kernel over ``box``."""
    return math.prod(box) >= MIN_TILED_OUTPUTS and matmul_shape(graph, t) is not None


def _place(graph: DataflowGraph, kernels: list[Kernel], kernel_of: dict[str, int], t: Tasklet) -> None:
    par = parallel_symbols(graph, t)
    parallel = tuple(rng for rng in t.domain if rng[0] in par)
    loop = tuple(rng for rng in t.domain if rng[0] not in par)
    box = tuple(extent(rng) for rng in parallel)
    tiled = _tiled(graph, t, box)
    reads = graph.reads(t.name)
    writers_of = {access: [w for w, _ in graph.writers(access)] for access, _ in reads}
    # A kernel before one writing a version ``t`` reads can neither have that version finished
    # nor pass it in a register: the search starts there (all kernels each time was quadratic).
    first = max((kernel_of[w] for ws in writers_of.values() for w in ws), default=0)
    for k in range(first, len(kernels)):
        kernel = kernels[k]
        if kernel.box != box:
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
        if ok and not any(_shares_written_elements(graph, t, s.tasklet) or (tiled and _tiled(graph, s.tasklet, box))
                          for s in kernel.steps):
            kernel.steps.append(step)
            kernel_of[t.name] = k
            return
    step = Step(t, parallel, loop, [Read(m.connector, a, m) for a, m in reads])
    kernels.append(Kernel(f"k{len(kernels)}_{t.name}", box, [step]))
    kernel_of[t.name] = len(kernels) - 1


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
    order = {n: k for k, n in enumerate(graph.nx.nodes)}

    def key(n: str):
        node = graph.node(n)
        if not isinstance(node, Tasklet):
            return (0, order[n])
        return (0 if all(r[0] not in parallel_symbols(graph, node) for r in node.domain) else 1, order[n])
    return [n for n in nx.lexicographical_topological_sort(graph.nx, key=key) if isinstance(graph.node(n), Tasklet)]


def drop_empty_tasklets(graph: DataflowGraph) -> dict[str, float]:
    """Remove the tasklets whose domain is empty (a hand-built ``k = 0:0``; the
    tracer emits none): they run no point, and a 0-extent domain has no thread
    layout.  Returns the identity fills of the prod/max/min versions that only
    they wrote, which still read as that identity (``ir.run`` does the same)."""
    fills = {}
    for t in [graph.node(n) for n in list(graph.nx.nodes)]:
        if isinstance(t, Tasklet) and t.runs_nothing:
            writes = graph.writes(t.name)
            graph.nx.remove_node(t.name)
            fills.update({a: ACCUMULATION_IDENTITY[m.accumulate] for a, m in writes
                          if m.accumulate not in (None, "sum") and not graph.writers(a)})
    return fills


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


FREE_RECOMPUTE_ROUNDS = 3  # plans made again for values free to recompute (each round's may buffer the next's)


def plan(graph: DataflowGraph, sizes: dict[str, int], target: "str | targets.Target | None" = None) -> Plan:
    """Bind sizes, split multi-output tasklets, recompute the producers ``graph.meta["rematerialise"]``
    names where they are read (``lowering.rematerialise``), fold elementwise producers into
    reductions, split long reductions, run the elementwise passes feeding a first stage over its
    chunks (``reduce_fusion.chunk_producers``), group tasklets into kernels and decide buffers,
    fills and write modes.  ``target`` (a ``lowering.targets`` name or ``Target``) sets which producers are
    recomputed, how long reductions are split and how long a row kernel's rows may be; without one
    the plan suits every target.

    A value whose recomputation reads nothing more (``rematerialise.free_candidates``: a copy, a
    scale, ``g / n`` of a scalar) but that the plan passes to another kernel in a buffer is then
    recomputed where it is read, and the program planned once more: its buffer and its write go for
    a few flops (in up to ``FREE_RECOMPUTE_ROUNDS`` more plans), and so are the free values it is
    computed from (``rematerialise.free_buffered``).  Other values passed in registers inside a kernel
    stay as they are.  Values made only of elements broadcast along them (n-body's pair values) are
    then tried recomputed where they are read (``rematerialise.recompute_expansions``), and so, on
    targets that do not recompute cheap values anyway, are those (``rematerialise.cheap_on_gpu``):
    each trial is kept where the plan stores fewer elements in no more kernels."""
    target = None if target is None else targets.of(target)
    from .rematerialise import expansions_in  # built on this module's index analysis
    p = _planned(graph, sizes, target, expand=False)
    # values expanding their inputs (rematerialise.recompute_expansions), kept where the plan then stores
    # fewer elements in no more kernels: recomputed where a kernel passed it in a register anyway,
    # gesummv's outer product g[i] * x[j] was computed once per gradient and ran 7-10% slower on lavapipe.
    # The whole of _planned is run both ways: recomputing a seed's broadcast first changes which values
    # its rounds recompute (softmax_xent stores 23 MiB instead of 27 at 1Kx1000 on the CPU device, though
    # the first plans of both ways store the same)
    if expansions_in(graph, sizes):
        trial = _planned(graph, sizes, target, expand=True)
        if _stores_less(trial, p):
            p = trial
    return p


def _planned(graph: DataflowGraph, sizes: dict[str, int], target: "targets.Target | None", expand: bool) -> Plan:
    """``plan``'s plan, values expanding their inputs recomputed or not (``expand``)."""
    from .rematerialise import cheap_on_gpu, free_buffered  # built on this module's index analysis
    recompute = list(graph.meta.get("rematerialise", ()))
    p = _plan(graph, sizes, target, recompute, expand)
    for _ in range(FREE_RECOMPUTE_ROUNDS):  # a recomputed value's own inputs may now be buffered in turn
        buffered = [n for n in free_buffered(p) if n not in recompute]
        if not buffered:
            break
        recompute += buffered
        p = _plan(graph, sizes, target, recompute, expand)
    # lavapipe: values a GPU recomputes where read (rematerialise.cheap_on_gpu), kept where the plan then
    # stores fewer elements in no more kernels (bench.gpu --scale 64: softmax_xent's 8 kernels became 10 and
    # ran 15% slower; those with fewer kernels ran as fast or faster).  On the CPU device only arithmetic
    # ones: its reduction loop recomputing tanh ran 185 -> 352 ms at 20M elements, softplus + logsumexp
    # recomputing exp 7.5 -> 19.9 ms at 1M; layer norm recomputing x - m and its quotient stores 16 MiB
    # instead of 32 at 1Kx1K), and only where a value has rematerialise.CPU_TRIAL_MIN_ELEMENTS.
    if target is not None and not target.recompute_transcendentals:
        extra = [n for n in cheap_on_gpu(p, arithmetic_only=target.sequential) if n not in recompute]
        if extra:
            trial = _plan(graph, sizes, target, recompute + extra, expand)
            if _stores_less(trial, p):
                p = trial
    return p


def _stores_less(trial: Plan, p: Plan) -> bool:
    """Plan ``trial`` stores fewer elements than ``p`` in no more kernels."""
    return _stored_elements(trial) < _stored_elements(p) and len(trial.kernels) <= len(p.kernels)


def _stored_elements(p: Plan) -> int:
    """Elements of the versions a plan stores, arguments' first versions aside."""
    g = p.graph
    return sum(math.prod(int(d) for d in g.containers[g.node(a).container].shape) for a in p.buffers
               if not (g.containers[g.node(a).container].role == "argument" and g.node(a).version == 0))


def _plan(graph: DataflowGraph, sizes: dict[str, int], target: "targets.Target | None",
          recompute: list[str], expand: bool = False) -> Plan:
    g = bind(graph, sizes)
    empty_fills = drop_empty_tasklets(g)
    split_multi_output_tasklets(g)
    from .rematerialise import merge_duplicates, rematerialise, recompute_cheap, recompute_expansions, split_free_copies
    merge_duplicates(g)
    split_free_copies(g)
    rematerialise(g, recompute)
    if expand:
        recompute_expansions(g)
    if target is not None and target.recompute_transcendentals:
        recompute_cheap(g)
    from .reduce_fusion import chunk_producers, fold_producers
    fold_producers(g, target is not None and target.recompute_transcendentals)
    from .sibling_reductions import merge_sibling_reductions
    merge_sibling_reductions(g)
    split_large_reductions(g, target)
    chunk_producers(g)
    kernels: list[Kernel] = []
    kernel_of: dict[str, int] = {}
    for name in placement_order(g):
        _place(g, kernels, kernel_of, g.node(name))
    kernels = sink_one_point_kernels(g, kernels)
    from .rowfusion import RowKernel, fuse_rows  # built on this module's types
    kernels = fuse_rows(g, kernels, None if target is None else target.max_row)
    if target is not None and target.single_pass_reductions and target.workgroup_reductions:
        from .last_workgroup import finish_in_last_workgroup
        kernels = finish_in_last_workgroup(g, kernels, target)
    check_order(g, kernels)

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
                          and any(a == access and not (isinstance(kernel, RowKernel) and _same_point(step, m, s, w))
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
    from .in_place import share_versions  # built on this module's plan
    return share_versions(Plan(g, kernels, stored, fills, overwritten), target)
