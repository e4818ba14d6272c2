"""Which kernels a workgroup runs together: cooperative reductions and rows on GPU targets.

A planned reduction loops inside its thread (``lowering.plan``): right for the
CPU device, whose threads run one after another, but on a GPU a 16M sum's
chunks were 8192 threads each summing 2048 elements in sequence, and a row
kernel gave one thread a whole softmax row (H100 profile, issue 11).  On a
target with ``workgroup_reductions`` such a kernel instead shares each
point's loops between several threads of a workgroup of ``Tuning.group_size``
(the workgroup-tree kernel form, ``lowering.kernels.workgroup_tree``), in one
of two layouts (the numbers are the default ``Tuning``'s, ``lowering.targets``):

* **along the loop**: a workgroup per point, lane ``l`` of 256 taking the loop's
  points ``l, l + 256, ...``: neighbouring lanes read neighbouring elements
  where the loop runs along memory (a row sum, a softmax row, a long sum's chunk);
* **across points**: 32 neighbouring points per workgroup, 8 lanes each: where
  the loop strides through memory but neighbouring points are neighbouring
  elements (a column sum, a layer norm's gain gradient), the 32 threads of a
  lane read 32 neighbouring elements, and 8 lanes give each point 8x the
  parallelism one thread had;
* each lane's partial result is combined in groupshared memory in a fixed
  binary tree (the same order on every run and every device: deterministic,
  and at least as accurate as one long sequential sum; the steps within one
  wave as wave shuffles where the target has them, in the same order), then
  every lane holds the result, as the one thread did before;
* values of the point itself (a one-point step, a reduction's result) are
  computed by every lane alike and stored by lane 0 only.

A kernel is run this way only where its loop is long enough to feed the lanes
(``Tuning.workgroup_min_loop``); along the loop where the loop reads memory
contiguously or there are so few points that one thread per point would leave
the GPU idle (``Tuning.workgroup_few_points``), else across points
where neighbouring points read neighbouring elements (not for row kernels);
otherwise it keeps one thread per point.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import sympy

from symdiff.ir.graph import DataflowGraph
from symdiff.ir.index_analysis import extent

from . import targets
from .plan_types import Kernel, Step
from .rowfusion import RowKernel


@dataclass(frozen=True)
class Layout:
    """How a workgroup's threads cover a kernel's points: ``points``
    neighbouring points, ``lanes`` threads sharing each one's loops."""

    points: int
    lanes: int

    @property
    def size(self) -> int:
        """Threads of a workgroup (the target's ``Tuning.group_size``)."""
        return self.points * self.lanes

    @property
    def along_the_loop(self) -> bool:
        """A workgroup per point, all its lanes sharing the point's loops."""
        return self.points == 1

    def threads(self, points: int) -> int:
        """Threads dispatched for ``points`` points: whole workgroups."""
        return -(-points // self.points) * self.size


def layout(graph: DataflowGraph, kernel: Kernel, target: targets.Target, tiled: bool) -> Layout | None:
    """How ``kernel``'s points share workgroups on ``target``, or None: a
    thread per point (module docstring)."""
    if not target.workgroup_reductions or tiled:
        return None
    looping = [s for s in kernel.steps if s.loop]
    if not looping or any(_boolean_accumulator(graph, s) for s in looping):
        return None
    lengths = [g.length for g in kernel.groups if g.shape] if isinstance(kernel, RowKernel) else \
        [math.prod(extent(r) for r in s.loop) for s in looping]
    tuning = target.tuning
    if max(lengths, default=0) < tuning.workgroup_min_loop:
        return None
    if kernel.threads < tuning.workgroup_few_points or all(_contiguous(graph, s, _inner_loop(s)) for s in looping):
        return Layout(1, tuning.group_size)
    if not isinstance(kernel, RowKernel) and all(_contiguous(graph, s, _inner_point(s)) for s in kernel.steps):
        across = tuning.workgroup_across_points
        return Layout(across, tuning.group_size // across)
    return None


def _boolean_accumulator(graph: DataflowGraph, step: Step) -> bool:
    """An any/all reduction (bool accumulators have no groupshared form here)."""
    return any(m.accumulate is not None and graph.containers[m.container].dtype == "bool"
               for _, m in graph.writes(step.tasklet.name))


def _inner_loop(step: Step):
    axes = [r[0] for r in step.loop if extent(r) != 1]
    return axes[-1] if axes else None


def _inner_point(step: Step):
    return step.parallel[-1][0] if step.parallel else None


def _contiguous(graph: DataflowGraph, step: Step, inner) -> bool:
    """Whether every buffer read that moves with the symbol ``inner`` moves by
    one element per step of it (so threads stepping it read neighbouring elements)."""
    if inner is None:
        return True
    at = {s: b for s, b, _ in step.parallel + step.loop}
    conns = set(step.tasklet.inputs.values())
    for r in step.reads:
        if r.producer is not None:
            continue
        shape = graph.containers[r.memlet.container].shape
        strides = [math.prod(int(d) for d in shape[k + 1:]) for k in range(len(shape))]
        flat = sum((sympy.sympify(i) * s for i, s in zip(r.memlet.index, strides)), sympy.Integer(0))
        if flat.free_symbols & conns or inner not in flat.free_symbols:
            continue  # a gather, or a read the loop does not move
        step_size = flat.xreplace({**at, inner: at[inner] + 1}) - flat.xreplace(at)
        if step_size != 1:
            return False
    return True
