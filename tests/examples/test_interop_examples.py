"""The interop examples run (few steps), and what they print holds: gradients
agree with torch's / JAX's own autodiff, training lowers the loss, and two
torch.distributed processes agree with one."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _run(script: str, *args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run([sys.executable, str(EXAMPLES / script), *args], capture_output=True, text=True,
                          timeout=600, env={**os.environ, **(env or {})})
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _number(pattern: str, text: str) -> float:
    found = re.search(pattern, text)
    assert found, f"{pattern!r} not in output:\n{text}"
    return float(found.group(1))


def _losses(text: str) -> tuple[float, float]:
    found = re.search(r"loss (\d+\.\d+) -> (\d+\.\d+)", text)
    assert found, text
    return float(found.group(1)), float(found.group(2))


def test_torch_training():
    pytest.importorskip("torch")
    out = _run("torch_training.py", "--steps", "20")
    assert _number(r"max relative difference (\S+)", out) < 1e-4
    first, last = _losses(out)
    assert last < 0.8 * first


def test_jax_example():
    pytest.importorskip("jax")
    out = _run("jax_example.py", "--steps", "10")
    assert _number(r"max relative difference (\S+)", out) < 1e-4
    first, last = _losses(out)
    assert last < 0.8 * first


def test_torch_distributed_matches_one_process():
    pytest.importorskip("torch")
    # What is under test is DDP averaging symdiff's gradients across processes: the numpy device
    # spares three processes their g++ compiles (test_torch_training covers the Slang path).
    # A worker aborted once in CI and twice in six runs on a loaded machine ("terminate called
    # without an active exception" in C++ teardown, no symdiff code compiled on the numpy device);
    # the example now meets a barrier before gloo's teardown.  One more run is allowed for that
    # abort only: a mismatch exits 1 without it and fails at once.
    for attempt in range(2):
        done = subprocess.run([sys.executable, str(EXAMPLES / "torch_distributed.py"), "--steps", "2"],
                              capture_output=True, text=True, timeout=600,
                              env={**os.environ, "SYMDIFF_DEVICE": "numpy"})
        if done.returncode == 0 or "terminate called without an active exception" not in done.stderr:
            break
    assert done.returncode == 0, done.stderr[-3000:]  # exits non-zero on a mismatch
    assert _number(r"agree to (\S+)", done.stdout) < 1e-5
