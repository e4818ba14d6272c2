"""Elementwise producers folded into the reductions that consume them.

``np.sum(x * x)`` traces to a map tasklet writing ``x * x`` and a reduction
reading it.  Planned as they are, the map is a kernel (or part of one) over
every point that stores the whole intermediate, and the reduction (often its
first stage, ``plan.split_large_reductions``) reads it back: for 16M float32
that is 64 MB written and read again, most of the program's time on lavapipe.
The reduction's box is not the map's, so the planner cannot pass the value in
a register.

Here, before planning, the producer's body is substituted into the
reduction's body and the reduction reads the producer's inputs instead, so the
intermediate is computed inside the reduction's loop and never written.  A
producer qualifies when it is the only, plain, unconditional writer of the
version, covers it one point per element, reads and writes only floats of the
version's dtype (the fused body must round as the two did), and the reduction
reads each element of the version exactly once (an index injective over its
whole domain: a matmul-shaped read would recompute the producer once per
output) and folding does not make it read more distinct elements (a
producer's inputs are often kept in registers by the kernel that computes
them for the reverse pass: read by the reduction, they would become buffers;
``elementwise_chain``'s value_and_grad on lavapipe went 103 -> 176 ms when
its sum was folded up to the ``sin`` in the middle of the chain).  The
producer is then dropped if nothing else reads the version (the reduction's
other reads of it count: ``v @ v[::-1]`` reads ``v`` twice);
otherwise it stays for its other readers and is inlined only when recomputing
it is cheap: arithmetic on a single input element, so the reduction reads no
more than before.  Chains fold one producer at a time until none qualifies.

On a target where recomputing beats memory traffic (``recompute_transcendentals``:
GPUs) a producer is cheap with transcendentals too, up to ``RECOMPUTE_OPS``
operations, and reads of one element for the whole domain (a row maximum,
a scalar) do not count as added reads: a GPU keeps them in cache.  So
``sum(exp(x - max(x)))`` and ``mean(log1p(exp(x)))`` read ``x`` alone.
"""
from __future__ import annotations

import sympy

from ir.graph import DataflowGraph, Memlet, Tasklet, connector_symbol
from ir.index_analysis import covers, injective

from .plan import parallel_symbols, uses_connectors

_CHEAP_OPS = (sympy.Add, sympy.Mul, sympy.Pow, sympy.Symbol, sympy.Number)  # with integer powers only
RECOMPUTE_OPS = 24  # most operations of a producer recomputed where recomputing wins (GPUs)


def fold_producers(graph: DataflowGraph, recompute_transcendentals: bool = False) -> None:
    """Fold qualifying elementwise producers into every in-thread reduction of a
    bound graph (see the module docstring), removing producers left unread."""
    for name in [t.name for t in graph.tasklets()]:
        while name in graph.nx and _fold_one(graph, graph.node(name), recompute_transcendentals):
            pass


def _is_reduction(graph: DataflowGraph, t: Tasklet) -> bool:
    writes = graph.writes(t.name)
    return (bool(writes) and all(m.accumulate is not None and not uses_connectors(m.index, t) for _, m in writes)
            and len(parallel_symbols(graph, t)) < len(t.domain))


def _fold_one(graph: DataflowGraph, t: Tasklet, gpu: bool) -> bool:
    """Fold one producer into reduction ``t``; whether one was folded."""
    if not _is_reduction(graph, t):
        return False
    symbols = t.index_symbols
    for access, m in graph.reads(t.name):
        if uses_connectors(m.index, t) or not injective(m.index, symbols):
            continue
        producer = _producer(graph, access)
        if producer is None:
            continue
        # other readers include t itself through another connector (``v @ v[::-1]``):
        # the version must outlive this fold for that read
        others = [r for r, o in graph.readers(access) if r != t.name or o.connector != m.connector]
        latest_result = any(graph.latest(c) == access for c in graph.results)
        keep = bool(others) or latest_result
        if keep and not _cheap(graph, producer, gpu) or _added_reads(graph, t, m, producer, gpu) > 0:
            continue
        _inline(graph, t, m.connector, producer)
        if not keep:
            graph.remove_tasklet(producer.name)
            graph.nx.remove_node(access)
        return True
    return False


def _producer(graph: DataflowGraph, access: str) -> Tasklet | None:
    """The elementwise tasklet that alone writes ``access`` plainly, one point
    per element, from floats of the same dtype; None if there is none."""
    writers = graph.writers(access)
    if len(writers) != 1:
        return None
    name, w = writers[0]
    p = graph.node(name)
    dtype = graph.containers[w.container].dtype
    if (w.accumulate is not None or p.condition is not sympy.true or len(graph.writes(name)) != 1
            or dtype not in ("float32", "float64")):
        return None
    reads = graph.reads(name)
    if any(graph.containers[r.container].dtype != dtype or uses_connectors(r.index, p) for _, r in reads):
        return None
    syms = p.index_symbols
    if not injective(w.index, syms) or not covers(w.index, p.domain, graph.containers[w.container].shape):
        return None
    return p


def _added_reads(graph: DataflowGraph, t: Tasklet, read: Memlet, p: Tasklet, gpu: bool) -> int:
    """How many more distinct elements ``t`` reads once ``p`` replaces its ``read``
    (with ``gpu``, not counting elements read at every point alike)."""
    (_, w), = graph.writes(p.name)
    at = _point(p, w, read)
    def element(a: str, index) -> tuple:
        return a, tuple(sympy.expand(sympy.sympify(i).xreplace(at)) for i in index)

    def counted(elements: set) -> set:
        return {e for e in elements if not gpu or _varies(e[1])}
    before = {element(a, m.index) for a, m in graph.reads(t.name)}
    after = {element(a, m.index) for a, m in graph.reads(t.name) if m.connector != read.connector}
    after |= {element(a, m.index) for a, m in graph.reads(p.name)}
    return len(counted(after)) - len(counted(before))


def _varies(index) -> bool:
    return any(sympy.sympify(i).free_symbols for i in index)


def _point(p: Tasklet, w: Memlet, read: Memlet) -> dict:
    """``p``'s domain point that wrote the element ``read`` reads (each component of
    ``p``'s write index is ``s + c`` or constant)."""
    at = {s: b for s, b, _ in p.domain}
    for wi, ri in zip(w.index, read.index):
        wi = sympy.sympify(wi)
        if wi.free_symbols:
            (s,) = wi.free_symbols
            at[s] = sympy.sympify(ri) - (wi - s)
    return at


def _cheap(graph: DataflowGraph, p: Tasklet, gpu: bool) -> bool:
    """Recomputing ``p`` costs a few flops and no extra memory traffic (on a
    ``gpu``, a few dozen flops of any kind and elements read at every point alike)."""
    elements = {(a, m.index) for a, m in graph.reads(p.name)}
    body = next(iter(p.body.values()))
    if gpu:
        return len({e for e in elements if _varies(e[1])}) <= 1 and sympy.count_ops(body) <= RECOMPUTE_OPS
    return len(elements) <= 1 and all(isinstance(e, _CHEAP_OPS) and not (e.is_Pow and not e.exp.is_Integer)
                                      for e in sympy.preorder_traversal(body))


def _inline(graph: DataflowGraph, t: Tasklet, connector: str, p: Tasklet) -> None:
    """Replace ``t``'s read through ``connector`` by ``p``'s body at the same
    element; reads of one element through several connectors become one."""
    (_, w), = graph.writes(p.name)
    (_, read), = [(a, m) for a, m in graph.reads(t.name) if m.connector == connector]
    at = _point(p, w, read)
    reads = {m.connector: (a, m.index) for a, m in graph.reads(t.name) if m.connector != connector}
    by_element = {(a, tuple(sympy.expand(i) for i in idx)): c for c, (a, idx) in reads.items()}
    taken = set(reads) | {s.name for s in t.index_symbols}
    subs: dict = {s: v for s, v in at.items()}
    for a, m in graph.reads(p.name):
        index = tuple(sympy.expand(sympy.sympify(i).xreplace(at)) for i in m.index)
        c = by_element.get((a, index))
        if c is None:
            c = _fresh(m.connector, taken)
            taken.add(c)
            reads[c] = (a, index)
            by_element[(a, index)] = c
        subs[p.inputs[m.connector]] = connector_symbol(c, graph.containers[m.container].dtype)
    value = next(iter(p.body.values())).xreplace(subs)
    body = {k: e.xreplace({t.inputs[connector]: value}) for k, e in t.body.items()}
    inputs = {c: connector_symbol(c, graph.containers[graph.node(a).container].dtype) for c, (a, _) in reads.items()}
    # the producer's graph tasklets now run here (explain/kernels() name them with this tasklet's kernel)
    folded = (*t.meta.get("folded", ()), p.meta["origin"], *p.meta.get("folded", ()))
    fused = Tasklet(t.name, t.domain, body, inputs, t.condition, t.source, t.backward, {**t.meta, "folded": folded})
    graph.nx.nodes[t.name]["node"] = fused  # in place: the tasklet keeps its position in the graph's order
    for a, _, key in list(graph.nx.in_edges(t.name, keys=True)):
        graph.nx.remove_edge(a, t.name, key)
    for c, (a, index) in reads.items():
        graph.nx.add_edge(a, t.name, memlet=Memlet(graph.node(a).container, index, c))


def _fresh(base: str, taken: set) -> str:
    name, k = base, 0
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    return name
