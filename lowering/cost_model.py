"""Store versus recompute: the one cost model every such decision asks.

A value one kernel computes and another reads has two strategies
(``Strategy``):

* **store**: a buffer live from its writer to its last reader; the value's
  bytes cross memory once written and once per reading kernel;
* **recompute**: its expression is evaluated again in every reader
  (``inlining.inline``; ``rematerialise`` and ``reduce_fusion`` apply it),
  which costs its operations again per reader and reads the value's inputs
  there instead, which may keep them alive longer.

The prices are in the target's terms (``CostModel.of``: its ``Tuning`` and
capabilities): operations by kind (``ir.op_cost``: arithmetic is free next
to a load everywhere, a call is free next to a load on a GPU only), elements
read per point, bytes and elements stored, and kernels.  Where each decision
is taken and what it asks here:

* ``reduce_fusion.fold_producers``: folding a producer into a reduction
  (``folds``: it reads no more distinct elements, and where the producer's
  value stays for other readers, recomputing it is ``cheap``);
* ``rematerialise``: what every plan recomputes (``free``: arithmetic on one
  element), what a GPU's plan recomputes (``cheap_on_a_gpu``), how far a
  reader may grow (``within_reader_limit``), which expansions pay
  (``expansion_pays``), and neither where a product reads the value
  (``spoils_a_product``);
* ``plan.plan``'s trials: which values a second plan recomputes
  (``trial_recomputes``, ``trial_pays``) and which plan is kept
  (``stores_less``: fewer elements stored in no more kernels);
* ``symdiff.memory_budget``: which values to try first (``priced``: the most
  bytes per recomputed operation), each trial measured on the real plan;
* ``symdiff.backward`` (which imports ``ir`` alone): a partial reads a stored
  forward value rather than call a function again (``ir.op_cost.calls``).

Beyond the prices, one rule is no cost: values a derivative tests for
equality with a stored maximum, minimum or product are always loads
(``inlining.exact_reads``).
"""
from __future__ import annotations

import collections
import enum
import math
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, NamedTuple

import numpy as np
import sympy

from symdiff.ir import op_cost
from symdiff.ir.graph import DTYPES, STORAGE_FLOATS, DataflowGraph, Memlet, Tasklet
from symdiff.ir.graph_notes import GraphNotes
from symdiff.ir.op_cost import Op
from symdiff.ir.sizes import substitute_sizes

from . import targets
from .host_products import product
from .inlining import producer_point, streamed, varies
from .matmul import matvec_shape
from .plan_types import Plan


class Strategy(enum.Enum):
    """How a value reaches the kernels that read it."""

    STORE = "store"  # a buffer, written once, read by each reader
    RECOMPUTE = "recompute"  # its expression evaluated again in each reader


def recomputed(graph: DataflowGraph) -> list[str]:
    """The tasklets (by name) ``graph``'s lowering recomputes where they are read,
    besides what the cost model chooses itself: a memory budget's choice.  It
    travels as the graph note ``rematerialise`` (``ir.graph_notes``), in
    ``graph.meta`` because the compiled-program caches key a graph by its meta
    (``lowering.disk_cache``)."""
    return list(GraphNotes(graph).rematerialise)


def with_recomputed(graph: DataflowGraph, names: Iterable[str]) -> DataflowGraph:
    """``graph`` whose lowering recomputes ``names`` where they are read (a copy; ``graph`` itself if none)."""
    names = sorted(names)
    if not names:
        return graph
    out = graph.copy()
    GraphNotes(out).rematerialise = names
    return out


class Price(NamedTuple):
    """What storing one value costs against recomputing it (``CostModel.priced``)."""

    name: str  # the tasklet writing it
    bytes: int  # its buffer
    ops: int  # operations a reader recomputes: its points times its expression's operations


@dataclass(frozen=True)
class CostModel:
    """Store versus recompute priced for one target (``of``)."""

    tuning: targets.Tuning = targets.TUNING
    # Every plan recomputes values with calls that a GPU recomputes for less than
    # a load (``Target.recompute_transcendentals``).
    recompute_calls: bool = False
    # The costliest kind of operation a second plan tries recomputing where the
    # target does not recompute calls anyway (``plan.plan``'s trial): arithmetic
    # on a CPU (its vectorised loop pays for a call again), calls on lavapipe;
    # None: no trial (no target, or calls recomputed in every plan).
    trial_ops: Op | None = None
    # Products run by the host's BLAS (``Target.host_blas``), which reads float32 and float64 only.
    host_products: bool = False

    @classmethod
    def of(cls, target: "targets.Target | None") -> "CostModel":
        """The model of ``target``; without one, that of a plan for every target (no trials)."""
        if target is None:
            return cls()
        if target.recompute_transcendentals:
            return cls(target.tuning, recompute_calls=True, host_products=target.host_blas)
        return cls(target.tuning, trial_ops=Op.ARITHMETIC if target.sequential else Op.CALL,
                   host_products=target.host_blas)

    # -- operations ------------------------------------------------------------------
    @staticmethod
    def operations(t: Tasklet) -> int:
        """Operations one point of ``t`` performs."""
        return sum(op_cost.operations(body) for body in t.body.values())

    @staticmethod
    def arithmetic(t: Tasklet) -> bool:
        """``t`` computes with ``+``, ``-``, ``*``, ``/`` and integer powers only."""
        return all(op_cost.arithmetic(body) for body in t.body.values())

    # -- one value -------------------------------------------------------------------
    def free(self, graph: DataflowGraph, p: Tasklet) -> bool:
        """Recomputing ``p`` (each of its outputs) costs a few flops and no extra
        memory traffic on any target: arithmetic on at most one input element
        (a copy, a negation, a scale, ``g / n`` of a scalar seed).  Not so the widening of
        16-bit floats (``ir.storage``) a product the host's BLAS runs reads: recomputed there, the
        product would read 16-bit elements, which BLAS does not, and lose it."""
        return len({(a, m.index) for a, m in graph.reads(p.name)}) <= 1 and self.arithmetic(p) and \
            not self._widens_for_host_blas(graph, p)

    def _widens_for_host_blas(self, graph: DataflowGraph, p: Tasklet) -> bool:
        if not self.host_products or all(graph.containers[m.container].dtype not in STORAGE_FLOATS
                                         for _, m in graph.reads(p.name)):
            return False
        return any(product(graph, graph.node(r)) for w, _ in graph.writes(p.name) for r, _ in graph.readers(w))

    def cheap_on_a_gpu(self, graph: DataflowGraph, p: Tasklet) -> bool:
        """Recomputing ``p`` costs a GPU less than a load: at most ``recompute_ops``
        operations of any kind an output and one ``streamed`` element (layer norm's
        ``(x - m) / s * g + b`` recomputes from ``x - m``, so that neither it nor the
        reverse pass's values built on it are stored)."""
        elements = {(a, m.index) for a, m in graph.reads(p.name)}
        return len({e for e in elements if streamed(e[1], p)}) <= 1 and \
            all(op_cost.operations(body) <= self.tuning.recompute_ops for body in p.body.values())

    def cheap(self, graph: DataflowGraph, p: Tasklet) -> bool:
        """Recomputing ``p`` costs this target less than a load (``cheap_on_a_gpu``
        where it recomputes calls, else ``free``)."""
        return self.cheap_on_a_gpu(graph, p) if self.recompute_calls else self.free(graph, p)

    def within_reader_limit(self, graph: DataflowGraph, p: Tasklet, access: str) -> bool:
        """Whether recomputing ``p`` where ``access`` is read keeps every reader within
        ``max_recomputed_ops`` (each read of the value a copy of ``p``'s body)."""
        reads = collections.Counter(r for r, _ in graph.readers(access))
        added = self.operations(p)
        return not any(self.operations(graph.node(r)) + n * added > self.tuning.max_recomputed_ops
                       for r, n in reads.items())

    def expansion_pays(self, elements: int, t: Tasklet) -> bool:
        """Whether recomputing an expansion of its inputs (``rematerialise.recompute_expansions``)
        of ``elements`` elements, written by ``t``, pays: it is large enough to leave the cache
        and each output fits a reader (``max_recomputed_ops``: n-body's reverse values built on
        ``sqrt`` of a sum of three squared differences take 40 operations)."""
        return elements >= self.tuning.expansion_min_elements and \
            all(op_cost.operations(body) <= self.tuning.max_recomputed_ops for body in t.body.values())

    def spoils_a_product(self, graph: DataflowGraph, p: Tasklet, recomputable: Callable[[str], bool]) -> bool:
        """Whether recomputing ``p`` costs a matrix or vector-matrix product that
        reads its value more than storing it: always, unless ``p`` is ``free``.
        Recomputed there, the product would read ``p``'s inputs instead of one
        operand and stop being one, losing its tiled kernel (``lowering.matmul``)
        or the host's BLAS (``lowering.host_products``), and would compute ``p``
        once per use of each element (gemm's reverse pass recomputing
        ``2 * y * g`` in ``G B^T`` on the CPU device: 5.6 -> 171 ms at 512^3).
        A product reads the value too through a free value built on it that is
        recomputed in the product in turn (``recomputable``: whether a tasklet's
        value may be recomputed where it is read, ``rematerialise.candidates``):
        once the seed's broadcast is recomputed (``recompute_expansions``),
        gemm's ``1.5 * G`` is free, and ``G`` read by it alone."""
        return not self.free(graph, p) and self._read_by_a_product(graph, p.name, recomputable)

    def _read_by_a_product(self, graph: DataflowGraph, name: str, recomputable: Callable[[str], bool]) -> bool:
        """A product reads what tasklet ``name`` writes, or a free value read by one does."""
        (access, _), = graph.writes(name)
        for r in {r for r, _ in graph.readers(access)}:
            t = graph.node(r)
            if product(graph, t) or matvec_shape(graph, t):
                return True
            if recomputable(r) and self.free(graph, t) and self._read_by_a_product(graph, r, recomputable):
                return True
        return False

    def added_reads(self, graph: DataflowGraph, t: Tasklet, read: Memlet, p: Tasklet) -> int:
        """How many more distinct elements ``t`` reads once ``p`` replaces its ``read``
        (where calls are recomputed, not counting elements read at every point alike:
        a GPU keeps them in cache)."""
        (_, w), = graph.writes(p.name)
        at = producer_point(p, w, read)

        def element(a: str, index) -> tuple:
            return a, tuple(sympy.expand(sympy.sympify(i).xreplace(at)) for i in index)

        def counted(elements: set) -> set:
            return {e for e in elements if not self.recompute_calls or varies(e[1])}
        before = {element(a, m.index) for a, m in graph.reads(t.name)}
        after = {element(a, m.index) for a, m in graph.reads(t.name) if m.connector != read.connector}
        after |= {element(a, m.index) for a, m in graph.reads(p.name)}
        return len(counted(after)) - len(counted(before))

    def folds(self, graph: DataflowGraph, t: Tasklet, read: Memlet, p: Tasklet, kept: bool) -> bool:
        """Whether recomputing producer ``p`` inside reduction ``t`` (through ``read``)
        beats storing it: ``t`` reads no more distinct elements, and where the value
        stays ``kept`` for other readers, recomputing it is ``cheap``."""
        return not (kept and not self.cheap(graph, p)) and self.added_reads(graph, t, read, p) <= 0

    # -- trials: a second plan with more values recomputed ------------------------------
    def trial_recomputes(self, t: Tasklet) -> bool:
        """Whether this target's trial may recompute ``t`` (a GPU's choice,
        ``cheap_on_a_gpu``): any value where the trial allows calls, else an
        arithmetic one."""
        return self.trial_ops is Op.CALL or self.arithmetic(t)

    def trial_pays(self, elements: Iterable[int]) -> bool:
        """Whether a trial recomputing values of these sizes is worth its second
        plan: on a CPU only where one has ``trial_min_elements`` (smaller ones stay
        in cache)."""
        return self.trial_ops is not Op.ARITHMETIC or any(n >= self.tuning.trial_min_elements for n in elements)

    @staticmethod
    def stored_elements(p: Plan) -> int:
        """Elements of the versions a plan stores, arguments' first versions aside."""
        g = p.graph
        return sum(math.prod(int(d) for d in g.containers[g.node(a).container].shape) for a in p.buffers
                   if not (g.containers[g.node(a).container].role == "argument" and g.node(a).version == 0))

    def stores_less(self, trial: Plan, p: Plan) -> bool:
        """Plan ``trial`` beats ``p``: it stores fewer elements in no more kernels
        (``bench.gpu --scale 64``: softmax_xent's 8 kernels became 10 with less
        stored and ran 15% slower; those with fewer kernels ran as fast or faster)."""
        return self.stored_elements(trial) < self.stored_elements(p) and len(trial.kernels) <= len(p.kernels)

    # -- a memory budget's order -------------------------------------------------------
    @staticmethod
    def priced(graph: DataflowGraph, names: Iterable[str], sizes: Mapping[str, int]) -> list[Price]:
        """The ``Price`` of each value tasklets ``names`` write (each writes one; sizes
        bound by ``sizes``), the most bytes per recomputed operation first."""
        out = []
        for name in names:
            t = graph.node(name)
            (_, m), = graph.writes(name)
            c = graph.containers[m.container]
            nbytes = math.prod(c.concrete_shape(sizes)) * np.dtype(DTYPES[c.dtype]).itemsize
            points = math.prod(max(int(substitute_sizes(sympy.sympify(e) - b, sizes)), 0) for _, b, e in t.domain)
            ops = max(points, 1) * max(op_cost.operations(t.body[m.connector]), 1)
            out.append(Price(name, nbytes, ops))
        return sorted(out, key=lambda c: (-c.bytes / c.ops, c.name))
