"""Column interchange on the CPU device: a kernel's reductions run rows
outer, the thread's points inner, one accumulator a point.

Where each step reduces over a loop, its points are neighbours along the
box's last axis (a thread's points lie in one row), and some read runs along
memory with the point while the loop strides (a column sum: layer norm's
gradient of its scale over 4096 rows walked each column 1024 floats a step,
14.2 of the call's 28.9 ms), the loads of a row then run along memory and
g++ vectorises them across the points.  Only plain reads and unconditional
reductions into the point's outputs, none read by another step."""
from __future__ import annotations

import math

import sympy

from symdiff.ir.index_analysis import extent, uses_connectors
from symdiff.ir import tasklet_notes as notes

from .writer import BodyForm, KernelShape, KernelWriter, digit, identifier, tasklet_comment


class ColumnsForm(BodyForm):
    name = "columns"

    def applies(self, shape: KernelShape) -> bool:
        k, per, grid = shape.kernel, shape.mapping.per_thread, shape.kernel.box
        fewest = shape.target.tuning.cpu_column_points  # points of a thread for its reductions to run rows outer
        if (not shape.target.sequential or shape.tiling or shape.layout or per < fewest or len(grid) < 1
                or grid[-1] % per):
            return False
        last = k.steps[0].parallel[-1][0] if k.steps and k.steps[0].parallel else None
        for step in k.steps:
            t = step.tasklet
            if (not step.loop or t.condition is not sympy.true or notes.scatter(t) is not None or not step.parallel
                    or step.parallel[-1][0] != last or any(r.producer is not None for r in step.reads)
                    or any(uses_connectors(r.memlet.index, t) for r in step.reads)
                    or not all(w.memlet.accumulate for w in step.writes)
                    or any(shape.accumulator(step, c)[1] == "bool" for c in shape.outputs(t))):
                return False
        loops = {s for step in k.steps for s, _, _ in step.loop}
        return any(r.memlet.index and sympy.sympify(r.memlet.index[-1]) == last
                   and any(sympy.sympify(e).free_symbols & loops for e in r.memlet.index[:-1])
                   for step in k.steps for r in step.reads)

    def write(self, w: KernelWriter) -> None:
        """The kernel with each reduction's loop outside the thread's points:
        one accumulator a point (``{acc}_lanes[p]``), the loads of a row along
        memory."""
        grid = w.kernel.box
        per = w.mapping.per_thread
        w.emit(w.mapping.open("lin")[0], 1)  # first: the thread's first point
        strides = [math.prod(grid[a + 1:]) for a in range(len(grid))]

        def coordinates(depth: int) -> None:
            for a, (n, stride) in enumerate(zip(grid, strides)):
                place = digit("first", stride, n, a == 0) if stride > 1 else f"first % {n} + p"
                w.emit(f"int t{a} = {place};", depth)
        for step in w.kernel.steps:
            t = step.tasklet
            pre = identifier(t.name)
            names = w.names(step, {s: f"{pre}_{identifier(s.name)}" for s, _, _ in step.parallel})
            w.emit(tasklet_comment(t) + ", rows outer", 1)
            accs = [(c, *w.accumulator(step, c)) for c in w.outputs(t)]
            for c, var, acc_type in accs:
                w.emit(f"{acc_type} {var}_lanes[{per}];", 1)
                w.emit(f"for (int p = 0; p < {per}; p++) {var}_lanes[p] = {w.identity(step, c)};", 1)
            w.emit(f"{w.kept}for (int r = 0; r < {math.prod(extent(rng) for rng in step.loop)}; r++)", 1)
            w.emit("{", 1)
            w.loop_coordinates(step, names, 2)
            w.emit(f"for (int p = 0; p < {per}; p++)", 2)
            w.emit("{", 2)
            coordinates(3)
            w.parallel_names(step, names, 3)
            w.point(step, names, 3, reducing=True, lane="p")
            w.emit("}", 2)
            w.emit("}", 1)
            w.emit(f"for (int p = 0; p < {per}; p++)", 1)
            w.emit("{", 1)
            coordinates(2)
            w.parallel_names(step, names, 2)
            outputs = w.outputs(t)
            for c, var, acc_type in accs:
                out_type = w.out_type(t, c)
                value = f"{var}_lanes[p]" if acc_type == out_type else f"{out_type}({var}_lanes[p])"
                w.emit(f"{out_type} {outputs[c]} = {value};", 2)
            w.stores(step, outputs, names, 2)
            w.emit("}", 1)


FORM = ColumnsForm()
