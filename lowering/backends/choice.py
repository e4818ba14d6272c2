"""Which GPU kind ``"auto"`` means where several drive the same machine's GPUs.

CUDA and Vulkan on one NVIDIA card both run every program; which is faster
depends on the card, the driver and symdiff's own kernels (on an H100 at
de37a76 CUDA was 2x NVIDIA Vulkan on memory-bound rows, and per-call overhead
0.24 against 1.6 ms), so no fixed rank stays right.  Here each candidate runs
a small fixed probe once (``lowering.backend_probe``: a matrix product and a
memory-bound kernel through symdiff's own pipeline); the kind with the lowest
geometric mean of the probe's times wins.  The outcome is kept on disk, in
``devices.cache_dir() / CHOICE_FILE``, keyed by the candidates' identities
(adapters, driver version, slangpy version: ``Backend.identity``), so a
machine measures once and again only when its cards or drivers change.  With
the disk cache off (``SYMDIFF_DISK_CACHE=0``, as in the test suite) nothing
is measured and ``auto_rank`` decides: every process (every test worker)
would otherwise pay the probe's compiles.

A kind whose probe fails is left out of the choice (its error is kept with
the measurement); if every probe fails, ``auto`` falls back on ``auto_rank``.
"""
from __future__ import annotations

import json
import math
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Mapping

from .. import devices
from .base import Backend

CHOICE_FILE = "backend_choice.json"

# A device kind -> seconds per probe workload (the probe's names -> min time).
Probe = Callable[[str], Mapping[str, float]]

_lock = threading.Lock()
_known: dict[str, dict] = {}  # key -> measurement, this process


def key(candidates: list[Backend]) -> str:
    """What a measurement between ``candidates`` is kept under."""
    return " | ".join(sorted(backend.identity() for backend in candidates))


def path() -> Path:
    """The file measured choices are kept in."""
    return devices.cache_dir() / CHOICE_FILE


def fastest(candidates: list[Backend], probe: Probe) -> str | None:
    """The kind among ``candidates`` that ran ``probe`` fastest, measured now
    or read from an earlier measurement with the same ``key``; None where no
    candidate's probe ran, or the disk cache is off."""
    if not devices.disk_cache_enabled():
        return None
    names = {backend.name for backend in candidates}
    at = key(candidates)
    with _lock:
        record = _known.get(at) or _stored(at)
        if record is None or record.get("chosen") not in names | {None}:
            record = measure(candidates, probe)
            _store(at, record)
        _known[at] = record
    return record["chosen"]


def measure(candidates: list[Backend], probe: Probe) -> dict:
    """Run ``probe`` on each candidate: ``{"chosen", "seconds", "failed", "measured"}``."""
    seconds: dict[str, dict[str, float]] = {}
    failed: dict[str, str] = {}
    for backend in candidates:
        try:
            times = {workload: float(t) for workload, t in probe(backend.name).items()}
        except Exception as exc:  # a kind that cannot run the probe is not chosen
            failed[backend.name] = f"{type(exc).__name__}: {exc}"[:500]
            continue
        if not times or not all(t > 0 and math.isfinite(t) for t in times.values()):
            failed[backend.name] = f"the probe gave no usable times: {times}"
            continue
        seconds[backend.name] = times
    chosen = min(seconds, key=lambda name: score(seconds[name]), default=None)
    return {"chosen": chosen, "seconds": seconds, "failed": failed,
            "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def score(times: Mapping[str, float]) -> float:
    """One number per kind, lower is faster: the geometric mean of its probe times."""
    return math.exp(sum(math.log(t) for t in times.values()) / len(times))


def forget() -> None:
    """Drop this process's measurements (the file stays): for tests."""
    with _lock:
        _known.clear()


def _stored(at: str) -> dict | None:
    try:
        record = json.loads(path().read_text()).get(at)
    except (OSError, ValueError, AttributeError):  # none yet, or unreadable: measure again
        return None
    return record if isinstance(record, dict) and "chosen" in record else None


def _store(at: str, record: dict) -> None:
    """Add ``record`` to the file under ``at``, atomically (other processes may read it meanwhile)."""
    file = path()
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        try:
            kept = json.loads(file.read_text())
            kept = kept if isinstance(kept, dict) else {}
        except (OSError, ValueError):
            kept = {}
        kept[at] = record
        with tempfile.NamedTemporaryFile("w", dir=file.parent, suffix=".tmp", delete=False) as out:
            json.dump(kept, out, indent=1, sort_keys=True)
        os.replace(out.name, file)
    except OSError:  # a read-only cache directory: the choice holds for this process only
        pass
