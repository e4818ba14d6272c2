"""examples/torch_lenet.py runs (a few steps, numpy device) and its symdiff-
trained weights agree with torch's float64-trained ones as closely as torch's
float32 run does (no max-pool near-tie in two steps)."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_torch_lenet_example():
    pytest.importorskip("torch")
    done = subprocess.run([sys.executable, str(EXAMPLES / "torch_lenet.py"), "--steps", "2", "--batch", "4",
                           "--device", "numpy"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    drifts = dict(re.findall(r"(symdiff|torch float32): max relative difference (\S+)", done.stdout))
    assert float(drifts["symdiff"]) < 1e-5 and float(drifts["torch float32"]) < 1e-5, done.stdout
