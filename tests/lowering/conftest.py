"""Devices for the lowering tests: every slangpy backend present, shared by
all tests (a device takes 0.2-1.3 s to create; kernels are cached per process)."""
import gc
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


@pytest.fixture(scope="module")
def frozen_heap():
    """Moves what earlier test files left alive out of the collector's reach (``gc.freeze``)
    for the tests that call ``gc.collect()`` to drop their results: a full collection late in
    a worker walks ~700k objects (0.5 s each time); the tests' own objects are still collected."""
    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()
