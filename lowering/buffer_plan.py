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
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from .codegen import KernelEntry, Module
from .plan_types import Plan

STORAGE = {"float32": np.float32, "float64": np.float64, "int32": np.int32, "bool": np.int32}  # bool: 4-byte words


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
    unshared_bytes: int = 0  # what one buffer per version would hold

    @property
    def peak_bytes(self) -> int:
        """Bytes of every buffer the plan allocates (all live through a call)."""
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
    zeros it was cleared to once: those keep buffers of their own."""
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
    return assign(launches, nbytes, shareable, {a for a, v in p.fills.items() if v == 0}), launches
