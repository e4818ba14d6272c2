"""``device="vulkan"``: any Vulkan driver slangpy finds, a hardware GPU's or
Mesa's lavapipe (a software Vulkan on the CPU), which has its own target.

A hardware GPU's target claims its matrix units when the driver has
cooperative matrices (``cooperative_matrices``), asked of the device once.

lavapipe is told apart by its adapters' names (``SOFTWARE_ADAPTERS``): its
double-precision transcendentals are wrong, its float32 ones inaccurate, and
its buffers are host memory this process can address (checked by a probe,
``slangpy_base.addresses_are_host_pointers``, not trusted from the name).
"""
from __future__ import annotations

from dataclasses import replace

from ..slang import spy
from ..kernels.tile_shapes import WARP
from ..targets import COOPERATIVE_MATRIX, Target, TensorCores
from .registry import register
from . import slangpy_base
from .slangpy_base import SlangpyBackend

SOFTWARE_ADAPTERS = ("llvmpipe", "lavapipe", "swiftshader", "softpipe")

TARGET = Target("vulkan", sequential=False, float_atomic_add=True, polynomial_math=False,
                folds_float_identities=True, workgroup_reductions=True, recompute_transcendentals=True,
                wave_operations=True, single_pass_reductions=True)
# Vulkan on a CPU rasteriser (Mesa lavapipe): the same code, but not for double
# transcendentals, and float32 transcendentals as lowering.cpu_math's: lavapipe's
# built-in log (2.2e-5 relative error, 2^-21 absolute near 1, within the
# Vulkan spec) and tanh (4.9e-5) were ~100x JAX float32's, arcsin 3800 ulp
# off, pow 60 (measured).  And one
# thread per reduction or row: lavapipe runs the cooperative form correctly
# (tests/lowering/test_workgroups.py forces it there) but its barriers are
# costly: value_and_grad on this 2-core machine went 163 -> 664 ms (layer norm
# 4096x1024), 61 -> 309 ms (row log-sum-exp 4096x1000), 208 -> 330 ms (16M sum).
LAVAPIPE = replace(TARGET, float64_transcendentals=False, polynomial_math=True, accurate_builtins=False,
                   workgroup_reductions=False,
                   recompute_transcendentals=False, keep_loops=True)


def cooperative_matrices(device: spy.Device) -> TensorCores | None:
    """The matrix units ``device``'s products may use: cooperative matrices for
    float16 operands (16x16x16, float32 sums, which NVIDIA's and AMD's drivers
    list), where the driver has them, and half-precision arithmetic, and its
    subgroups are always 32 invocations (the form's warps:
    lowering.kernels.coop_tiles); else None.  Not bfloat16: slangpy 0.43 tells
    whether the driver has the bfloat16 type, not whether its cooperative
    matrices take it (``shaderBFloat16CooperativeMatrix``), and a pipeline asking for
    what the driver lacks fails to create."""
    limits = device.info.limits
    if not (device.has_feature(spy.Feature.cooperative_matrix) and device.has_feature(spy.Feature.half)
            and limits.min_wave_size == WARP and limits.max_wave_size == WARP):
        return None
    return TensorCores(COOPERATIVE_MATRIX, frozenset({"float16"}))


def _software(adapter: str) -> bool:
    return any(s in adapter.lower() for s in SOFTWARE_ADAPTERS)


class VulkanBackend(SlangpyBackend):
    name = "vulkan"
    TARGET = TARGET

    def __init__(self) -> None:
        super().__init__()
        self._hardware_target: Target | None = None

    def is_software(self) -> bool:
        """Every Vulkan adapter here is a CPU rasteriser (so is none listed)."""
        return all(_software(a) for a in slangpy_base.adapters(self.name))

    def auto_rank(self) -> int:
        # a hardware GPU right after CUDA (where both are there, auto measures: choice.py);
        # lavapipe after the CPU device (measured there: cpu.py)
        return 3 if self.is_software() else 1

    def is_hardware_gpu(self) -> bool:
        return not self.is_software()

    def target(self) -> Target:
        if self.is_software():
            return LAVAPIPE
        if self._hardware_target is None:
            self._hardware_target = replace(TARGET, tensor_cores=cooperative_matrices(self.device()))
        return self._hardware_target

    def _buffers_in_host_memory(self, device: spy.Device) -> bool:
        # lavapipe's device memory is a shared mapping in this process and a buffer's
        # device address is the pointer into it
        return _software(device.info.adapter_name) and slangpy_base.addresses_are_host_pointers(device)


BACKEND = register(VulkanBackend())
