"""Inlining an elementwise producer into a reader: the reader computes the
value from the producer's inputs instead of reading it.

It is how the recompute strategy is carried out (``cost_model`` decides
where): ``reduce_fusion`` folds producers into the reductions consuming them,
and ``rematerialise`` recomputes producers in every kernel that reads them.
Both leave alone the reads that ``exact_reads`` names: values a derivative
tests for equality with a stored maximum, minimum or product.
"""
from __future__ import annotations

import functools

import sympy

from symdiff.ir.graph import STORAGE_FLOATS, DataflowGraph, Memlet, Tasklet, connector_symbol
from symdiff.ir import tasklet_notes as notes
from symdiff.ir.index_analysis import covers, injective, replaced, uses_connectors
from symdiff.ir.rewrite import replace_tasklet, set_reads

from .remembered import answers, held, remembered, signature


# Accumulations whose derivatives test an operand for equality with the stored result
# (the tie mask ``x == max``, a product's zero factors ``x == 0``).
_TESTED_ACCUMULATIONS = ("max", "min", "prod")


def producer(graph: DataflowGraph, access: str) -> Tasklet | None:
    """The elementwise tasklet that alone writes ``access`` plainly, one point
    per element, from floats of the same dtype or 16-bit floats it widens to
    float32 (exactly: ``ir.storage``); None if there is none."""
    writers = graph.writers(access)
    if len(writers) != 1:
        return None
    p = graph.node(writers[0][0])
    return p if _elementwise(graph, p) else None


@remembered
def _elementwise(graph: DataflowGraph, p: Tasklet) -> bool:
    """Whether ``p`` writes one version plainly, one point per element, from floats of its dtype
    or widened 16-bit floats (``producer``; remembered while planning, ``lowering.remembered``:
    every trial asks it of the producers of every value it may recompute)."""
    writes = graph.writes(p.name)
    if len(writes) != 1:
        return False
    (_, w), = writes
    dtype = graph.containers[w.container].dtype
    if w.accumulate is not None or p.condition is not sympy.true or dtype not in ("float32", "float64"):
        return False
    read_dtypes = {graph.containers[r.container].dtype for _, r in graph.reads(p.name)}
    if not read_dtypes <= {dtype, *(STORAGE_FLOATS if dtype == "float32" else ())} or \
            any(uses_connectors(r.index, p) for _, r in graph.reads(p.name)):
        return False
    return injective(w.index, p.index_symbols) and covers(w.index, p.domain, graph.containers[w.container].shape)


def exact_reads(graph: DataflowGraph, t: Tasklet) -> set[str]:
    """The connectors of ``t`` whose value must be the stored bits, never a
    recomputation: those of a value ``t`` accumulates by max, min or product
    where a reader of the result tests equalities (a reverse or tangent pass's
    tie count, or the user's ``x == x.max()``), and those an equality test reads
    in a tasklet that reads such a result.  A forward pass alone keeps fusing
    producers into its maxima (row statistics, softmax).

    The reverse pass of ``m = max(x)`` divides ``g [x == m]`` by the count of
    ``x == m``; both tests must see the very bits the maximum reduced.  A
    recomputed ``x`` need not have them: each kernel's common subexpressions
    associate its sums differently, and a GPU compiler contracts ``a * b + c``
    into an FMA in one kernel and not in another.  Then no element equals the
    maximum, the count is 0 and every gradient is ``0 / 0`` (a Gaussian mixture's
    logsumexp on Vulkan: NaN in every gradient).  A load is exact on every
    target, and a maximum returns one of its operands unchanged."""
    exact: set[str] = set()
    by_symbol = {sym: name for name, sym in t.inputs.items()}

    def connectors(symbols) -> set[str]:
        return {by_symbol[s] for s in symbols if s in by_symbol}
    for access, m in graph.writes(t.name):
        if m.accumulate in _TESTED_ACCUMULATIONS and any(_tests_equality(graph.node(r)) for r, _ in graph.readers(access)):
            exact |= connectors(t.body[m.connector].free_symbols)
    # (most graphs accumulate no version by max, min or product: every writer is asked first)
    reads = graph.reads(t.name)
    if any(w.accumulate in _TESTED_ACCUMULATIONS for a, _ in reads for _, w in graph.writers(a)) and \
            any(graph.accumulation(a) in _TESTED_ACCUMULATIONS for a, _ in reads):
        for body in t.body.values():
            for test in body.atoms(sympy.Eq, sympy.Ne):
                exact |= connectors(test.free_symbols)
    return exact


def _tests_equality(node) -> bool:
    """A tasklet whose body compares for equality (a library node computes no such test)."""
    return isinstance(node, Tasklet) and any(body.atoms(sympy.Eq, sympy.Ne) for body in node.body.values())


def producer_point(p: Tasklet, w: Memlet, read: Memlet) -> dict:
    """``p``'s domain point that wrote the element ``read`` reads (each component of
    ``p``'s write index is ``s + c`` or constant)."""
    return dict(_point(p.domain, w.index, read.index))


@functools.lru_cache(maxsize=16384)
def _point(domain: tuple, write: tuple, read: tuple) -> tuple:
    """``producer_point``'s answer as items, cached: every planning round inlines the same
    producers into the same readers again."""
    at = {s: b for s, b, _ in domain}
    for wi, ri in zip(write, read):
        wi = sympy.sympify(wi)
        if wi.free_symbols:
            (s,) = wi.free_symbols
            at[s] = sympy.sympify(ri) - (wi - s)
    return tuple(at.items())


@functools.lru_cache(maxsize=65536)
def _expanded(e: sympy.Expr) -> sympy.Expr:
    """``sympy.expand(e)``, cached (as ``_point``)."""
    return sympy.expand(e)


def inline(graph: DataflowGraph, t: Tasklet, connector: str, p: Tasklet) -> None:
    """Replace ``t``'s read through ``connector`` by ``p``'s body at the same
    element; reads of one element through several connectors become one.
    While planning, each such rewrite is remembered by the tasklets and memlets
    it rewrites (``lowering.remembered``): every trial plan inlines the same
    producers into the same readers (jacobi-2d: 823 inlines in six plans), and
    given the same objects, the same tasklet and memlets result."""
    done = answers("inline")
    if done is None:
        fused, reads = _inlined(graph, t, connector, p)
    else:
        key = (signature(graph, t), connector, signature(graph, p))
        if key not in done:
            done[key] = (*_inlined(graph, t, connector, p), held(graph, t), held(graph, p))
        fused, reads = done[key][:2]
    replace_tasklet(graph, fused)  # in place: the tasklet keeps its position in the graph's order
    set_reads(graph, t.name, reads)


def _inlined(graph: DataflowGraph, t: Tasklet, connector: str, p: Tasklet) -> tuple[Tasklet, list[tuple[str, Memlet]]]:
    """``inline``'s result: ``t`` reading ``p``'s body, and the reads it then makes."""
    (_, w), = graph.writes(p.name)
    (_, read), = [(a, m) for a, m in graph.reads(t.name) if m.connector == connector]
    at = producer_point(p, w, read)
    reads = {m.connector: (a, m.index) for a, m in graph.reads(t.name) if m.connector != connector}
    by_element = {(a, tuple(_expanded(i) for i in idx)): c for c, (a, idx) in reads.items()}
    taken = set(reads) | {s.name for s in t.index_symbols}
    subs: dict = {s: v for s, v in at.items()}
    for a, m in graph.reads(p.name):
        index = tuple(_expanded(replaced(i, at)) for i in m.index)
        c = by_element.get((a, index))
        if c is None:
            c = fresh_connector(m.connector, taken)
            reads[c] = (a, index)
            by_element[(a, index)] = c
        subs[p.inputs[m.connector]] = connector_symbol(c, graph.containers[m.container].dtype)
    value = replaced(next(iter(p.body.values())), subs)  # cached: every planning round inlines the same again
    body = {k: replaced(e, {t.inputs[connector]: value}) for k, e in t.body.items()}
    inputs = {c: connector_symbol(c, graph.containers[graph.node(a).container].dtype) for c, (a, _) in reads.items()}
    # the producer's graph tasklets now run here (explain/kernels() name them with this tasklet's kernel)
    folded = (*notes.folded(t), notes.origin(p), *notes.folded(p))
    fused = Tasklet(t.name, t.domain, body, inputs, t.condition, t.source, t.backward,
                    notes.tasklet_notes(t.meta, folded=folded))
    return fused, [(a, Memlet(graph.node(a).container, index, c)) for c, (a, index) in reads.items()]


def fresh_connector(base: str, taken: set) -> str:
    """``base``, or ``base_<k>`` with the first ``k`` not in ``taken``; added to ``taken``."""
    name, k = base, 0
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    taken.add(name)
    return name


def varies(index) -> bool:
    return any(sympy.sympify(i).free_symbols for i in index)


def streamed(index, p: Tasklet) -> bool:
    """Whether ``p`` reads a new element through ``index`` at every step along
    each axis of its domain: an index missing one of the axes (a row's mean
    ``m[i]`` in ``(x[i, j] - m[i]) / s[i]``, a column's scale ``g[j]``) reads an
    element its neighbours along that axis read too, which stays in cache."""
    used = set().union(*(sympy.sympify(i).free_symbols for i in index))
    return varies(index) and all(s in used for s, b, e in p.domain if sympy.sympify(e) - b != 1)
