"""Graph rewrites the planner runs before it places tasklets in kernels: sizes
bound (``bind``), tasklets that write along different axes split, long
reductions split into partial sums and a sum of the partials, and tasklets
over empty domains dropped.  Each takes a bound graph and edits it in place;
``lowering.plan`` runs them in its pipeline.
"""
from __future__ import annotations

import math

import sympy

from symdiff.ir.graph import ACCUMULATION_IDENTITY, DataflowGraph, Memlet, Tasklet, connector_symbol
from symdiff.ir import tasklet_notes as notes
from symdiff.ir.index_analysis import extent, injective, uses_connectors
from symdiff.ir.sizes import substitute_sizes

from . import targets
from .kernels import split_k
from .matmul import matmul_shape
from .plan_types import parallel_symbols

def bind(graph: DataflowGraph, sizes: dict[str, int]) -> DataflowGraph:
    """A copy of ``graph`` with every size symbol replaced by its value.  Each
    tasklet's ``origin`` note (``ir.tasklet_notes``) is its name here, kept by every later rewrite
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
                           notes.tasklet_notes(node.meta, origin=node.name))
        g.nx.add_node(node_id, node=node)
    for u, v, data in graph.nx.edges(data=True):
        m = data["memlet"]
        g.nx.add_edge(u, v, memlet=Memlet(m.container, tuple(substitute_sizes(i, sizes) for i in m.index),
                                          m.connector, m.accumulate))
    return g


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
    followed by a short reduction over the chunks; how long and how many
    chunks is the target's ``Tuning`` (``split_*``)."""
    workgroups = target is not None and target.workgroup_reductions
    tuning = targets.tuning_of(target)
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
        product = matmul_shape(graph, t) if red_ranges and points >= tuning.min_tiled_outputs else None
        if product is not None:
            # tiles over its outputs beat partial sums (lowering.matmul), unless a GPU's
            # workgroups would be too few for them: split-K (lowering.kernels.split_k)
            rows, cols = (extent(next(r for r in par_ranges if r[0] == s)) for s in (product.row, product.col))
            chunks = split_k.slices(target, rows, cols, points // (rows * cols), length)
            if chunks > 1:
                _split(graph, t, par_ranges, red_ranges, chunks, length // chunks, length)
            continue
        if not red_ranges or length < tuning.split_reduction_min or points >= tuning.split_parallel_limit:
            continue
        if workgroups:
            most = tuning.split_target_workgroups if points == 1 else tuning.split_target_workgroup_points
            least = tuning.split_min_workgroup_chunk
        else:
            most, least = tuning.split_target_threads, tuning.split_min_chunk
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
        graph.add_container(partial, (chunks,) + par_shape, dtype, "transient", **notes.container_notes(two_stage=True))
        writes_1[m.connector] = (graph.access(partial, 0), (c,) + par_index, m.accumulate)
        stage_2.append((access, m, partial))
    bound = sympy.StrictLessThan(flat, length) if chunks * chunk_len != length else sympy.true
    cond = sympy.And(t.condition.xreplace(subs), bound)
    graph.remove_tasklet(t.name)
    graph.add_tasklet(f"{t.name}_stage1", ((c, 0, chunks),) + tuple(par_ranges) + ((r, 0, chunk_len),),
                      {k: v.xreplace(subs) for k, v in t.body.items()}, reads, writes_1, condition=cond,
                      source=t.source, backward=t.backward,
                      **notes.tasklet_notes({}, origin=notes.origin(t), folded=notes.folded(t),
                                            siblings=notes.siblings(t)))
    for access, m, partial in stage_2:
        v = connector_symbol("v", graph.containers[partial].dtype)
        graph.add_tasklet(f"{t.name}_stage2", tuple(par_ranges) + ((c, 0, chunks),), {m.connector: v},
                          {"v": (graph.access(partial, 0), (c,) + par_index)},
                          {m.connector: (access, m.index, m.accumulate)}, source=t.source,
                          backward=t.backward, **notes.tasklet_notes({}, origin=notes.origin(t)))


def first_stage(graph: DataflowGraph, t: Tasklet) -> bool:
    """Whether ``t`` is a first stage ``split_large_reductions`` made, over whole
    chunks (no bound on the last one): its domain is (chunk, outputs..., row)."""
    writes = graph.writes(t.name)
    return bool(writes) and t.condition is sympy.true and all(
        m.accumulate is not None and notes.two_stage(graph.containers[m.container]) for _, m in writes)


def drop_empty_tasklets(graph: DataflowGraph) -> dict[str, float]:
    """Remove the tasklets whose domain is empty (a hand-built ``k = 0:0``; the
    tracer emits none): they run no point, and a 0-extent domain has no thread
    layout.  Returns the identity fills of the prod/max/min versions that only
    they wrote, which still read as that identity (``ir.run`` does the same)."""
    fills = {}
    for t in [graph.node(n) for n in list(graph.nx.nodes)]:
        if isinstance(t, Tasklet) and t.runs_nothing:
            writes = graph.writes(t.name)
            graph.remove_tasklet(t.name)
            fills.update({a: ACCUMULATION_IDENTITY[m.accumulate] for a, m in writes
                          if m.accumulate not in (None, "sum") and not graph.writers(a)})
    return fills
