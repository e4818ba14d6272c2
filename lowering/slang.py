"""slangpy, imported when Slang is first used rather than at ``import symdiff``.

slangpy's native extension imports torch wherever torch is installed (its
torch bridge), which takes seconds and would make ``import symdiff`` import
torch; the numpy device needs neither.  ``spy`` stands for the module: its
first attribute access imports slangpy, and each attribute is then kept."""
from __future__ import annotations

import importlib
from typing import Any


class _Slangpy:
    def __getattr__(self, name: str) -> Any:
        value = getattr(importlib.import_module("slangpy"), name)
        setattr(self, name, value)
        return value


spy: Any = _Slangpy()
