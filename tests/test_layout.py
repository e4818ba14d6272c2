"""tests/ mirrors the packages (tests/symdiff/, tests/bench/, ...), and those folders have
no ``__init__.py``: wherever the real package is not on ``sys.path`` ahead of them, Python
takes the test folder for a namespace package of the same name and ``sd.f32`` is missing.
Plain ``pytest`` (no current directory on the path) must import what ``python -m pytest``
imports; tests/conftest.py and pyproject.toml's ``pythonpath`` see to it."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
ROOT = TESTS.parent
MIRRORED = sorted(p.name for p in TESTS.iterdir()
                  if p.is_dir() and (ROOT / p.name / "__init__.py").exists())


def test_some_folders_mirror_a_package():
    assert {"symdiff", "bench"} <= set(MIRRORED), MIRRORED


@pytest.mark.parametrize("name", MIRRORED)
def test_a_mirrored_name_imports_the_package_not_the_test_folder(name):
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.origin is not None, f"{name} resolves to a namespace package"
    assert TESTS not in Path(spec.origin).parents, f"{name} imports from {spec.origin}"


def test_plain_pytest_imports_the_packages_in_a_fresh_process():
    """``python -P`` leaves the current directory off ``sys.path``, as the ``pytest`` script
    does; test_gradcheck's folder conftest is then the first to import ``symdiff``, and
    tests/bench needs the repository's ``bench``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run([sys.executable, "-P", "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                          "tests/symdiff/test_gradcheck.py", "tests/bench/test_harness.py"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "error" not in run.stdout.splitlines()[-1], run.stdout[-3000:]
