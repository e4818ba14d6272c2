"""A reduction's second stage run by the last workgroup of the first one's
dispatch (``lowering.last_workgroup`` plans it): lane 0 fences the
workgroup's stored partial results device-wide and counts the workgroup
done; the workgroup counting ``workgroups - 1`` is the last, and calls the
second stage's function with its lanes as threads.  Applies to a kernel the
planner gave a ``finish``: only on a target with ``single_pass_reductions``
(a device-scope fence and an integer atomic add)."""
from __future__ import annotations

from .. import targets
from .writer import GROUPSHARED, FinishForm, KernelShape, KernelWriter

LAST = "workgroup_last"  # groupshared flag: this workgroup is the last of its dispatch to finish


class LastWorkgroup(FinishForm):
    name = "last_workgroup"
    declares = GROUPSHARED

    def applies(self, shape: KernelShape) -> bool:
        return shape.kernel.finish is not None

    def tail(self, w: KernelWriter, finish: str, buffers: dict[str, str], counter: str) -> str:
        w.buffers.update(buffers)
        w.declare(self, LAST)
        done = w.buffer(counter)
        args = "".join(f", {n}" for n in sorted(buffers))
        lines = [f"// the last of the {w.threads} workgroups to finish runs {finish} over every one's partial results",
                 "DeviceMemoryBarrierWithGroupSync();",
                 "if (group_thread == 0)",
                 "{",
                 "    int before;",
                 f"    InterlockedAdd({done}[0], 1, before);",
                 f"    {LAST} = before == {w.threads - 1} ? 1 : 0;",
                 "}",
                 "GroupMemoryBarrierWithGroupSync();",
                 f"if ({LAST} == 0) return;",
                 "DeviceMemoryBarrier();  // the other workgroups' partial results, fenced before they counted",
                 f"{finish}(uint3(group_thread, 0, 0){args});"]
        return "\n".join("    " + line for line in lines)

    def declaration(self, key: str, target: targets.Target) -> str:
        """The groupshared flag ``tail`` sets in the workgroup that finished last."""
        return f"groupshared int {key};  // this workgroup finished last (lowering.last_workgroup)"


FORM = LastWorkgroup()
