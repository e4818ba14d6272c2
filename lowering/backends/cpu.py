"""``device="cpu"``: slangpy's CPU device.  Slang is compiled to C++ and by
g++ to native code, and every thread of a dispatch runs one after another on
the calling thread; its buffers are host memory.

Its compile policy differs from the GPUs': a module's g++ level follows its
work (``optimization``), Slang's checked modules and g++'s libraries are kept
on disk (``modules_folder``, ``compiling``).
"""
from __future__ import annotations

import contextlib
import importlib.metadata
from pathlib import Path

from .. import compiler_cache, devices, targets
from ..printer import prelude
from ..slang import spy
from ..targets import Target
from .registry import register
from .slangpy_base import SlangpyBackend

TARGET = Target("cpu", sequential=True, float_atomic_add=False, polynomial_math=True, worker_threads=True,
                native_instructions=True, host_blas=True)


class CpuBackend(SlangpyBackend):
    name = "cpu"
    TARGET = TARGET

    def available(self) -> bool:
        # always there; asking slangpy for adapters would load the GPU drivers (lavapipe: +51 MiB resident)
        return True

    def auto_rank(self) -> int:
        # Without a hardware GPU the CPU device is the faster backend here, measured
        # by `python -m bench` (docs/benchmarks.md, 2026-11-22): value_and_grad
        # geometric mean over 28 configurations, device-resident inputs, min times,
        # 4.86x JAX jit (cold compile 0.57 s, g++ in every process) against lavapipe's
        # 9.13x (0.18 s, on-disk shader cache).  lavapipe still wins some large
        # workloads (the 10M elementwise chain, n-body N=2048, conv1d 4M, atax/bicg
        # 2048^2); the CPU device wins all small ones (per-dispatch cost ~50 us on
        # lavapipe) and the reductions, stencils and MLPs.  So: after a hardware GPU
        # (``cuda``, ``vulkan``), before lavapipe.
        return 2

    def _buffers_in_host_memory(self, device: spy.Device) -> bool:
        return True

    def optimization(self, source: str, work: int) -> str:
        """``maximal`` (g++ -O3: 10-35x faster kernels than -O0 on the bench
        workloads), but ``none`` for a module whose work per call is below its
        length in characters.

        A module with many kernels over few points (Python loops unrolled over
        small arrays: NPBench's ludcmp, cavity flow) spends seconds in Slang's
        C++ generation and g++ and microseconds running; there ``none`` (-O0)
        halves the compile and changes the run time little (measured on this
        2-core machine, ludcmp 8x8: first call 8.4 -> 5.3 CPU s, a call 2.1 ms
        either way; elementwise_chain 100k: 2.6 -> 89 ms a call for 0.3 s less
        compile).  Compile time grows with the source's length, run time with
        the work.  The helpers every module starts with (``printer.prelude``,
        18k characters of inline maths, emitted where used) do not count: with
        them conv1d_slices (16k points, 49k work, 52k characters) compiled at
        -O0 in 0.69 s and ran 3.85 ms a call, at -O3 0.74 s and 0.17 ms (layer
        norm 256x128: 0.46 s and 3.6 ms, 0.58 s and 0.37 ms)."""
        helpers = prelude(TARGET)
        own = len(source) - (len(helpers) if helpers in source else 0)
        return "none" if work < own else "maximal"

    def modules_folder(self) -> Path | None:
        """With the disk cache on, modules are files named by their source's
        hash, one folder per slangpy version.  Slang's front end (parsing and
        checking a module: 0.24-0.6 s of a first call here) runs again in every
        process for ``load_module_from_source``, but a module loaded by name
        from a file is kept, checked, in its session's cache folder: a second
        process loaded a 40k-character module in 0.06-0.09 s instead of
        0.47-0.51 (measured, load ~13).  The GPU kinds keep loading from the
        text (their driver's compile, not Slang's front end, is the larger cost)."""
        if not devices.disk_cache_enabled():
            return None
        try:
            version = importlib.metadata.version("slangpy")
        except importlib.metadata.PackageNotFoundError:
            version = "unknown"
        return devices.cache_dir() / "slang-modules" / version

    def compiling(self) -> contextlib.AbstractContextManager:
        """g++ goes through ``compiler_cache``'s wrapper: it adds the target's
        flags (``targets.compiler_args``) and, unless the disk cache is off,
        keeps the libraries on disk."""
        return compiler_cache.active(self.libraries_folder(), targets.compiler_args(TARGET))

    def libraries_folder(self) -> Path | None:
        """Where the g++ wrapper keeps libraries, precompiled preludes and the marks of
        libraries compiled later at -O3 (None: the disk cache is off)."""
        return devices.cache_dir() / "cpu-binaries" if devices.disk_cache_enabled() else None


BACKEND = register(CpuBackend())
