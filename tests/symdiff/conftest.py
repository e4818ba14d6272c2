"""Make the hand-built graph helpers (symdiff_graphs.py) importable here."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import pytest  # noqa: E402

import lowering  # noqa: E402


def _slang_param(name: str):
    return pytest.param(name, marks=[pytest.mark.vulkan] if name == "vulkan" else [], id=name)


@pytest.fixture(params=[_slang_param(d) for d in ("cpu", "vulkan", "cuda")])
def slang_device(request) -> str:
    """Each Slang device present (the numpy device plans no kernels or buffers)."""
    if request.param not in lowering.available_devices():
        pytest.skip(f"no {request.param} device here")
    return request.param
