"""Single-pass long reductions: the last workgroup to finish sums the partial results.

A long reduction with few outputs is split in two stages (``plan.split_large_reductions``):
partial results per chunk, a workgroup each on GPU targets, then a one-point
kernel over the chunks.  The second kernel is one more dispatch and one more
launch of a GPU's one-thread tail, and a program of several long sums
(softplus + logsumexp: a max, a mean, a sum, a count and the max's gradient)
pays it for each.

On a target with ``single_pass_reductions`` (a device-scope memory fence and
an integer atomic add: Vulkan, CUDA) the second kernel instead runs at the end
of the first one's dispatch, in the workgroup that finishes last:

* lane 0 of each workgroup stores its chunk's partial results, fences them
  (``DeviceMemoryBarrier``) and adds one to a counter; the workgroup that
  reads back ``workgroups - 1`` is the last, and every other workgroup's
  partial results are then visible to it;
* that workgroup runs the one-point kernel's steps as that kernel would have
  (``kernels.last_workgroup_finish``: a call of its function, with the workgroup's lanes as its
  threads), so the chunks are summed in the same fixed tree whichever
  workgroup is last: deterministic;
* the counter is a one-element int32 buffer the runtime clears before each
  call (a zero fill, ``plan.fills``).

A kernel qualifies when it is a reduction's first stage run by a workgroup
per chunk (``workgroups.Layout.along_the_loop``) writing only partial results, and
the next kernel is one point (its second stage, and whatever one-point steps
joined it).  Nothing runs between them, so the order of the plan is kept.
"""
from __future__ import annotations

from symdiff.ir.graph import DataflowGraph
from symdiff.ir import tasklet_notes as notes

from . import targets
from .plan_types import Kernel
from .rowfusion import RowKernel
from .workgroups import layout


def finish_in_last_workgroup(graph: DataflowGraph, kernels: list[Kernel], target: targets.Target) -> list[Kernel]:
    """``kernels`` with each qualifying first stage given the next (one-point)
    kernel as its ``finish`` and a counter (module docstring); a new list."""
    out: list[Kernel] = []
    for kernel in kernels:
        first = out[-1] if out else None
        if first is not None and _qualifies(graph, first, kernel, target):
            counter = graph.unique_name(f"{first.steps[0].tasklet.name}_done")
            graph.add_container(counter, (1,), "int32", "transient")
            first.finish, first.counter = kernel, graph.access(counter, 0)  # an access node of its own
            continue
        out.append(kernel)
    return out


def _qualifies(graph: DataflowGraph, first: Kernel, finish: Kernel, target: targets.Target) -> bool:
    if first.finish is not None or isinstance(first, RowKernel) or isinstance(finish, RowKernel):
        return False
    if len(first.box) != 1 or finish.box != () or first.box[0] < 2:
        return False
    partial = all(notes.two_stage(graph.containers[m.container])
                  for s in first.steps for _, m in graph.writes(s.tasklet.name))
    found = layout(graph, first, target, tiled=False) if partial else None
    return found is not None and found.along_the_loop
