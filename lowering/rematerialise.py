"""Values recomputed where they are read instead of stored: the lowering's
side of store vs recompute.

A program's reverse pass reads forward values (``x - mean``, ``tanh(x)``)
and its own partial results in kernels far from the ones that computed them,
so each such value is a buffer live from its writer to its last reader.
Rematerialising an elementwise producer substitutes its body into every
reader (``inlining.inline``): the readers compute the value from the
producer's inputs, and once nothing reads the value, neither the producer nor
its buffer remains.  The readers then read the producer's inputs instead,
which may keep those alive longer; whether a choice pays is measured on the
buffer plan by the caller (``symdiff.memory_budget``).

Which producers: those the graph names (``cost_model.recomputed``: tasklet
names, a memory budget's choice), and in every plan those that cost no read
(``free_candidates``), when they qualify as elementwise producers
(``inlining.producer``), no reader indexes the value through a connector
(a gather keeps its buffer) and none tests it for equality with a stored
maximum, minimum or product (``inlining.exact_reads``).  A result's latest version is recomputed for its
readers but still written.

Before any of that, every plan keeps one version of a value computed twice
(``merge_duplicates``) and gives each output of a tasklet writing several
copies its own tasklet (``split_free_copies``), so that chains of copies are
recomputed as one (``free_buffered``).  On targets that do not recompute
cheap values anyway, ``plan.plan`` also tries recomputing them (``cheap_on_gpu``;
on the CPU device the arithmetic ones) and keeps that plan where it stores less
in no more kernels.  On every target it also tries recomputing values made
only of elements broadcast along their domain (n-body's pair values,
``recompute_expansions``), kept on the same terms.  Every price these
choices ask (operations, elements read, sizes, limits) is the cost model's
(``lowering.cost_model``); this module finds the values and carries the
choice out.
"""
from __future__ import annotations

import collections
import math
from typing import Collection, Mapping

import sympy
from sympy.core.operations import LatticeOp

from symdiff.ir.graph import DataflowGraph, Memlet, Tasklet
from symdiff.ir import tasklet_notes as notes
from symdiff.ir.sizes import substitute_sizes
from symdiff.ir.index_analysis import uses_connectors
from symdiff.ir.rewrite import add_read, remove_read, remove_version, remove_write, replace_tasklet

from .cost_model import CostModel
from .inlining import exact_reads, inline, producer, streamed
from .plan_types import Plan
from .rewrites import split_tasklet


def candidates(graph: DataflowGraph) -> list[str]:
    """Tasklets ``rematerialise`` can recompute where their value is read: the
    elementwise producers whose value is no result and is read, by no reader
    through a connector index or in a condition."""
    results, exact = {graph.latest(c) for c in graph.results}, {}
    return [t.name for t in graph.tasklets() if _candidate(graph, t.name, results, exact)]


def _candidate(graph: DataflowGraph, name: str, results: set[str], exact: dict | None = None) -> bool:
    """Whether tasklet ``name`` is one of ``candidates`` (``results``: the results' latest versions;
    ``exact``: as for ``_recomputable``)."""
    writes = graph.writes(name)
    return len(writes) == 1 and writes[0][0] not in results and _recomputable(graph, name, writes[0][0], exact)


def free_candidates(graph: DataflowGraph, model: CostModel) -> list[str]:
    """The candidates whose recomputation reads nothing more (``CostModel.free``:
    arithmetic on a single input element, a copy, a negation, a scale, ``g / n``
    of a scalar seed).  A reader then reads that element instead of the value,
    so the value's buffer and its write go for a few flops: every plan
    recomputes these (``lowering.plan``)."""
    return [name for name in candidates(graph) if model.free(graph, graph.node(name))]


def merge_duplicates(graph: DataflowGraph) -> None:
    """Keep one version of each value computed twice: a plain write whose
    expression, domain, condition and write index equal an earlier one's over
    the same reads (domain symbols renamed by position), into a container of
    the same shape and dtype, each the only writer of its version.  The later
    write goes, and its readers read the earlier version.  The reverse of
    ``a + b`` writes one gradient to both operands (a convolution's chain of
    additions kept a copy per tap, each a buffer), and ``x - mean`` traced
    twice was two buffers of the input's size (layer norm)."""
    results = {graph.latest(c) for c in graph.results}
    kept: dict[tuple, str] = {}
    for name in graph.topological_order():
        t = graph.node(name) if name in graph.nx else None  # an access node merged away is gone
        if not isinstance(t, Tasklet):
            continue
        reads = graph.reads(name)
        if any(uses_connectors(m.index, t) for _, m in reads):
            continue
        rule: dict = {s: ("domain", k) for k, s in enumerate(t.index_symbols)}
        rule.update({t.inputs[m.connector]: ("read", a, _renamed(m.index, rule)) for a, m in reads})
        domain = _renamed(tuple(r[1:] for r in t.domain), rule)
        condition = _renamed(t.condition, rule)
        for access, m in graph.writes(name):
            c = graph.containers[m.container]
            if m.accumulate is not None or access in results or len(graph.writers(access)) != 1 \
                    or uses_connectors(m.index, t):
                continue
            key = (domain, condition, _renamed(m.index, rule), c.shape, c.dtype, _renamed(t.body[m.connector], rule))
            if key not in kept:
                kept[key] = access
                continue
            _drop_write(graph, name, access, m.connector)
            into = kept[key]
            for r, rm in graph.readers(access):
                _redirect(graph, access, r, rm, into)
            remove_version(graph, access)


def _renamed(e, rule: dict):
    """A hashable form of ``e`` (a sympy expression or a tuple of them) with the symbols in ``rule``
    replaced by their values, equal for two expressions exactly when they are the same tree up to
    the order of a commutative operation's arguments.  Unlike ``e.xreplace(rule)``, nothing is
    rebuilt: sympy re-evaluates each rebuilt node (a gather's guarded ``Piecewise`` terms simplify
    their conditions again, a clamped index's ``Min``/``Max`` re-compare their arguments), which
    was most of ``merge_duplicates``' time on unrolled loops."""
    if isinstance(e, tuple):
        return tuple(_renamed(a, rule) for a in e)
    if e in rule:
        return rule[e]
    if not e.args:
        return e
    args = [_renamed(a, rule) for a in e.args]
    if all(a is b for a, b in zip(args, e.args)):
        return e
    if isinstance(e, (sympy.Add, sympy.Mul, LatticeOp)):  # Max, Min, And, Or too
        distinct = frozenset(args)
        if len(distinct) == len(args):
            return e.func, distinct
        return e.func, "multiset", frozenset(collections.Counter(args).items())
    return e.func, tuple(args)


def _drop_write(graph: DataflowGraph, name: str, access: str, connector: str) -> None:
    """Remove tasklet ``name``'s write of ``access`` (the tasklet too, if it wrote nothing else)."""
    t = graph.node(name)
    if len(t.body) == 1:
        graph.remove_tasklet(name)
        return
    body = {k: e for k, e in t.body.items() if k != connector}
    replace_tasklet(graph, Tasklet(t.name, t.domain, body, t.inputs, t.condition, t.source, t.backward, t.meta))
    remove_write(graph, name, access)


def _redirect(graph: DataflowGraph, access: str, reader: str, m: Memlet, into: str) -> None:
    """Reader ``reader`` reads version ``into`` where it read ``access`` through ``m``."""
    remove_read(graph, access, reader, m)
    add_read(graph, into, reader, Memlet(graph.node(into).container, m.index, m.connector))


def split_free_copies(graph: DataflowGraph, model: CostModel) -> None:
    """Give each output of a tasklet that writes several values, each free to
    recompute (``CostModel.free``: the reverse of ``a + b`` copies its
    gradient into both operands' gradients), its own tasklet, so that each
    value is a candidate of its own.  A convolution's reverse pass copied one
    gradient down a chain of nine additions, and the nine copies its tap
    gradients read were nine buffers of the gradient's size."""
    _split_plain_writers(graph, lambda t: model.free(graph, t))


def split_for_recompute(graph: DataflowGraph) -> DataflowGraph:
    """A copy of ``graph`` in which every tasklet writing several plain values
    gives each its own tasklet (``split_tasklet``), so that each is a candidate
    of its own: a memory budget's last resort (``symdiff.memory_budget``).
    n-body's reverse pass writes both pair gradients of ``m_i m_j / r`` from
    one tasklet; split, recomputing every candidate needs no pair buffer at
    all (256 bodies: 5 KiB planned, 517 KiB without the split, 1.3 MiB stored),
    at the price of the outputs' shared terms computed once per output."""
    out = graph.copy()
    _split_plain_writers(out, lambda t: True)
    return out


def _split_plain_writers(graph: DataflowGraph, qualifies) -> None:
    for t in list(graph.tasklets()):
        writes = graph.writes(t.name)
        if len(writes) > 1 and all(m.accumulate is None for _, m in writes) and qualifies(t):
            split_tasklet(graph, t)


def free_buffered(p: Plan, model: CostModel) -> list[str]:
    """Origins of the free candidates (``free_candidates``) whose value plan
    ``p`` passes to another kernel in a buffer, and of the free candidates
    those read, transitively: recomputed, a buffered value's readers read its
    producer's input instead, which a free producer of its own would then
    buffer in turn (a chain of copies is recomputed in one plan, not one
    plan per link)."""
    g = p.graph
    free = set(free_candidates(g, model))
    chosen = {w for a in p.stored for w, _ in g.writers(a) if w in free}
    stack = list(chosen)
    while stack:
        for access, _ in g.reads(stack.pop()):
            for w, _ in g.writers(access):
                if w in free and w not in chosen:
                    chosen.add(w)
                    stack.append(w)
    return sorted({notes.origin(g.node(w)) for w in chosen})


def cheap_on_gpu(p: Plan, model: CostModel) -> list[str]:
    """Origins of the candidates in plan ``p``'s graph that a GPU recomputes
    where they are read (``CostModel.cheap_on_a_gpu``: a few dozen flops on
    one varying element), for ``plan.plan`` to try on targets that do not
    recompute them anyway (lavapipe; the CPU device, arithmetic ones only):
    those ``model`` lets its trial recompute, none where the trial does not
    pay (``CostModel.trial_recomputes``, ``trial_pays``).
    Recomputed, ``mean(tanh(x) * x)``'s product is folded into the mean instead
    of stored (its reverse pass keeps ``tanh(x)`` in a register), and softplus +
    logsumexp's ``exp(x)`` is no longer stored from the first kernel for the
    last one's gather; layer norm's ``x - m`` and ``(x - m) / s`` are read from
    ``x`` by the reverse pass instead of stored."""
    g = p.graph
    names = [n for n in _cheap_on_a_gpu(g, model) if model.trial_recomputes(g.node(n))]
    if not model.trial_pays(_elements(g, n) for n in names):
        return []
    return sorted({notes.origin(g.node(n)) for n in names})


def _cheap_on_a_gpu(graph: DataflowGraph, model: CostModel) -> list[str]:
    """The candidates a GPU recomputes where they are read (``CostModel.cheap_on_a_gpu``)
    but for those a product reads (``_spoils_a_product``)."""
    results = {graph.latest(c) for c in graph.results}
    return [n for n in candidates(graph)
            if model.cheap_on_a_gpu(graph, graph.node(n)) and not _spoils_a_product(graph, n, model, results)]


def _spoils_a_product(graph: DataflowGraph, name: str, model: CostModel, results: set[str]) -> bool:
    """Whether recomputing tasklet ``name`` costs a product reading its value
    (``CostModel.spoils_a_product``; a value is recomputed in a product in turn
    where it is one of ``candidates``; ``results``: the results' latest versions)."""
    return model.spoils_a_product(graph, graph.node(name), lambda r: _candidate(graph, r, results))


def _elements(graph: DataflowGraph, name: str) -> int:
    """Elements of the container tasklet ``name`` writes (a bound graph's)."""
    return math.prod(int(d) for d in graph.containers[graph.node(graph.writes(name)[0][0]).container].shape)


def _recomputable(graph: DataflowGraph, name: str, access: str, exact: dict | None = None) -> bool:
    """Whether tasklet ``name``'s value ``access`` may be recomputed where it is read (``candidates``).
    ``exact``: each reader's ``exact_reads`` found so far, by name, while the graph does not change
    (``candidates`` asks of every tasklet, and most readers read several of them)."""
    readers = graph.readers(access)
    exact = {} if exact is None else exact

    def exact_of(r: str) -> set[str]:
        if r not in exact:
            exact[r] = exact_reads(graph, graph.node(r))
        return exact[r]
    return bool(readers) and producer(graph, access) is graph.node(name) and not any(
        uses_connectors(m.index, graph.node(r)) or graph.node(r).condition.free_symbols & graph.node(r).input_symbols
        or m.connector in exact_of(r) for r, m in readers)


def rematerialise(graph: DataflowGraph, names: Collection[str], model: CostModel) -> list[str]:
    """Inline each qualifying producer named in ``names`` (by its tasklet's
    ``origin`` note, ``ir.tasklet_notes``) into every reader, consumers before producers so that
    chains compose, where each reader stays within ``model``'s limit
    (``CostModel.within_reader_limit``); returns the names rematerialised."""
    wanted = set(names)
    order = [n for n in graph.topological_order() if isinstance(graph.node(n), Tasklet)
             and notes.origin(graph.node(n)) in wanted]
    done = []
    results = {graph.latest(c) for c in graph.results}
    for name in reversed(order):
        origin = notes.origin(graph.node(name))
        writes = graph.writes(name)
        if len(writes) != 1 or not _recomputable(graph, name, writes[0][0]):
            continue
        access = writes[0][0]
        if not model.within_reader_limit(graph, graph.node(name), access):
            continue
        for r, m in graph.readers(access):
            inline(graph, graph.node(r), m.connector, graph.node(name))
        if access not in results:
            graph.remove_tasklet(name)
            remove_version(graph, access)
        done.append(origin)
    return done


def recompute_cheap(graph: DataflowGraph, model: CostModel) -> None:
    """Recompute, where it is read, every candidate a GPU recomputes for less
    than storing it costs (``CostModel.cheap_on_a_gpu``: a few dozen flops
    of any kind on one varying element), including values a kernel would pass
    in registers: a broadcast gradient (``g / n``) or ``exp(x - m)`` held in a
    register still ties its readers to its writer's kernel, and its readers'
    own values then read two varying elements and stop being cheap (softplus
    + logsumexp kept four elementwise passes storing 1M-element
    intermediates).  Rounds until none is left: each round's inlining can
    make its readers cheap in turn; each removes tasklets, so it ends."""
    while True:
        names = _cheap_on_a_gpu(graph, model)
        if not names or not rematerialise(graph, names, model):
            return


def recompute_expansions(graph: DataflowGraph, model: CostModel, free_only: bool = False) -> None:
    """Recompute, where it is read, each value that ``expands`` its inputs:
    computed from elements each shared along an axis of its domain (no
    ``streamed`` read), as ``x[i] - x[j]`` is from the coordinates of n bodies.  Stored, such a value writes and reads back a
    buffer that dwarfs its inputs (n-body's pair values: 1M elements from 4K
    inputs, each 4 MiB); recomputed, its readers load only elements their
    neighbouring points load too.  Tasklets writing several such values are
    split first (n-body's reverse of ``m_i m_j / r`` writes two pair values).
    Rounds until none is left, as ``recompute_cheap``: once ``x[i] - x[j]`` is
    recomputed in ``r``, ``r`` expands its inputs too.  ``free_only``: only the
    values whose recomputation reads nothing more (``CostModel.free``: a seed's
    broadcast), which every plan recomputes; the others are a trial of every
    target's planner (``plan.plan``), kept where the plan stores less."""
    def qualifies(t: Tasklet) -> bool:  # whether a value is free asks less than whether it expands
        return (not free_only or model.free(graph, t)) and _expands(graph, t, model)

    while True:
        _split_plain_writers(graph, qualifies)
        results, exact = {graph.latest(c) for c in graph.results}, {}
        names = [t.name for t in graph.tasklets() if qualifies(t) and _candidate(graph, t.name, results, exact)
                 and not _spoils_a_product(graph, t.name, model, results)]
        if not names or not rematerialise(graph, {notes.origin(graph.node(n)) for n in names}, model):
            return


def expansions_in(graph: DataflowGraph, sizes: Mapping[str, int], model: CostModel, free: bool | None = None) -> bool:
    """Whether a tasklet of ``graph`` (sizes bound by ``sizes``) writes a value
    ``recompute_expansions`` would recompute in its first round: one whose
    recomputation reads nothing more (``free``), more (not ``free``), or any (None)."""
    return any((free is None or model.free(graph, t) == free) and _expands(graph, t, model, sizes)
               for t in graph.tasklets())  # whether a value is free asks less than whether it expands


def _expands(graph: DataflowGraph, t: Tasklet, model: CostModel, sizes: Mapping[str, int] | None = None) -> bool:
    """Tasklet ``t`` writes plainly and unconditionally, over two or more axes
    and from no ``streamed`` or gathered element, a value whose recomputation
    pays (``CostModel.expansion_pays``: large enough, each output within a
    reader's limit).
    Over one axis, such a value is a scalar's broadcast, free to recompute
    where a plan buffers it (``free_buffered``); recomputed up front instead,
    conv1d's ``g / n`` made the CPU device's plan slower (256K points: 1.34 ->
    1.71 ms a call).  The bound is a reader's, not ``Tuning.recompute_ops``:
    n-body's reverse values built on ``sqrt`` of a sum of three squared
    differences take 40 operations, and stored, they were 8 MiB of a
    1024-body gradient's 8.4."""
    writes = graph.writes(t.name)
    return (bool(writes) and t.condition is sympy.true and all(m.accumulate is None for _, m in writes)
            and sum(substitute_sizes(e - b, sizes or {}) != 1 for _, b, e in t.domain) >= 2
            and not any(streamed(m.index, t) or uses_connectors(m.index, t) for _, m in graph.reads(t.name))
            and model.expansion_pays(math.prod(graph.containers[writes[0][1].container].concrete_shape(sizes)), t))
