"""Settings every backend shares: which device the user asked for, and where
symdiff keeps things on disk.

The device kinds themselves, how one is created and which one ``"auto"``
means, are the backends' (``lowering.backends``): this module names none.
"""
from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "SYMDIFF_DEVICE"
CACHE_DIR_ENV = "SYMDIFF_CACHE_DIR"
DISK_CACHE_ENV = "SYMDIFF_DISK_CACHE"


class DeviceUnavailable(RuntimeError):
    """The requested backend cannot be created on this machine."""


def requested(device: str | None) -> str:
    """The device name asked for: ``None`` defers to ``$SYMDIFF_DEVICE``, then ``"auto"``."""
    return (device or os.environ.get(ENV_VAR) or "auto").lower()


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
