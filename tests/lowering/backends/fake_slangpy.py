"""A slangpy backend module as a new device kind (Metal, D3D12) would be
written: its target, its device, its registration.  Here the kind is the
CPU device again under another name (loaded by test_registry.py)."""
from dataclasses import replace

from symdiff.lowering.backends import cpu
from symdiff.lowering.backends.registry import of, register


class CpuAgain(cpu.CpuBackend):
    name = "cpu_again"
    TARGET = replace(cpu.TARGET, name="cpu_again")

    def device(self):
        # slangpy has no device type of this name: the CPU device's own stands in
        return of("cpu").device()


BACKEND = register(CpuAgain())
