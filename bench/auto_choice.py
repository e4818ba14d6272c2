"""``python -m bench.auto_choice [--json PATH] [--kinds KIND ...]``: what
``device="auto"`` picks here, and on a machine with several GPU kinds the
probe times it picked by (``lowering.backends.choice``).

Without ``--kinds`` it asks ``auto`` itself: where it measured, the record
it kept (each kind's seconds per probe workload, failures) is reported.
``--kinds vulkan cpu`` times the probe on the kinds named whatever they are
(the rehearsal of the measurement on a machine without a GPU; the choice
``auto`` makes is not changed).  ``bench.gpu_session`` runs it first on the
GPU machine, with the cache directory in its output folder, so the
measurement is made fresh and its file comes back.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from symdiff.lowering import available_devices, backend_probe, backends, devices
from symdiff.lowering.backends import choice


def report(kinds: list[str] | None = None) -> dict[str, Any]:
    """``auto``'s pick and the measurement behind it, or (``kinds``) a measurement of those kinds."""
    available = available_devices()
    gpus = [k for k in available if backends.of(k).is_hardware_gpu()]
    if kinds:
        return {"available": available, "gpu_kinds": gpus,
                "measured": choice.measure([backends.of(k) for k in kinds], backend_probe.time_kind)}
    result: dict[str, Any] = {"available": available, "gpu_kinds": gpus, "auto": backends.auto()}
    if len(gpus) < 2:
        result["how"] = "ranked (auto_rank): fewer than two GPU kinds, nothing measured"
        return result
    at = choice.key([backends.of(k) for k in gpus])
    kept = json.loads(choice.path().read_text()) if devices.disk_cache_enabled() and choice.path().exists() else {}
    result["how"] = "measured (lowering.backend_probe)"
    result["key"], result["measured"] = at, kept.get(at)
    return result


def main(argv: list[str]) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m bench.auto_choice", description=__doc__.splitlines()[0])
    p.add_argument("--json", type=Path, help="write the result here")
    p.add_argument("--kinds", nargs="+", help="time the probe on these kinds instead of asking auto")
    p.add_argument("--cache-dir", type=Path, help="keep the choice here (the disk cache on): a fresh measurement")
    args = p.parse_args(argv)
    if args.cache_dir:
        os.environ[devices.CACHE_DIR_ENV] = str(args.cache_dir)
        os.environ[devices.DISK_CACHE_ENV] = "1"
    result = report(args.kinds)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
