"""The records a kernel plan is made of: kernels, the steps (tasklets) each
runs, how each step reads and writes, and the plan that holds them.

Every planning pass and kernel writer reads and rewrites these records; they
live apart from the pipeline that runs the passes (``lowering.plan``), so
that a pass imports the records and never the driver.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import sympy

from symdiff.ir.graph import DataflowGraph, Memlet, Tasklet
from symdiff.ir.index_analysis import replaced, uses_connectors

from .host_products import HostProduct
from .remembered import remembered


class LoweringError(RuntimeError):
    """A graph this lowering cannot run (the message says why)."""


@remembered
def parallel_symbols(graph: DataflowGraph, tasklet: Tasklet) -> tuple[sympy.Symbol, ...]:
    """Domain symbols the writes depend on, in domain order; all of them for a
    scatter (its target is only known per point).  Remembered while planning
    (``lowering.remembered``)."""
    writes = graph.writes(tasklet.name)
    if any(uses_connectors(m.index, tasklet) for _, m in writes):
        return tasklet.index_symbols
    used = set().union(*[sympy.sympify(e).free_symbols for _, m in writes for e in m.index]) if writes else set()
    if writes and all(m.accumulate is None for _, m in writes):
        return tasklet.index_symbols  # plain writes: every point is its own thread
    return tuple(s for s in tasklet.index_symbols if s in used)


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
class HostKernel(Kernel):
    """A product the host computes between the launches of a call instead of a
    Slang kernel (``lowering.host_products``): one step, never fused with others."""

    product: HostProduct | None = None  # its operands as views, found when the step was placed


@dataclass
class Plan:
    graph: DataflowGraph  # the concrete (bound, rewritten) graph
    kernels: list[Kernel]
    stored: set[str]  # access nodes that need a buffer
    fills: dict[str, float]  # access node -> identity value to fill before each call
    overwritten: set[str] = field(default_factory=set)  # versions whose sole writer stores every element
    # version -> the older version whose buffer it is written into (lowering.in_place)
    storage: dict[str, str] = field(default_factory=dict)
    passes: tuple[str, ...] = ()  # names of the pipeline's passes that made it, in order (lowering.pipeline)

    def buffer_of(self, access: str) -> str:
        """The version whose buffer holds ``access`` (itself, unless it shares one)."""
        return self.storage.get(access, access)

    @property
    def buffers(self) -> set[str]:
        """The stored versions that hold a buffer (the others are written into one of these)."""
        return {self.buffer_of(a) for a in self.stored}


def same_point(producer: Step, w: Memlet, consumer: Step, r: Memlet) -> bool:
    """Whether the consumer reads exactly what the producer wrote at this thread."""
    if len(w.index) != len(r.index) or uses_connectors(r.index, consumer.tasklet):
        return False
    return _same_point(tuple(producer.parallel), tuple(w.index), tuple(consumer.parallel), tuple(r.index))


@functools.lru_cache(maxsize=16384)
def _same_point(producer: tuple, written: tuple, consumer: tuple, read: tuple) -> bool:
    """``same_point`` by the steps' thread ranges and the indices, cached: every trial plan places
    the same steps again."""
    axes = [sympy.Symbol(f"_t{k}", integer=True) for k in range(len(producer))]
    ps = {s: b + a for (s, b, _), a in zip(producer, axes)}
    cs = {s: b + a for (s, b, _), a in zip(consumer, axes)}
    return all(sympy.expand(replaced(a, ps) - replaced(b, cs)) == 0 for a, b in zip(written, read))
