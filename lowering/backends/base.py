"""What the rest of symdiff asks of a backend: one subclass per device kind.

Code outside ``lowering.backends`` asks these questions instead of comparing
device names, so a new kind (Metal, D3D12) is one module that subclasses
``Backend`` (or ``slangpy_base.SlangpyBackend``) and registers an instance
(``registry.register``).  The two families answer different halves:

* an interpreter (``interprets``) runs the IR itself (``run``): nothing is
  planned, generated, compiled or allocated, and results are numpy arrays;
* a code-generating backend has a ``target()`` for the planner and code
  generator, a device, buffers, and a compile policy
  (``slangpy_base.SlangpyBackend``).
"""
from __future__ import annotations

from pathlib import Path

from ..targets import Target


class Backend:
    """A device kind: its capabilities and how ``auto`` ranks it."""

    # The device kind users name (``device="cpu"``), unique in the registry.
    name: str = ""
    # Runs the IR interpreter: nothing is planned, generated, compiled or allocated.
    interprets: bool = False
    # What planning and code generation may use on this kind's hardware
    # (``targets.of(name)``); None for an interpreter.
    TARGET: Target | None = None

    def available(self) -> bool:
        """Whether this kind can be used on this machine (asking must stay cheap:
        the CPU device's answer loads no GPU driver)."""
        return True

    def auto_rank(self) -> int | None:
        """Where this kind stands when the user asks for ``"auto"`` (the lowest
        available rank wins), or None if ``auto`` never picks it."""
        return None

    def is_software(self) -> bool:
        """Whether this kind runs here as a CPU rasteriser standing in for a GPU (lavapipe)."""
        return False

    def is_hardware_gpu(self) -> bool:
        """Whether this kind runs on a GPU here.  Where ``auto`` may pick more
        than one such kind (CUDA and Vulkan on one card), it times a probe on
        each instead of trusting ``auto_rank`` (``backends.choice``)."""
        return False

    def identity(self) -> str:
        """What a measured choice between kinds is keyed by: the kind, and for a
        device its adapters and driver, so a new card or driver measures again."""
        return self.name

    def target(self) -> Target:
        """What code generation may use on this machine (lavapipe's own numbers
        on a software Vulkan)."""
        if self.TARGET is None:
            raise ValueError(f"device {self.name!r} interprets the graph: it has no code-generation target")
        return self.TARGET

    def computes_float64_transcendentals(self) -> bool:
        """Whether double-precision exp/sin/log/pow/tanh come out right here (not on lavapipe)."""
        return self.interprets or self.target().float64_transcendentals

    def orders_colliding_writes(self) -> bool:
        """Whether colliding float updates already sum in one fixed order on every run, so that
        ``deterministic=True`` needs no owner-computes rewrite (``lowering.deterministic``): the
        interpreter's (numpy, in iteration order) and a sequential target's (its threads run one
        after another, and a kernel with colliding writes is never split over worker threads,
        ``KernelEntry.independent``).  The rewrite costs target elements x writer iterations: an
        embedding bag's reverse over a 1k-row table ran 24 ms a call on the CPU device with it and
        0.1 ms without."""
        return self.interprets or self.target().sequential

    def libraries_folder(self) -> "Path | None":
        """Where compiled libraries are kept on disk by symdiff itself (the CPU device's g++ wrapper), or None."""
        return None

    def host_memory(self) -> bool:
        """Whether this kind's arrays are host memory this process can address,
        so that results and DLPack exports are views (``lowering.dlpack``)."""
        return False
