"""Reduction by workgroup tree: a point's loops shared by the lanes of a
workgroup (``lowering.workgroups`` finds the layout), their partial results
combined in a fixed binary tree in groupshared memory, the tree's steps
within one wave as wave shuffles where the target has them (same tree, same
bits).  Applies where the target runs a workgroup's threads together and the
kernel's loops are long enough to feed the lanes (``workgroups.layout``)."""
from __future__ import annotations

from typing import Callable

from .. import targets
from ..plan_types import Step
from .writer import COMBINE, GROUPSHARED, KernelShape, KernelWriter, LoopForm


def scratch(acc_type: str) -> str:
    """The groupshared array a workgroup combines ``acc_type`` partial results in."""
    return f"workgroup_{acc_type}"


class WorkgroupTree(LoopForm):
    name = "workgroup_tree"
    thread = "global_thread"
    declares = GROUPSHARED

    def applies(self, shape: KernelShape) -> bool:
        return shape.target.workgroup_reductions and shape.layout is not None

    def enter(self, w: KernelWriter) -> None:
        """``lin`` (this thread's point) and ``lane`` (its share of the point's
        loops) from its place in the workgroup: ``layout.points`` neighbouring
        points, ``layout.lanes`` lanes each.  Threads of a last, partial
        workgroup past the final point redo it but store nothing (``spare``):
        they must still reach every barrier."""
        per, size = w.layout.points, w.layout.size
        w.emit(f"int group_thread = global_thread % {size};", 1)
        if per == 1:
            w.emit(f"int lin = global_thread / {size};", 1)
            w.emit("int lane = group_thread;", 1)
            return
        w.emit(f"int point = global_thread / {size} * {per} + group_thread % {per};", 1)
        w.emit(f"int lin = min(point, {w.threads - 1});", 1)
        w.emit(f"int lane = group_thread / {per};", 1)

    def store_conditions(self, w: KernelWriter) -> list[str]:
        """A value every lane of a workgroup holds alike is stored by lane 0;
        a spare thread (``enter``) stores nothing."""
        own = "lane == 0" if not w.per_lane else None
        spare = f"point < {w.threads}" if w.layout.points > 1 and w.threads % w.layout.points else None
        return [c for c in (own, spare) if c]

    def loop(self, w: KernelWriter, reducing: list[Step], length: int, point: Callable[[int, str | None], None],
             storing: bool) -> None:
        """Lane ``l`` runs points ``l``, ``l + lanes``, ... and each
        reducing step's accumulators are then combined over the lanes
        (``combine_lanes``)."""
        w.emit(f"{w.kept}for (int r = lane; r < {length}; r += {w.layout.lanes})", 1)
        w.emit("{", 1)
        w.per_lane = True
        point(2, None)
        w.per_lane = False
        w.emit("}", 1)
        for step in reducing:
            for c in w.outputs(step.tasklet):
                self.combine_lanes(w, *w.accumulator(step, c), w.accumulation(step, c))

    def combine_lanes(self, w: KernelWriter, acc: str, acc_type: str, op: str) -> None:
        """Every lane's ``acc`` combined in a fixed binary tree in groupshared
        memory (lane l with lane l + width, halving width), the result in every
        lane's ``acc``.  The last barrier lets the next tree reuse the scratch.
        With wave operations the steps narrower than a wave are ``wave_tree``'s."""
        array = scratch(acc_type)
        per = w.layout.points  # a point's lanes sit ``per`` apart in the workgroup
        # a point's lanes are neighbouring threads, so the tree's last steps stay within a wave
        waves = w.target.wave_operations and per == 1
        w.declare(self, acc_type)
        w.emit(f"// {acc}: the lanes' partial results combined in a fixed tree", 1)
        w.emit(f"{array}[group_thread] = {acc};", 1)
        w.emit("GroupMemoryBarrierWithGroupSync();", 1)
        if waves:
            w.emit(f"int {acc}_wave = min(int(WaveGetLaneCount()), {w.layout.lanes});", 1)
        last = f"{acc}_wave" if waves else "1"
        w.emit(f"for (int width = {w.layout.lanes // 2}; width >= {last}; width /= 2)", 1)
        w.emit("{", 1)
        partner = f"{array}[group_thread + width{f' * {per}' if per > 1 else ''}]"
        combined = COMBINE[op].format(a=f"{array}[group_thread]", b=partner)
        w.emit(f"if (lane < width) {array}[group_thread] = {combined};", 2)
        w.emit("GroupMemoryBarrierWithGroupSync();", 2)
        w.emit("}", 1)
        if waves:
            self.wave_tree(w, acc, array, op)
        else:
            w.emit(f"{acc} = {array}[{f'group_thread % {per}' if per > 1 else '0'}];", 1)
        w.emit("GroupMemoryBarrierWithGroupSync();", 1)

    def wave_tree(self, w: KernelWriter, acc: str, array: str, op: str) -> None:
        """The tree's steps narrower than a wave (``combine_lanes``), in
        registers: every wave loads the tree's first ``<acc>_wave`` partial
        results, and wave lane ``j`` combines with lane ``j ^ width``, the lower
        lane's value first: lane ``j < width`` then computes exactly what the
        tree's lane ``j`` does, and its partner the same bits, so every lane of
        every wave ends with the tree's result, bit for bit, whatever the wave
        size (no broadcast needed; the order is the groupshared tree's)."""
        w.emit(f"int {acc}_lane = int(WaveGetLaneIndex()) % {acc}_wave;", 1)
        w.emit(f"{acc} = {array}[{acc}_lane];", 1)
        w.emit(f"for (int width = {acc}_wave / 2; width > 0; width /= 2)", 1)
        w.emit("{", 1)
        w.emit(f"let partner = WaveReadLaneAt({acc}, int(WaveGetLaneIndex()) ^ width);", 2)
        lower_first = COMBINE[op].format(a=acc, b="partner")
        upper = COMBINE[op].format(a="partner", b=acc)
        w.emit(f"{acc} = ({acc}_lane & width) != 0 ? {upper} : {lower_first};", 2)
        w.emit("}", 1)

    def declaration(self, key: str, target: targets.Target) -> str:
        """The groupshared array of ``key`` (an accumulator's type) that ``combine_lanes``
        combines a workgroup's partial results in, one element a thread."""
        return f"groupshared {key} {scratch(key)}[{target.tuning.group_size}];"


FORM = WorkgroupTree()
