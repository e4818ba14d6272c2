"""Make the hand-built graph helpers (symdiff_graphs.py) importable here."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import pytest  # noqa: E402

from symdiff import lowering  # noqa: E402


def _device_param(name: str):
    return pytest.param(name, marks=[pytest.mark.vulkan] if name == "vulkan" else [], id=name)


def _present(name: str) -> str:
    if name != "numpy" and name not in lowering.available_devices():
        pytest.skip(f"no {name} device here")
    return name


@pytest.fixture(params=[_device_param(d) for d in ("numpy", "cpu", "vulkan")])
def device(request) -> str:
    """The interpreter and the Slang devices CI has (Vulkan skipped without a driver)."""
    return _present(request.param)


@pytest.fixture(params=[_device_param(d) for d in ("cpu", "vulkan", "cuda")])
def slang_device(request) -> str:
    """Each Slang device present (the numpy device plans no kernels or buffers)."""
    return _present(request.param)
