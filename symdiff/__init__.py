"""symdiff: differentiate numpy-style array programs symbolically, run them as Slang.

The public API ties the three pipeline stages together: ``ir`` traces,
``symdiff`` differentiates, ``lowering`` generates and runs Slang.
"""
from symdiff.ir import map  # noqa: A004 (sd.map[lo:hi] index-level loops)
from symdiff.ir import trace
from symdiff.ir import IndexOutOfRange
from symdiff.ir.tracer import ImplicitBroadcastError
from symdiff.ir.specs import ArraySpec, bf16, bool_, f16, f32, f64, i32, symbol
from symdiff.lowering import ArgumentError, DeviceArray, asarray, available_devices, cache_limit, set_cache_limit
from symdiff.lowering.kernels.precision import default_matmul_precision, set_matmul_precision

from .backward import add_backward_pass
from .custom_vjp import CustomVJPError, custom_vjp
from .errors import DifferentiationError
from .forward import add_tangent_pass
from .gradcheck import GradientCheckError
from . import linalg
from .library import library_node
from .loops import LoopError, fori_loop, while_loop
from .interop import to_jax, to_torch
from .interop.module_api import compile_module
from .memory_budget import MemoryBudgetError, MemoryPlan
from .program import DifferentiableProgram, ProgramError, clear_caches, differentiable_program, gradcheck
from .registry import register_derivative, unregister_derivative

__all__ = ["differentiable_program", "DifferentiableProgram", "map", "trace", "f32", "f64", "f16", "bf16", "i32", "bool_",
           "symbol", "ArraySpec", "add_backward_pass", "add_tangent_pass", "gradcheck", "register_derivative",
           "unregister_derivative", "asarray", "DeviceArray", "available_devices", "ProgramError",
           "DifferentiationError", "GradientCheckError", "IndexOutOfRange", "ArgumentError",
           "custom_vjp", "CustomVJPError", "ImplicitBroadcastError", "to_torch", "to_jax", "compile_module",
           "clear_caches", "cache_limit", "set_cache_limit",
           "fori_loop", "while_loop", "LoopError", "library_node", "linalg",
           "set_matmul_precision", "default_matmul_precision"]
