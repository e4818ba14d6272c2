"""Row kernels (``lowering.rowfusion``): thread ``t`` owns one row of the
box, and each loop group is one loop over the row running its steps point by
point; reductions' sums and one-point steps' values stay in registers for the
groups after them.  Where the row's loops are shared by a workgroup's lanes
(the workgroup-tree loop form), a group reading what other lanes stored in an
earlier group waits at a barrier first."""
from __future__ import annotations

from ..rowfusion import LoopGroup, RowKernel, reduces
from .writer import BodyForm, KernelShape, KernelWriter, tasklet_comment


class RowForm(BodyForm):
    name = "rows"

    def applies(self, shape: KernelShape) -> bool:
        return isinstance(shape.kernel, RowKernel)

    def write(self, w: KernelWriter) -> None:
        w.frame(w.kernel.box, "t", lambda: self.groups(w))

    def groups(self, w: KernelWriter) -> None:
        written: set[str] = set()
        for group in w.kernel.groups:
            if w.layout and any(r.producer is None and r.access in written for s in group.steps for r in s.reads):
                w.emit("// other lanes stored what this loop reads", 1)
                w.emit("AllMemoryBarrierWithGroupSync();", 1)
            self.group(w, group)
            written |= {wr.access for s in group.steps for wr in s.writes}

    def group(self, w: KernelWriter, group: LoopGroup) -> None:
        where = f"one loop over {group.length} points of the row" if group.shape else "once per row"
        w.emit(f"// {', '.join(s.tasklet.name for s in group.steps)}: {where}", 1)
        names = {s.tasklet.name: w.names(s, {sym: f"t{a}" if not int(b) else f"(t{a} + {int(b)})"
                                             for a, (sym, b, _) in enumerate(s.parallel)})
                 for s in group.steps}
        reducing = [s for s in group.steps if reduces(s)]
        for step in reducing:
            w.accumulators(step)

        def point(depth: int, lane: str | None) -> None:
            for step in group.steps:
                t = step.tasklet
                w.emit(tasklet_comment(t), depth)
                w.loop_coordinates(step, names[t.name], depth)
                w.point(step, names[t.name], depth, reducing=step in reducing,
                        lane=lane if step in reducing else None)
        if group.shape:
            w.hoist_loop_invariant_reads([(s, names[s.tasklet.name]) for s in group.steps])
            w.lane_loops(reducing, group.length, point, storing=len(reducing) < len(group.steps))
            w.loop_invariant.clear()
        else:
            point(1, None)
        for step in reducing:
            w.finish_accumulators(step, 1)
            w.stores(step, w.outputs(step.tasklet), names[step.tasklet.name], 1)


FORM = RowForm()
