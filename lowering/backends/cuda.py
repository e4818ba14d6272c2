"""``device="cuda"``: slangpy's CUDA device (Slang compiled by nvrtc).  ``auto``
ranks it first wherever a CUDA driver lists an adapter; where Vulkan reaches
a hardware GPU too, ``auto`` takes whichever of the two ran a probe faster on
this machine (``choice``).  Its buffers are device memory: results and DLPack
exports are host copies."""
from __future__ import annotations

from ..targets import MMA_SYNC, Target, TensorCores
from .registry import register
from .slangpy_base import SlangpyBackend

# No float atomic max/min in nvrtc (they are compare-and-swap loops on every
# concurrent target anyway: lowering.targets).
TARGET = Target("cuda", sequential=False, float_atomic_add=True, polynomial_math=False, workgroup_reductions=True,
                recompute_transcendentals=True, wave_operations=True, single_pass_reductions=True,
                tensor_cores=TensorCores(MMA_SYNC, frozenset({"tf32", "float16", "bfloat16"})))


class CudaBackend(SlangpyBackend):
    name = "cuda"
    TARGET = TARGET

    def auto_rank(self) -> int:
        return 0

    def is_hardware_gpu(self) -> bool:
        return True


BACKEND = register(CudaBackend())
