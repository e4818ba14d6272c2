"""Devices for the lowering tests: every slangpy backend present, shared by
all tests (a device takes 0.2-1.3 s to create; kernels are cached per process)."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from symdiff import lowering  # noqa: E402

SLANG_DEVICES = [d for d in ("cpu", "vulkan", "cuda") if d in lowering.available_devices()]


def _param(name: str):
    marks = [pytest.mark.vulkan] if name == "vulkan" else []
    return pytest.param(name, marks=marks, id=name)


@pytest.fixture(params=[_param(d) for d in ("cpu", "vulkan", "cuda")])
def device(request) -> str:
    """Each Slang device (Vulkan and CUDA skipped where no driver exists)."""
    if request.param not in SLANG_DEVICES:
        pytest.skip(f"no {request.param} device here")
    return request.param
