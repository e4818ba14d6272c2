"""The shared acceptance check (../shared/acceptance/run.py) on every device present."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

from symdiff import lowering

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT.parent / "shared" / "acceptance" / "run.py"
DEVICES = ["numpy"] + [d for d in ("cpu", "vulkan") if d in lowering.available_devices()]


@pytest.mark.skipif(not SCRIPT.exists(), reason="shared/acceptance is not beside this checkout")
@pytest.mark.parametrize("device", DEVICES)
def test_acceptance_passes(device):
    run = subprocess.run([sys.executable, str(SCRIPT), "--device", device], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert re.search(r"acceptance: (\d+)/\1 agree", run.stdout), run.stdout
