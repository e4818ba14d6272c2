"""``sd.compile_module`` without importing torch at ``import symdiff``:
the implementation (``torch_module``) is imported at the first call."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from .torch_module import CompiledModule


def compile_module(module: "torch.nn.Module", *example_inputs: "torch.Tensor", device: str | None = None,
                   **options: Any) -> "CompiledModule":
    """A module that computes what ``module`` does, forward and backward, with
    symdiff's generated kernels, holding ``module``'s own parameters and
    buffers (``torch_module.compile_module`` has the details)."""
    from .torch_module import compile_module as compile_
    return compile_(module, *example_inputs, device=device, **options)
