"""One point per thread: elementwise kernels, and reductions whose loops run
inside the point's thread (or its workgroup: the kernel's loop form).

The fallback body: every kernel can be written so.  Each point's steps run
in order at its coordinates ``t0, t1, ...``; on the CPU device a thread runs
many consecutive points (``lowering.threads``)."""
from __future__ import annotations

from .writer import BodyForm, KernelShape, KernelWriter


class PointForm(BodyForm):
    name = "point"

    def applies(self, shape: KernelShape) -> bool:
        return True

    def write(self, w: KernelWriter) -> None:
        w.frame(w.kernel.box, "t", w.steps)


FORM = PointForm()
