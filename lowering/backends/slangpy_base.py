"""What every slangpy backend shares: its one device per process, buffers,
the read-back buffer, and the compile policy the kinds other than the CPU
device keep (slangpy's own, at full optimisation).

Creating a device costs 0.2-1.3 s here, so each kind's is created once and
shared by every executable (and every test).
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import sys
import threading
from pathlib import Path

import numpy as np

from .. import devices
from ..slang import spy
from .base import Backend

_lock = threading.Lock()
_devices: dict[str, spy.Device] = {}
_owners: dict[int, "SlangpyBackend"] = {}  # id(device) -> its backend (devices live as long as the process)
# fd 1 belongs to the process: two threads probing at once would each restore
# the other's /dev/null, silencing stdout for good.
_probe_lock = threading.Lock()


@contextlib.contextmanager
def _native_stdout_silenced():
    """Probing CUDA without a driver makes slangpy's native code print
    "rhiCudaDriverApiInit(): could not find symbol ..." to fd 1; users asked
    for nothing CUDA, so that probe stays quiet."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


@functools.lru_cache(maxsize=None)
def adapter_descriptions(kind: str) -> tuple[str, ...]:
    """The adapters slangpy lists for device type ``kind`` (none where its driver
    is missing), each as its name, PCI vendor:device ids and LUID (Mesa writes
    its version there)."""
    try:
        with _probe_lock, _native_stdout_silenced():
            found = spy.Device.enumerate_adapters(getattr(spy.DeviceType, kind))
            return tuple(f"{a.name} [{a.vendor_id:04x}:{a.device_id:04x} {bytes(a.luid).hex()}]" for a in found)
    except Exception:  # a missing driver library raises rather than listing nothing
        return ()


def adapters(kind: str) -> tuple[str, ...]:
    """Names of the adapters slangpy lists for device type ``kind``."""
    return tuple(d.rsplit(" [", 1)[0] for d in adapter_descriptions(kind))


def driver_version() -> str:
    """The GPU kernel driver's version where Linux states it (NVIDIA's, whose
    CUDA and Vulkan drivers come with it), else ""."""
    try:
        with open("/proc/driver/nvidia/version") as f:
            return f.readline().strip()
    except OSError:
        return ""


def buffer_usage() -> "spy.BufferUsage":
    """Every buffer's usage flags: kernels read and write it, and it is copied both
    ways (a function: slangpy is imported on first use, ``lowering.slang``)."""
    return (spy.BufferUsage.shader_resource | spy.BufferUsage.unordered_access
            | spy.BufferUsage.copy_source | spy.BufferUsage.copy_destination)


def owner(device: spy.Device) -> "SlangpyBackend | None":
    """The backend that created ``device`` (None for a device made elsewhere)."""
    return _owners.get(id(device))


class SlangpyBackend(Backend):
    """A device kind slangpy drives (``spy.DeviceType`` of the same name)."""

    def __init__(self) -> None:
        self._host_memory: bool | None = None

    def available(self) -> bool:
        return bool(adapter_descriptions(self.name))

    def identity(self) -> str:
        parts = [f"{self.name}: {'; '.join(adapter_descriptions(self.name))}", driver_version(),
                 f"slangpy {spy.__version__}"]
        return ", ".join(part for part in parts if part)

    def device(self) -> spy.Device:
        """The shared slangpy device of this kind, created on first use (with
        slangpy's shader cache on disk unless the disk cache is off)."""
        with _lock:
            if self.name not in _devices:
                spy.Logger.get().level = spy.LogLevel.fatal
                on_disk = {}
                if devices.disk_cache_enabled():
                    path = devices.cache_dir() / self.name
                    path.mkdir(parents=True, exist_ok=True)
                    on_disk["shader_cache_path"] = str(path)
                try:
                    made = spy.Device(
                        type=getattr(spy.DeviceType, self.name), enable_hot_reload=False,
                        compiler_options={"optimization": spy.SlangOptimizationLevel.maximal}, **on_disk)
                except Exception as exc:
                    raise devices.DeviceUnavailable(f"cannot create a slangpy {self.name} device here: {exc}") from exc
                _devices[self.name] = made
                _owners[id(made)] = self
            return _devices[self.name]

    def new_buffer(self, nbytes: int) -> spy.Buffer:
        """A buffer usable by every kernel, upload and read-back of this backend."""
        return self.device().create_buffer(size=nbytes, usage=buffer_usage())

    def new_readback_buffer(self, nbytes: int) -> spy.Buffer:
        """Host-visible memory that a call's results are copied into and read from."""
        return self.device().create_buffer(size=nbytes, usage=spy.BufferUsage.copy_destination,
                                           memory_type=spy.MemoryType.read_back)

    def host_memory(self) -> bool:
        if self._host_memory is None:
            self._host_memory = self._buffers_in_host_memory(self.device())
        return self._host_memory

    def _buffers_in_host_memory(self, device: spy.Device) -> bool:
        """``host_memory`` for this kind, asked once: a GPU's addresses are never dereferenced."""
        return False

    # -- the compile policy (``lowering.cache``) --

    def optimization(self, source: str, work: int) -> str:
        """The Slang optimisation level for a module doing ``work`` points per call."""
        return "maximal"

    def modules_folder(self) -> Path | None:
        """Where this kind's modules are written as files and loaded by name
        (Slang keeps their checked front end there), or None: loaded from the text."""
        return None

    def compiling(self) -> contextlib.AbstractContextManager:
        """What surrounds compiling a module (the CPU device's g++ wrapper)."""
        return contextlib.nullcontext()


def _mapped_writable(address: int, size: int) -> bool:
    """Whether ``[address, address + size)`` lies in one read-write mapping of this process (Linux)."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                span, perms = line.split()[:2]
                lo, hi = (int(v, 16) for v in span.split("-"))
                if lo <= address and address + size <= hi:
                    return perms.startswith("rw")
    except OSError:
        pass
    return False


def addresses_are_host_pointers(device: spy.Device) -> bool:
    """Whether a buffer's device address on ``device`` is its host pointer: a
    probe buffer's address is mapped here for reading and writing, holds the
    buffer's bytes, and a write through it reaches the buffer."""
    pattern = np.arange(64, dtype=np.uint32) * np.uint32(2654435761)
    try:
        buffer = device.create_buffer(size=pattern.nbytes, data=pattern,
                                      usage=spy.BufferUsage.shader_resource | spy.BufferUsage.copy_source)
        address = buffer.device_address
        if not address or not _mapped_writable(address, pattern.nbytes):
            return False
        device.wait()
        if ctypes.string_at(address, pattern.nbytes) != pattern.tobytes():
            return False
        ctypes.memmove(address, (~pattern).tobytes(), pattern.nbytes)
        return bool(np.array_equal(buffer.to_numpy().view(np.uint32), ~pattern))
    except Exception:  # no device addresses on this driver
        return False
