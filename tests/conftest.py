"""Shared test set-up: make tests/corpus.py importable from every test folder, and keep the
on-disk caches out of the run.

tests/ goes at the end of ``sys.path``, and pyproject.toml's ``pythonpath = ["."]`` puts the
repository first, so plain ``pytest`` imports as ``python -m pytest`` does: tests/symdiff/ and
tests/bench/ (folders without ``__init__.py``) would otherwise be taken for namespace packages
named ``symdiff`` and ``bench`` wherever the real ones are not on the path before them
(tests/test_layout.py checks).

Tests monkeypatch planning and code generation (row lengths, worker thresholds, a printer that
writes broken Slang); an on-disk cache of lowered programs would keep what a patched generator
wrote and hand it to later tests and later runs, keyed by a graph they share.  So the suite runs
with ``SYMDIFF_DISK_CACHE=0`` unless the environment says otherwise, and
tests/lowering/test_disk_cache.py turns the caches on in a temporary directory."""
import os
import sys
from pathlib import Path

os.environ.setdefault("SYMDIFF_DISK_CACHE", "0")
sys.path.append(str(Path(__file__).parent))
