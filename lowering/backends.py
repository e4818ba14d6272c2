"""One object per device kind: what the rest of symdiff asks of a backend.

Code outside this module asks a backend questions (does it interpret the IR,
are its modules native binaries, which code-generation target is it, where do
its buffers live) instead of comparing device names: a new kind of device
(Metal, D3D12) is one more entry in ``BACKENDS`` and, for code generation, one
``lowering.targets.Target``.

* ``numpy`` runs the IR interpreter (``symdiff.ir.run``): no Slang, no plan,
  no buffers; results are numpy arrays.
* ``cpu`` is slangpy's CPU device: Slang compiled to C++ and by g++ to native
  code (``cache.optimization`` picks the g++ level, ``compiler_cache`` keeps
  the libraries on disk); its buffers are host memory.
* ``vulkan`` and ``cuda`` are GPU APIs (lavapipe is a software Vulkan: its
  target is ``targets.LAVAPIPE``, told apart by ``devices.is_software``).
"""
from __future__ import annotations

from dataclasses import dataclass

from . import devices, targets
from .slang import spy


@dataclass(frozen=True)
class Backend:
    name: str  # the device kind users name ("numpy", "cpu", "vulkan", "cuda")
    # Runs the IR interpreter: nothing is planned, generated, compiled or allocated.
    interprets: bool = False
    # Slang modules become native libraries through g++: the compile level is chosen per
    # module, and the libraries are kept on disk.
    native_binaries: bool = False

    def target(self) -> targets.Target:
        """What code generation may use here (lavapipe's own numbers on a software Vulkan)."""
        if self.interprets:
            raise ValueError(f"device {self.name!r} interprets the graph: it has no code-generation target")
        return devices.target(self.name)

    def computes_float64_transcendentals(self) -> bool:
        """Whether double-precision exp/sin/log/pow/tanh come out right (not on lavapipe)."""
        return self.interprets or self.target().float64_transcendentals

    def device(self) -> spy.Device:
        """The shared slangpy device of this kind, created on first use."""
        return devices.get_device(self.name)

    def new_buffer(self, nbytes: int) -> spy.Buffer:
        """A buffer usable by every kernel, upload and read-back of this backend."""
        return self.device().create_buffer(size=nbytes, usage=buffer_usage())


def buffer_usage() -> "spy.BufferUsage":
    """Every buffer's usage flags: kernels read and write it, and it is copied both
    ways (a function: slangpy is imported on first use, ``lowering.slang``)."""
    return (spy.BufferUsage.shader_resource | spy.BufferUsage.unordered_access
            | spy.BufferUsage.copy_source | spy.BufferUsage.copy_destination)


BACKENDS: dict[str, Backend] = {
    "numpy": Backend("numpy", interprets=True),
    "cpu": Backend("cpu", native_binaries=True),
    "vulkan": Backend("vulkan"),
    "cuda": Backend("cuda"),
}


def of(kind: str) -> Backend:
    """The backend of a resolved device kind (``devices.resolve``)."""
    try:
        return BACKENDS[kind]
    except KeyError:
        raise ValueError(f"unknown device {kind!r}: one of {', '.join(BACKENDS)}") from None
