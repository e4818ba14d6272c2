"""The sd.compile_module examples run (a few steps, numpy device, small
sizes) and their symdiff-trained weights agree with torch's float64-trained
ones as closely as torch's float32 run does: examples/torch_lenet.py (no
max-pool near-tie in two steps) and examples/torch_transformer.py."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize("script, args", [
    ("torch_lenet.py", ["--steps", "2", "--batch", "4"]),
    ("torch_transformer.py", ["--steps", "3", "--batch", "4", "--length", "6", "--dim", "8", "--heads", "2"]),
], ids=["lenet", "transformer"])
def test_compile_module_example(script, args):
    pytest.importorskip("torch")
    done = subprocess.run([sys.executable, str(EXAMPLES / script), *args, "--device", "numpy"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    drifts = dict(re.findall(r"(symdiff|torch float32): max relative difference (\S+)", done.stdout))
    assert float(drifts["symdiff"]) < 1e-5 and float(drifts["torch float32"]) < 1e-5, done.stdout
