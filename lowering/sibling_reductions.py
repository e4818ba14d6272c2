"""Sibling reductions: reductions over one domain that read the same data, run as one.

Once values are recomputed where they are read (``rematerialise``) and
producers folded into reductions (``reduce_fusion``), a reverse pass often
holds several reductions over the same domain that load the same elements and
compute the same terms: n-body's gradients of ``x``, ``y``, ``z`` and ``m``
each sum, over the other bodies, a term built on the same distance ``r``.
Planned apart, each is a loop of its own in its kernel, loading every element
and computing ``r`` again.  Merged into one tasklet with an output each, they
are one loop: an element is loaded once, and the terms the outputs share are
computed once (the kernel writer's ``cse`` runs over a tasklet's outputs).

Which tasklets merge: reductions (every write accumulates, at an index free of
connectors, using the same positions of the domain) over domains of equal
ranges position by position, under the same condition, reading no gathered
element and touching containers of one precision; no matrix or vector product
(``lowering.matmul`` tiles those); each reading at least one version another
member reads and computing a term with them (sums sharing only loads stay
apart, ``_merger``); and no path joins two members (one would have to run
first).
Each output keeps its own loop order, so every sum adds the same terms in the
same order as before.  A merged tasklet sums at most ``Tuning.max_sibling_outputs``
values (``lowering.targets``).
"""
from __future__ import annotations

import collections
import functools
from dataclasses import dataclass
from typing import Callable

import networkx
import sympy

from symdiff.ir.graph import DataflowGraph, Memlet, Tasklet, connector_symbol
from symdiff.ir import tasklet_notes as notes
from symdiff.ir.index_analysis import uses_connectors
from symdiff.ir.rewrite import add_read, add_write, replace_tasklet

from . import targets
from .inlining import fresh_connector
from .matmul import matmul_shape, matvec_shape
from .remembered import remembered


def merge_sibling_reductions(graph: DataflowGraph, target: "targets.Target | None" = None) -> None:
    """Merge each set of sibling reductions of a bound ``graph`` into its first
    member (in the graph's order), in place, each of at most ``target``'s
    ``Tuning.max_sibling_outputs`` outputs (``targets.TUNING``'s without a target)."""
    groups: dict[tuple, list[Tasklet]] = collections.defaultdict(list)
    for name in graph.topological_order():
        t = graph.node(name)
        if isinstance(t, Tasklet):
            key = _key(graph, t)
            if key is not None:
                groups[key].append(t)
    terms: dict[str, _Terms] = {}  # a candidate's, found once: it is asked of each member before it
    for members in groups.values():
        while len(members) > 1:
            first, *rest = members
            joined = _join_siblings(graph, first.name, rest, targets.tuning_of(target).max_sibling_outputs, terms)
            members = [t for t in rest if t.name not in joined]


@remembered
def _key(graph: DataflowGraph, t: Tasklet) -> tuple | None:
    """What siblings share, or None for a tasklet that merges with none (remembered while planning:
    ``lowering.remembered``)."""
    writes = graph.writes(t.name)
    reads = graph.reads(t.name)
    if not writes or any(m.accumulate is None or uses_connectors(m.index, t) for _, m in writes):
        return None
    if any(uses_connectors(m.index, t) for _, m in reads):
        return None
    symbols = t.index_symbols
    used = [frozenset(k for k, s in enumerate(symbols) if s in sympy.sympify(e).free_symbols)
            for _, m in writes for e in m.index]
    positions = frozenset().union(*used)
    if len(positions) == len(symbols) or matmul_shape(graph, t) or matvec_shape(graph, t):
        return None  # no loop inside a thread, or a product
    at = _positional(t)
    dtypes = frozenset(graph.containers[m.container].dtype for _, m in reads + writes)
    return (tuple((b, e) for _, b, e in t.domain), t.condition.xreplace(at), positions, dtypes)


def _join_siblings(graph: DataflowGraph, into: str, rest: list[Tasklet], max_outputs: int,
                   terms: dict[str, "_Terms"]) -> set[str]:
    """Merge into tasklet ``into`` each tasklet of ``rest`` that reads a version
    the members so far read, is joined to none of them by a path and computes
    a term with them (``_merger``), while the members sum at most
    ``max_outputs`` values; returns the names merged.  ``terms``: each
    candidate's ``_Terms``, by name (kept by the caller for its next members)."""
    read = {a for a, _ in graph.reads(into)}
    loads = _loads(graph, graph.node(into))
    written = len(graph.writes(into))
    after: set[str] | None = None  # what the members reach; searched once a candidate shares a term
    members, joined = [into], set()
    for t in rest:
        if t.name not in terms:
            terms[t.name] = _Terms.of(graph, t)
        reads = terms[t.name].versions
        if written + terms[t.name].outputs > max_outputs or not reads & read or not terms[t.name].may_share(loads):
            continue
        # the term first: most candidates share none, and the paths cost a search of the graph each
        merge = _merger(graph, into, t)
        if merge is None:
            continue
        after = set(_descendants(graph, into)) if after is None else after
        if t.name in after:
            continue
        below = _descendants(graph, t.name)
        if any(m in below for m in members):
            continue
        merge()
        members.append(t.name)
        joined.add(t.name)
        read |= reads
        loads = _loads(graph, graph.node(into))
        written = len(graph.writes(into))
        after |= below
    return joined


def _positional(t: Tasklet) -> dict:
    """``t``'s domain symbols by position, as ``_merger`` renames a candidate's to its first member's."""
    return dict(zip(t.index_symbols, _positions(len(t.domain))))


@functools.lru_cache(maxsize=64)
def _positions(n: int) -> tuple[sympy.Symbol, ...]:
    return tuple(sympy.Symbol(f"_sibling{k}", integer=True) for k in range(n))


def _loads(graph: DataflowGraph, t: Tasklet) -> frozenset:
    """The elements ``t`` reads, as (version, index over ``_positional`` symbols)."""
    at = _positional(t)
    return frozenset((a, tuple(sympy.sympify(i).xreplace(at) for i in m.index)) for a, m in graph.reads(t.name))


@dataclass(frozen=True)
class _Terms:
    """What a candidate's operations read, to rule out a shared term before ``_merger`` renames its
    bodies (it is asked of every pair of an unrolled loop's siblings: elman_rnn's 32 forward products,
    each reading ``xs`` at another step, a sixth of the plan's time).  Renamed one to one (distinct
    connectors read distinct elements), an operation of the candidate is an operation of its renamed
    bodies, and one reading an element the member lacks uses a fresh connector, which no operation of
    the member's uses: it shares a term only where one of its operations reads nothing the member lacks."""
    versions: frozenset  # the versions it reads
    outputs: int  # the values it writes
    operations: tuple[frozenset, ...] | None  # per operation, the elements (``_loads``) it reads; None: look

    @staticmethod
    def of(graph: DataflowGraph, t: Tasklet) -> "_Terms":
        at = _positional(t)
        element = {t.inputs[m.connector]: (a, tuple(sympy.sympify(i).xreplace(at) for i in m.index))
                   for a, m in graph.reads(t.name)}
        versions = frozenset(a for a, _ in element.values())
        outputs = len(graph.writes(t.name))
        symbols = set(element) | set(t.index_symbols)
        if len(set(element.values())) != len(element) or not all(
                _free_symbols(body) <= symbols for body in t.body.values()):
            return _Terms(versions, outputs, None)
        return _Terms(versions, outputs, tuple(frozenset(element[s] for s in used if s in element)
                                               for body in t.body.values() for used in _operation_symbols(body)))

    def may_share(self, loads: frozenset) -> bool:
        """Whether it may compute a term with a member reading ``loads`` (``_loads``)."""
        return self.operations is None or any(read <= loads for read in self.operations)


def _descendants(graph: DataflowGraph, name: str) -> set[str]:
    return networkx.descendants(graph.nx, name)


def _merger(graph: DataflowGraph, into: str, t: Tasklet) -> Callable[[], None] | None:
    """What makes tasklet ``into`` compute ``t``'s outputs too (``t``'s domain
    symbols renamed to ``into``'s by position, a read of an element ``into``
    already reads shared) and removes ``t``, where the two compute a term in
    common; ``into`` keeps its place in the graph's order.  None where they
    share none: sums sharing only loads stay apart (conv1d's taps' gradients,
    each the stored gradient times a shifted input, ran 1.3 -> 2.0 ms at 256K
    points on the CPU device in one loop)."""
    keep = graph.node(into)
    rename = dict(zip(t.index_symbols, keep.index_symbols))
    read_by = {(a, m.index): m.connector for a, m in graph.reads(into)}
    taken = set(keep.inputs) | set(keep.body) | {s.name for s in keep.index_symbols}
    subs: dict = dict(rename)
    new_reads = []
    for a, m in graph.reads(t.name):
        index = tuple(sympy.sympify(i).xreplace(rename) for i in m.index)
        c = read_by.get((a, index))
        if c is None:
            c = read_by[(a, index)] = fresh_connector(m.connector, taken)
            new_reads.append((a, Memlet(m.container, index, c)))
        subs[t.inputs[m.connector]] = connector_symbol(c, graph.containers[m.container].dtype)
    added = {k: sympy.sympify(e).xreplace(subs) for k, e in t.body.items()}
    if not _terms(keep.body.values()) & _terms(added.values()):
        return None
    return lambda: _merge(graph, keep, t, added, rename, taken, new_reads)


def _merge(graph: DataflowGraph, keep: Tasklet, t: Tasklet, added: dict, rename: dict, taken: set,
           new_reads: list) -> None:
    """``_merger``'s merge: ``keep`` with ``t``'s outputs ``added`` (its bodies over ``keep``'s
    connectors), reading ``new_reads`` more; ``t`` removed."""
    into = keep.name
    body, new_writes = dict(keep.body), []
    for a, m in graph.writes(t.name):
        c = fresh_connector(m.connector, taken)
        body[c] = added[m.connector]
        new_writes.append((a, Memlet(m.container, tuple(sympy.sympify(i).xreplace(rename) for i in m.index), c,
                                     m.accumulate)))
    inputs = dict(keep.inputs)
    inputs.update({m.connector: connector_symbol(m.connector, graph.containers[m.container].dtype)
                   for _, m in new_reads})
    # the graph tasklets it now runs (explain/kernels() name them with its kernel), and its siblings by name
    # (the kernel's comment in the generated Slang)
    folded = (*notes.folded(keep), notes.origin(t), *notes.folded(t))
    siblings = (*notes.siblings(keep), t.name, *notes.siblings(t))
    replace_tasklet(graph, Tasklet(keep.name, keep.domain, body, inputs, keep.condition, keep.source,
                                   keep.backward, notes.tasklet_notes(keep.meta, folded=folded, siblings=siblings)))
    graph.remove_tasklet(t.name)
    for a, m in new_reads:
        add_read(graph, a, into, m)
    for a, m in new_writes:
        add_write(graph, into, a, m)


def _terms(bodies) -> set:
    """Every operation (a subexpression that is no symbol or number) of ``bodies``."""
    return set().union(*(_operations(body) for body in bodies))


@functools.lru_cache(maxsize=16384)
def _free_symbols(body: sympy.Expr) -> frozenset:
    return frozenset(body.free_symbols)


@functools.lru_cache(maxsize=16384)
def _operation_symbols(body: sympy.Expr) -> tuple[frozenset, ...]:
    """The symbols each operation of ``body`` (``_operations``) uses."""
    return tuple(frozenset(e.free_symbols) for e in _operations(body))


@functools.lru_cache(maxsize=16384)
def _operations(body: sympy.Expr) -> frozenset:
    """``_terms`` of one expression, cached: a first member's body is asked again for each candidate."""
    return frozenset(e for e in sympy.preorder_traversal(body) if not e.is_Atom)
