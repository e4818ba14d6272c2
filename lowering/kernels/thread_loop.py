"""Reduction by thread loop: a point's loop runs inside its own thread.

On the CPU device the loop is cut into lanes (``Tuning.cpu_reduction_lanes``,
``cpu_storing_lanes``): g++ may not reorder float additions, so one
accumulator makes a loop-carried dependency it cannot vectorise; independent
lanes combined in a fixed order at the end keep the result deterministic.  (lavapipe vectorises across threads instead: one lane.)
The fallback loop form: it applies everywhere."""
from __future__ import annotations

from typing import Callable

from ..plan_types import Step
from .writer import COMBINE, KernelShape, KernelWriter, LoopForm


class ThreadLoop(LoopForm):
    name = "thread_loop"

    def applies(self, shape: KernelShape) -> bool:
        return True

    def loop(self, w: KernelWriter, reducing: list[Step], length: int, point: Callable[[int, str | None], None],
             storing: bool) -> None:
        """With several lanes, point ``k`` of each block of consecutive points
        adds into lane ``k`` of each accumulator, the lanes are combined in
        lane order after the last whole block, and the points past it add
        into the combined accumulators.  The lanes' start and their combination are
        written out rather than ``[ForceUnroll]`` loops: Slang emits the same C++
        (checked on conv1d_slices, layer_norm, mlp_softmax_xent and ffn_block: equal
        but for ``#line`` and one temporary's name) without unrolling 24 loops
        (conv1d_slices' C++ generation 0.21 -> 0.17 s); left as plain loops, g++ kept
        them rolled (sum_reduction large 4.4-4.6 -> 5.1-5.8 ms a call)."""
        accs = [(step, c, *w.accumulator(step, c)) for step in reducing for c in w.outputs(step.tasklet)]
        boolean = any(acc_type == "bool" for *_, acc_type in accs)
        # a loop that also computes elementwise values (a row kernel's group over a first stage's
        # chunk, reduce_fusion.chunk_producers) on the CPU device: as many lanes as a vector holds
        # floats, the lane loop left to g++'s loop vectoriser (unrolled, it vectorised at half width
        # or not at all)
        wide = storing and w.target.sequential
        tuning = w.target.tuning
        width = tuning.cpu_storing_lanes if wide else tuning.cpu_reduction_lanes if w.target.sequential else 1
        lanes = width if accs and length >= 2 * width and not boolean else 1
        start = length - length % lanes if lanes > 1 else 0  # where the single-accumulator loop begins
        if lanes > 1:
            for *_, var, acc_type in accs:
                w.emit(f"{acc_type} {var}_lanes[{lanes}];", 1)
                w.emit(" ".join(f"{var}_lanes[{lane}] = {var};" for lane in range(lanes)), 1)
            w.emit(f"{w.kept}for (int block = 0; block < {start}; block += {lanes})", 1)
            w.emit("{", 1)
            w.emit(("" if wide else "[ForceUnroll] ") + f"for (int lane = 0; lane < {lanes}; lane++)", 2)
            w.emit("{", 2)
            w.emit("int r = block + lane;", 3)
            point(3, "lane")
            w.emit("}", 2)
            w.emit("}", 1)
            for step, c, var, _ in accs:
                combined = var
                for lane in range(lanes):
                    combined = COMBINE[w.accumulation(step, c)].format(a=combined, b=f"{var}_lanes[{lane}]")
                w.emit(f"{var} = {combined};", 1)
        if start == length:
            return
        w.emit(f"{w.kept}for (int r = {start}; r < {length}; r++)", 1)
        w.emit("{", 1)
        point(2, None)
        w.emit("}", 1)


FORM = ThreadLoop()
