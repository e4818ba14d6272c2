"""Static buffer assignment: intermediates whose lifetimes in dispatch order
do not overlap share one allocation (XLA's buffer assignment, in small).

Every stored version of a plan used to get a buffer of its own, so a backward
program held every forward and backward intermediate at once.  Here each
version's lifetime is the span of launches that bind it; versions whose spans
are disjoint take turns in one slot, sized for the largest of them.

Only versions that every call recomputes from scratch may share: the sole
writer stores every element (``plan.overwritten``) or the version is filled
with its accumulation identity before its writers run (``plan.fills``).  A
version nobody writes reads as the zeros its buffer was cleared to once, and
results are handed to the caller or read after the last kernel: those keep
buffers of their own.  A zero fill is then recorded just before the launch
that first binds its version (``first_launch``), not at the start of the
call, so the slot's previous tenant is done with it.

Launches are kernels on parallel targets; on a sequential target (slangpy's
CPU device) one launch runs a whole run of consecutive kernels, one after the
other, so lifetimes are counted in kernels there too; only a zero fill, done
by the runtime between launches, stretches a version's lifetime back to the
start of its launch.

A version may also be written into an argument's upload buffer (``upload_of``):
the buffer a host array is copied into for each call is the call's own, and
once the kernels have read the argument for the last time it is as dead as
any intermediate.  ``mean(tanh(x) * x)``'s gradient, written over the copy of
``x`` it was computed from, so took no buffer of its own: on the CPU device
the first 50M-element ``value_and_grad`` call peaked at 1.13x ``x``'s bytes
above the process before it instead of 2.13x (``bench.host_memory``).  A
caller's device array is never written: the runtime binds it in the upload
buffer's place, and the version is written into the (then unused) upload
buffer all the same.  Only versions that would otherwise get a buffer of
their own are placed there (results, mostly gradients: the caller takes the
buffer with the result, and the next call uploads into a spare), and only
where every read of the argument is provably done with each element before
the version's write lands on it (``_written_after_reads``), on a sequential
target: its kernels are C++, where two ``float*`` parameters may point to
the same memory (g++ must allow for it), while a SPIR-V compiler may assume
that two storage-buffer bindings never alias.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import ml_dtypes
import numpy as np
import sympy

from symdiff.ir.index_analysis import extent, injective_over, uses_connectors

from .codegen import KernelEntry, Module
from .plan_types import Kernel, Plan, Step
from .rowfusion import RowKernel

# bool: 4-byte words; 16-bit floats: 2-byte elements (``ir.storage``)
STORAGE = {"float32": np.float32, "float64": np.float64, "int32": np.int32, "bool": np.int32,
           "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def buffer_bytes(dtype: str, count: int) -> int:
    """A buffer's size for ``count`` elements of graph dtype ``dtype``
    (empty buffers are invalid: at least one element)."""
    return max(count, 1) * np.dtype(STORAGE[dtype]).itemsize


@dataclass
class BufferPlan:
    """Which slot holds each version, and what sharing saved."""

    slot_bytes: list[int] = field(default_factory=list)  # one allocation per slot
    slot_of: dict[str, int] = field(default_factory=dict)  # access node -> slot (shared versions only)
    own_bytes: dict[str, int] = field(default_factory=dict)  # access node -> bytes, versions with buffers of their own
    first_launch: dict[str, int] = field(default_factory=dict)  # shared version -> launch that first binds it
    upload_of: dict[str, str] = field(default_factory=dict)  # version -> argument whose upload buffer holds it
    unshared_bytes: int = 0  # what one buffer per version would hold

    @property
    def peak_bytes(self) -> int:
        """Bytes of every buffer the plan allocates (all live through a call)
        but arguments' upload buffers (a version in one, ``upload_of``, adds nothing)."""
        return sum(self.slot_bytes) + sum(self.own_bytes.values())

    @property
    def saved_bytes(self) -> int:
        return self.unshared_bytes - self.peak_bytes


def launches_of(kernels: Sequence[KernelEntry], sequential: bool) -> list[list[KernelEntry]]:
    """Kernels grouped as the runtime dispatches them: one each on a parallel
    target; runs of consecutive indices on a sequential one (one entry point
    runs a run); a product the host computes (``lowering.host_products``) is a
    launch of its own; kernels without threads are never dispatched."""
    if not sequential:
        return [[e] for e in kernels if e.threads or e.host]
    runs: list[list[KernelEntry]] = []
    for entry in kernels:
        if runs and runs[-1][-1].index + 1 == entry.index and not (entry.host or runs[-1][-1].host):
            runs[-1].append(entry)
        else:
            runs.append([entry])
    return [run for run in runs if any(e.threads or e.host for e in run)]


def assign(launches: Sequence[Sequence[KernelEntry]], nbytes: dict[str, int], shareable: set[str],
           cleared: set[str]) -> BufferPlan:
    """Slots for the versions ``nbytes`` (access -> bytes) that the call
    allocates; those in ``shareable`` may share by disjoint lifetimes.  A
    lifetime is counted in kernels, which run in order also inside one launch
    of a sequential target; a version in ``cleared`` (zero-filled by the
    runtime before a launch, not by a kernel) lives from the start of the
    launch that first binds it."""
    span: dict[str, list[int]] = {}
    launch_of: dict[str, int] = {}
    position = 0
    for n, run in enumerate(launches):
        start = position
        for entry in run:
            for access in entry.buffers.values():
                if access in nbytes:
                    if access not in span:
                        span[access] = [start if access in cleared else position, position]
                        launch_of[access] = n
                    span[access][1] = position
            position += 1
    out = BufferPlan(unshared_bytes=sum(nbytes.values()))
    ends: list[int] = []  # slot -> last kernel of its current tenant
    for access in sorted((a for a in shareable if a in span), key=lambda a: (span[a][0], -nbytes[a], a)):
        first, last = span[access]
        free = [s for s, end in enumerate(ends) if end < first]
        fits = [s for s in free if out.slot_bytes[s] >= nbytes[access]]
        if fits:
            slot = min(fits, key=lambda s: out.slot_bytes[s])
        elif free:
            slot = max(free, key=lambda s: out.slot_bytes[s])
            out.slot_bytes[slot] = nbytes[access]
        else:
            slot = len(ends)
            ends.append(last)
            out.slot_bytes.append(nbytes[access])
        ends[slot] = last
        out.slot_of[access] = slot
        out.first_launch[access] = launch_of[access]
    out.own_bytes = {a: b for a, b in nbytes.items() if a not in out.slot_of}
    return out


def plan_buffers(p: Plan, module: Module, sequential: bool) -> tuple[BufferPlan, list[list[KernelEntry]]]:
    """The buffer plan of a planned and generated program, and its launches.
    Arguments' first versions are the caller's (uploads or device arrays) and
    get no slot; results are handed over or read after the last kernel, and a
    version that is neither overwritten nor filled by every call keeps the
    zeros it was cleared to once: those keep buffers of their own, but for
    one an argument's upload buffer may hold instead (``into_uploads``)."""
    g = p.graph
    latest = {p.buffer_of(g.latest(r)) for r in g.results}
    nbytes = {}
    for access in p.buffers:  # versions written in place share their chain's buffer
        node = g.node(access)
        c = g.containers[node.container]
        if not (c.role == "argument" and node.version == 0):
            nbytes[access] = buffer_bytes(c.dtype, int(math.prod(c.shape)))
    shareable = {a for a in nbytes if a not in latest and (a in p.overwritten or a in p.fills)}
    launches = launches_of(module.kernels, sequential)
    out = assign(launches, nbytes, shareable, {a for a, v in p.fills.items() if v == 0})
    if sequential:  # (the module docstring: only C++ kernels may bind one buffer twice)
        out.upload_of = into_uploads(p, out.own_bytes, latest)
        out.own_bytes = {a: b for a, b in out.own_bytes.items() if a not in out.upload_of}
    return out, launches


def into_uploads(p: Plan, own: dict[str, int], results: set[str]) -> dict[str, str]:
    """Versions of ``own`` (access -> bytes: those with buffers of their own)
    to write into an argument's upload buffer instead, at most one an
    argument: one of the argument's size written after the kernels are done
    reading the argument (``_written_after_reads``).  Matched so that as many
    as possible find an upload (augmenting paths): in ``x * w``-shaped chains
    the gradient of ``x`` is written before the last read of ``x`` but after
    the last read of ``w``, and the gradient of ``w`` the other way round.
    An argument that is a result (``results``: returned unchanged) is read
    after the call: it is never written over."""
    g = p.graph
    reads, writes = _buffer_accesses(p)
    fits: dict[str, list[str]] = {}
    for argument in sorted(p.stored - results):
        node = g.node(argument)
        c = g.containers[node.container]
        if c.role == "argument" and node.version == 0:
            size = buffer_bytes(c.dtype, int(math.prod(c.shape)))
            fits[argument] = [v for v in sorted(own) if own[v] == size and
                              _written_after_reads(p, reads.get(argument, []), writes.get(v, []), v)]
    holder: dict[str, str] = {}  # version -> argument

    def place(argument: str, tried: set[str]) -> bool:
        for version in fits[argument]:
            if version not in tried:
                tried.add(version)
                if version not in holder or place(holder[version], tried):
                    holder[version] = argument
                    return True
        return False

    for argument in fits:
        place(argument, set())
    return holder


_Touch = tuple  # (kernel position, the kernel or its finish, step, Read or Write, whether in the finish)


def _buffer_accesses(p: Plan) -> tuple[dict[str, list[_Touch]], dict[str, list[_Touch]]]:
    """Each access node's reads from its buffer and writes, by the steps of ``p``'s kernels and finishes."""
    reads: dict[str, list[_Touch]] = {}
    writes: dict[str, list[_Touch]] = {}
    for k, top in enumerate(p.kernels):
        for kernel, finish in ((top, False), *(((top.finish, True),) if top.finish else ())):
            for step in kernel.steps:
                for r in step.reads:
                    if r.producer is None:
                        reads.setdefault(r.access, []).append((k, kernel, step, r, finish))
                for w in step.writes:
                    writes.setdefault(w.access, []).append((k, kernel, step, w, finish))
    return reads, writes


def _written_after_reads(p: Plan, reads: list[_Touch], writes: list[_Touch], version: str) -> bool:
    """Whether ``version`` (its ``writes``) can be written into the buffer of
    an argument (its ``reads``, ``_buffer_accesses``): the version's one
    writer stores every element every call (``plan.overwritten``, no fill,
    no chain of in-place versions after it), and every read of the argument
    from the buffer comes in an earlier kernel, or in the writer's kernel
    where the writer stores plainly, at the writer's own point, at the element
    it writes, and no later in the point's steps than the writer (a tasklet
    reads before it stores).  Each point's steps run in order in one thread
    in a kernel without loops (the point form) and in a row kernel's loop
    group (``lowering.kernels.rows``), where the thread owning the row runs
    its groups one after the other: a read in an earlier group of the row, at
    the element the writer stores at the same loop point, is done before the
    writer's group starts.  The write's index is injective, so no other point
    reads or writes that element."""
    if (version not in p.overwritten or version in p.fills or version in p.storage
            or version in p.storage.values() or len(writes) != 1):
        return False
    at, kernel, writer, write, finish = writes[0]
    late = [(k, step, r, fin) for k, _, step, r, fin in reads if k >= at]
    if not late:
        return True  # every read in an earlier kernel
    if (finish or write.memlet.accumulate is not None or uses_connectors(write.memlet.index, writer.tasklet)
            or any(k > at or fin for k, _, _, fin in late)):
        return False
    if isinstance(kernel, RowKernel):  # (loop group, step in it)
        order = {id(s): (n, m) for n, group in enumerate(kernel.groups) for m, s in enumerate(group.steps)}
    elif type(kernel) is Kernel and not any(s.loop for s in kernel.steps):
        order = {id(s): (0, m) for m, s in enumerate(kernel.steps)}
    else:
        return False  # tiles, lanes or a host product: no point order to rely on
    if not all(id(step) in order and order[id(step)] <= order[id(writer)]
               and _same_element(writer, write.memlet.index, step, r.memlet.index) for _, step, r, _ in late):
        return False
    index, axes = _at_point(writer, write.memlet.index)
    return injective_over(index, [(a, 0, n) for a, n in axes])


def _at_point(step: Step, index: tuple) -> tuple[list, list[tuple[sympy.Symbol, int]]]:
    """``index`` (of one of ``step``'s memlets) at the coordinates of the
    point running it: parallel axis ``a`` is ``begin + _t<a>`` (the thread),
    the ``k``-th loop axis wider than one point ``begin + _l<k>`` (the row
    loop's counter, ``KernelWriter.loop_coordinates``), a one-point loop axis
    its begin; and those coordinates with their extents."""
    subs, axes = {}, []
    for a, (s, b, e) in enumerate(step.parallel):
        axis = sympy.Symbol(f"_t{a}", integer=True)
        subs[s] = sympy.sympify(b) + axis
        axes.append((axis, extent((s, b, e))))
    for s, b, e in step.loop:
        if extent((s, b, e)) == 1:
            subs[s] = sympy.sympify(b)
            continue
        axis = sympy.Symbol(f"_l{len(axes) - len(step.parallel)}", integer=True)
        subs[s] = sympy.sympify(b) + axis
        axes.append((axis, extent((s, b, e))))
    return [sympy.sympify(i).xreplace(subs) for i in index], axes


def _same_element(writer: Step, written: tuple, reader: Step, read: tuple) -> bool:
    """Whether ``reader`` reads, at each point the writer runs at, the element the writer stores there."""
    if len(written) != len(read) or uses_connectors(read, reader.tasklet):
        return False
    w, w_axes = _at_point(writer, written)
    r, r_axes = _at_point(reader, read)
    return w_axes == r_axes and all(sympy.expand(a - b) == 0 for a, b in zip(w, r))
