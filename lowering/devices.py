"""slangpy devices: one per kind per process, chosen by name or automatically.

Creating a device costs 0.2-1.3 s here, so each kind is created once and
shared by every executable (and every test).

Which backend ``"auto"`` picks on a machine without a GPU was measured on
this 2-core machine (slangpy 0.43.1, Mesa 25 lavapipe), see ``AUTO_ORDER``.
"""
from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
from pathlib import Path

from . import targets
from .slang import spy

KINDS = ("cuda", "vulkan", "cpu", "numpy")
ENV_VAR = "SYMDIFF_DEVICE"
SOFTWARE_ADAPTERS = ("llvmpipe", "lavapipe", "swiftshader", "softpipe")

# Without a hardware GPU, the CPU device is the faster backend here, measured
# by `python -m bench` (docs/benchmarks.md, 2026-11-22, after the register-
# blocked matmuls, per-thread point loops, vectorisable float32 maths and one
# dispatch per call on the CPU device): value_and_grad geometric mean over 28
# configurations (14 workloads x 2 sizes), device-resident inputs, min times:
#
#   device        x JAX jit(value_and_grad)   cold compile
#   CPU device    4.86 (small 4.71, large 5.01)   0.57 s (g++ in every process)
#   lavapipe      9.13 (small 13.8, large 6.06)   0.18 s (on-disk shader cache)
#
# lavapipe still wins some large workloads (the 10M elementwise chain 106 vs
# 228 ms, n-body N=2048 80 vs 141 ms, conv1d 4M, atax/bicg 2048^2), the CPU
# device wins all small ones (per-dispatch cost ~50 us on lavapipe) and the
# reductions, stencils and MLPs.  So: the CPU device, then lavapipe.
# float64 programs with transcendentals never go to lavapipe (runtime.compile),
# since it gets them wrong.
AUTO_ORDER = ("cpu", "vulkan")

_lock = threading.Lock()
_devices: dict[str, spy.Device] = {}
# fd 1 belongs to the process: two threads probing at once would each restore
# the other's /dev/null, silencing stdout for good.
_probe_lock = threading.Lock()


class DeviceUnavailable(RuntimeError):
    """The requested backend cannot be created on this machine."""


CACHE_DIR_ENV = "SYMDIFF_CACHE_DIR"
DISK_CACHE_ENV = "SYMDIFF_DISK_CACHE"


def cache_dir() -> Path:
    """Per-user directory of symdiff's on-disk caches: slangpy's shader cache
    (per device kind), g++'s libraries for the CPU device (``compiler_cache``)
    and lowered programs (``disk_cache``).  ``$SYMDIFF_CACHE_DIR`` if set, else
    ``$XDG_CACHE_HOME/symdiff``, else ``~/.cache/symdiff``."""
    if os.environ.get(CACHE_DIR_ENV):
        return Path(os.environ[CACHE_DIR_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "symdiff"


def disk_cache_enabled() -> bool:
    """Whether symdiff may keep anything on disk (``SYMDIFF_DISK_CACHE`` unset,
    or not one of 0/off/false/no): read at each use, so tests can switch it."""
    return os.environ.get(DISK_CACHE_ENV, "1").strip().lower() not in ("0", "off", "false", "no")


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
def _adapters(kind: str) -> tuple[str, ...]:
    try:
        with _probe_lock, _native_stdout_silenced():
            return tuple(a.name for a in spy.Device.enumerate_adapters(getattr(spy.DeviceType, kind)))
    except Exception:  # a missing driver library raises rather than listing nothing
        return ()


def is_software(kind: str) -> bool:
    """Whether a Vulkan device here is a CPU rasteriser (lavapipe): slow doubles are wrong."""
    return kind == "vulkan" and all(any(s in a.lower() for s in SOFTWARE_ADAPTERS) for a in _adapters(kind))


def target(kind: str) -> targets.Target:
    """What a device kind here can do (``lowering.targets``); a software Vulkan
    (lavapipe) gets double-precision transcendentals wrong."""
    return targets.LAVAPIPE if is_software(kind) else targets.of(kind)


def available_devices() -> list[str]:
    """Device names that work here, best first for ``auto``'s purposes."""
    found = [k for k in ("cuda", "vulkan") if _adapters(k)]
    return found + ["cpu", "numpy"]


def get_device(kind: str) -> spy.Device:
    """The shared slangpy device of one kind (created on first use)."""
    with _lock:
        if kind not in _devices:
            spy.Logger.get().level = spy.LogLevel.fatal
            on_disk = {}
            if disk_cache_enabled():
                path = cache_dir() / kind
                path.mkdir(parents=True, exist_ok=True)
                on_disk["shader_cache_path"] = str(path)
            try:
                _devices[kind] = spy.Device(
                    type=getattr(spy.DeviceType, kind), enable_hot_reload=False,
                    compiler_options={"optimization": spy.SlangOptimizationLevel.maximal}, **on_disk)
            except Exception as exc:
                raise DeviceUnavailable(f"cannot create a slangpy {kind} device here: {exc}") from exc
        return _devices[kind]


def requested(device: str | None) -> str:
    """The device name asked for: ``None`` defers to ``$SYMDIFF_DEVICE``, then ``"auto"``."""
    return (device or os.environ.get(ENV_VAR) or "auto").lower()


def resolve(device: str | None) -> str:
    """The concrete device kind for a request; ``"auto"`` means a hardware GPU,
    else the first of ``AUTO_ORDER`` present."""
    name = requested(device)
    if name not in KINDS + ("auto",):
        raise ValueError(f"unknown device {name!r}: expected one of {('auto',) + KINDS}")
    if name != "auto":
        # the CPU device and numpy are always there: listing Vulkan adapters loaded lavapipe
        # (+51 MiB resident) into processes that only asked for device="cpu"
        if name not in ("cpu", "numpy") and name not in available_devices():
            raise DeviceUnavailable(f"device {name!r} is not available here (found {available_devices()})")
        return name
    avail = available_devices()
    if "cuda" in avail:
        return "cuda"
    if "vulkan" in avail and not is_software("vulkan"):
        return "vulkan"
    return next(k for k in AUTO_ORDER if k in avail)
