"""Products a Python loop repeats over slices of one array, made one batched product.

An unrolled loop such as an RNN's ``for t in range(T): h = tanh(xs[t] @ wx + h @ wh + b)``
traces ``T`` copies of the product ``xs[t] @ wx``: the same tasklet, the same
versions read, and only a constant of one index (``xs[t, i, k]``) differing.
None depends on the loop's state, so all can run at once: one tasklet over
one more domain axis, ``steps[t, i, j] += xs[t, i, k] * wx[k, j]``, whose
readers read their slice of it.  Its reverse pass then has one product for the
gradient of ``wx`` (a contraction over the step axis too) where the unrolled
graph had ``T`` accumulating into it.  On the CPU device that is one BLAS call
of ``T`` times the rows instead of ``T`` calls each way, and fewer statements
for Slang and g++ to compile (elman_rnn: 255 kernels -> 194).

Only accumulating tasklets (products, reductions) are batched: their copies
are where the work is, and an elementwise copy already fuses with its readers.
A group is batched where nothing else tells its members apart, so that the
batched tasklet computes exactly what they did: the same source line, domain,
body, condition, notes and write index (and no ``sd.custom_vjp`` call's: its
rule differentiates them as they are); reads of the same versions at the same
indices but for integer offsets that step evenly from member to member; and
each member writing a transient of its own that only tasklets read.
"""
from __future__ import annotations

from collections import defaultdict

import sympy

from . import rewrite
from . import tasklet_notes as notes
from .graph import DataflowGraph, Memlet, Tasklet, index_symbol

MIN_GROUP = 2  # copies worth one batched tasklet


def batch_products(graph: DataflowGraph) -> int:
    """Batch ``graph``'s repeated products in place (see the module docstring); how many
    groups were batched."""
    groups: dict[tuple, list[tuple[Tasklet, tuple[int, ...]]]] = defaultdict(list)
    versions: dict[str, int] = defaultdict(int)
    for a in graph.access_nodes():
        versions[a.container] += 1
    for t in graph.tasklets():
        found = _signature(graph, t, versions)
        if found is not None:
            groups[found[0]].append((t, found[1]))
    batched = 0
    for members in groups.values():
        steps = _steps(members) if len(members) >= MIN_GROUP else None
        if steps is not None:
            _batch(graph, [t for t, _ in members], steps)
            batched += 1
    return batched


def _split_offset(e: sympy.Expr) -> tuple[sympy.Expr, int]:
    """``e`` as (its non-constant part, its integer constant term)."""
    constant, rest = sympy.sympify(e).as_coeff_Add()
    if constant.is_Integer:
        return rest, int(constant)
    return sympy.sympify(e), 0


def _signature(graph: DataflowGraph, t: Tasklet, versions: dict[str, int]) -> tuple[tuple, tuple[int, ...]] | None:
    """``(what a batch's members share, the integer offsets of their reads' indices)``
    for an accumulating tasklet whose output a batch can hold (``versions``: how many
    each container has), else None."""
    writes = graph.writes(t.name)
    if t.backward or len(writes) != 1 or len(t.body) != 1 or notes.custom_vjp_call(t):
        return None  # (a user's backward rule differentiates a custom_vjp call's tasklets as they are)
    out, written = writes[0]
    container = graph.containers[written.container]
    if (written.accumulate != "sum" or container.role != "transient" or versions[container.name] != 1 or out != f"{container.name}#0"
            or len(graph.writers(out)) != 1
            or not all(isinstance(graph.node(r), Tasklet) for r, _ in graph.readers(out))):
        return None
    reads, offsets = [], []
    for access, m in graph.reads(t.name):
        parts = [_split_offset(i) for i in m.index]
        reads.append((m.connector, access, tuple(p for p, _ in parts)))
        offsets.extend(c for _, c in parts)
    key = (t.source, t.domain, tuple(t.body.items()), t.condition, container.shape, container.dtype,
           written.index, written.connector, tuple(reads), repr(sorted(t.meta.items())))
    return key, tuple(offsets)


def _steps(members: list[tuple[Tasklet, tuple[int, ...]]]) -> tuple[tuple[int, int], ...] | None:
    """Each read index offset's ``(first, step)`` from member to member (two or more), or
    None where one does not step evenly or none differs (copies of one computation)."""
    first = members[0][1]
    steps = tuple(b - a for a, b in zip(first, members[1][1]))
    for k, (_, offsets) in enumerate(members):
        if any(o != f + k * s for o, f, s in zip(offsets, first, steps)):
            return None
    if not any(steps):
        return None
    return tuple(zip(first, steps))


def _batch(graph: DataflowGraph, members: list[Tasklet], steps: tuple[tuple[int, int], ...]) -> None:
    """Replace ``members`` by one tasklet over a leading step axis, in the first one's
    place; their outputs become slices of one container."""
    head = members[0]
    outs = [graph.writes(t.name)[0] for t in members]
    first_out = graph.containers[outs[0][1].container]
    step = index_symbol(_fresh_symbol(head))
    batch = graph.add_container(graph.unique_name(f"{first_out.name}_steps"), (len(members), *first_out.shape),
                                first_out.dtype)
    batch_access = graph.access(batch.name, 0)
    reads, n = [], 0
    for access, m in graph.reads(head.name):
        index = []
        for i in m.index:
            rest, _ = _split_offset(i)
            first, stride = steps[n]
            index.append(rest + first + stride * step)
            n += 1
        reads.append((access, Memlet(m.container, tuple(index), m.connector)))
    written = outs[0][1]
    rewrite.replace_tasklet(graph, Tasklet(head.name, ((step, sympy.Integer(0), sympy.Integer(len(members))),
                                                       *head.domain),
                                           head.body, head.inputs, head.condition, head.source, head.backward,
                                           notes.tasklet_notes(head.meta, batched=tuple(t.name for t in members))))
    rewrite.set_reads(graph, head.name, reads)
    rewrite.remove_write(graph, head.name, outs[0][0])
    rewrite.add_write(graph, head.name, batch_access,
                      Memlet(batch.name, (step, *written.index), written.connector, written.accumulate))
    for k, (t, (access, m)) in enumerate(zip(members, outs)):
        for reader in {r for r, _ in graph.readers(access)}:
            rewrite.set_reads(graph, reader, [
                (batch_access, Memlet(batch.name, (sympy.Integer(k), *r.index), r.connector, r.accumulate))
                if a == access else (a, r) for a, r in graph.reads(reader)])
        if t is not head:
            graph.remove_tasklet(t.name)
        rewrite.remove_version(graph, access)
        del graph.containers[m.container]


def _fresh_symbol(t: Tasklet) -> str:
    """An index symbol name ``t``'s domain does not use."""
    used = {s.name for s in t.index_symbols}
    return next(f"i{k}" for k in range(len(used) + 1) if f"i{k}" not in used)
