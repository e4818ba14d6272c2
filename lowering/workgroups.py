"""Which kernels a workgroup runs together: cooperative reductions and rows on GPU targets.

A planned reduction loops inside its thread (``lowering.plan``): right for the
CPU device, whose threads run one after another, but on a GPU a 16M sum's
chunks were 8192 threads each summing 2048 elements in sequence, and a row
kernel gave one thread a whole softmax row (H100 profile, issue 11).  On a
target with ``workgroup_reductions`` such a kernel instead gives each of its
points a whole workgroup of ``WORKGROUP`` threads (codegen's cooperative form):

* every loop over the point's reduction or row is shared: lane ``l`` takes the
  points ``l, l + WORKGROUP, ...``, so neighbouring lanes read neighbouring
  elements where the loop runs along memory;
* each lane's partial result is combined in groupshared memory in a fixed
  binary tree (the same order on every run and every device: deterministic,
  and at least as accurate as one long sequential sum), then every lane holds
  the result, as the one thread did before;
* values of the point itself (a one-point step, a reduction's result) are
  computed by every lane alike and stored by lane 0 only.

A kernel is run this way only where that wins: its loop is long enough to feed
the lanes, and either its loop reads memory contiguously or it has so few
points that one thread per point would leave the GPU idle.  A column sum over
many columns keeps one thread per column (neighbouring threads already read
neighbouring elements there).
"""
from __future__ import annotations

import math

import sympy

from ir.graph import DataflowGraph

from . import targets
from .plan import Kernel, Step, extent
from .rowfusion import RowKernel
from .threads import GROUP_SIZE

WORKGROUP = GROUP_SIZE  # threads sharing one point's loops
MIN_LOOP = 64           # a shorter loop gives too few points a lane to pay for the tree
FEW_POINTS = 2048       # fewer points than this leave most of a GPU idle at one thread each


def cooperative(graph: DataflowGraph, kernel: Kernel, target: targets.Target, tiled: bool) -> bool:
    """Whether ``kernel`` runs one workgroup per point on ``target`` (module docstring)."""
    if not target.workgroup_reductions or tiled:
        return False
    looping = [s for s in kernel.steps if s.loop]
    if not looping or any(_boolean_accumulator(graph, s) for s in looping):
        return False
    lengths = [g.length for g in kernel.groups if g.shape] if isinstance(kernel, RowKernel) else \
        [math.prod(extent(r) for r in s.loop) for s in looping]
    if max(lengths, default=0) < MIN_LOOP:
        return False
    return kernel.threads < FEW_POINTS or all(_contiguous(graph, s) for s in looping)


def _boolean_accumulator(graph: DataflowGraph, step: Step) -> bool:
    """An any/all reduction (bool accumulators have no groupshared form here)."""
    return any(m.accumulate is not None and graph.containers[m.container].dtype == "bool"
               for _, m in graph.writes(step.tasklet.name))


def _contiguous(graph: DataflowGraph, step: Step) -> bool:
    """Whether every buffer read that moves along the step's loop moves by one
    element per step of its innermost axis (so lanes read neighbouring elements)."""
    axes = [r for r in step.loop if extent(r) != 1]
    if not axes:
        return True
    inner = axes[-1][0]
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
