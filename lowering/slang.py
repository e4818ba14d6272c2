"""slangpy, imported when Slang is first used rather than at ``import symdiff``,
and without torch.

slangpy's native extension imports torch at its own import wherever torch is
installed, for its torch bridge: 2.3 of the 2.6 s that ``import slangpy`` took
here (torch 2.13 CPU, `python -X importtime`) and about 190 MB of resident
memory, paid by every first call on the cpu or vulkan device.  symdiff hands
slangpy only numpy arrays and exchanges tensors through DLPack
(``lowering.dlpack``), so it imports slangpy with torch hidden unless torch is
already imported (then the bridge costs nothing) or ``SYMDIFF_SLANGPY_TORCH=1``
asks for it (for code that passes torch tensors to slangpy itself in the same
process).  ``spy`` stands for the module: its first attribute access imports
slangpy, and each attribute is then kept."""
from __future__ import annotations

import importlib
import os
import sys
from typing import Any


def _import_slangpy() -> Any:
    if "slangpy" in sys.modules or "torch" in sys.modules or os.environ.get("SYMDIFF_SLANGPY_TORCH") == "1":
        return importlib.import_module("slangpy")
    sys.modules["torch"] = None  # an import of torch fails while this entry is None
    try:
        return importlib.import_module("slangpy")
    finally:
        if sys.modules.get("torch", 0) is None:
            del sys.modules["torch"]


class _Slangpy:
    def __getattr__(self, name: str) -> Any:
        value = getattr(_import_slangpy(), name)
        setattr(self, name, value)
        return value


spy: Any = _Slangpy()
