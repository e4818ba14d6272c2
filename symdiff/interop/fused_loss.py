"""A compiled module's scalar loss in training, from one run of the
program's fused value and gradient.

Through the ``sd.to_torch`` bridge a training step runs two programs: the
forward program, then in backward the VJP program, which computes the
forward values again before its reverse pass.  A module whose only output is
a scalar loss, called where torch records for a backward, runs
``value_and_grad`` instead: one run, forward and reverse pass together.  The
gradient at cotangent 1 is kept and backward scales it by torch's cotangent
(the VJP is linear in it: exact).  A backward that itself records
(``create_graph=True``) goes through the bridge's VJP program, which torch
can differentiate again.
"""
from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Sequence

from symdiff.lowering import dlpack
from symdiff.lowering.backends import resolve

from .torch_bridge import TorchFunction, as_tensor, host_array

if TYPE_CHECKING:
    import torch


def fused_loss(bridge: TorchFunction, tensors: Sequence["torch.Tensor"]) -> "torch.Tensor":
    """``bridge``'s scalar output for ``tensors``, its gradients computed in the same run."""
    return _function().apply(bridge, *tensors)


@functools.cache
def _function() -> type:
    import torch

    class FusedLoss(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, bridge: TorchFunction, *tensors: torch.Tensor) -> torch.Tensor:
            program = bridge.program
            names = [n for n, t in zip(program.arg_names, tensors) if t.requires_grad]
            arrays = [host_array(t) for t in tensors]
            device = bridge.device or program.device
            value, grads = program.value_and_grad(*arrays, wrt=names, device=device,
                                                  device_arrays=dlpack.in_host_memory(resolve(device)))
            ctx.bridge = bridge
            ctx.grads = {n: as_tensor(grads[n], arrays, tensors) for n in names}
            ctx.save_for_backward(*tensors)
            return as_tensor(value, arrays, tensors)

        @staticmethod
        def backward(ctx: Any, cotangent: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
            tensors = ctx.saved_tensors
            if torch.is_grad_enabled():  # create_graph=True: gradients torch can differentiate again
                inner = SimpleNamespace(saved_tensors=tensors, needs_input_grad=ctx.needs_input_grad[1:])
                return (None, *ctx.bridge._grads(inner, (cotangent,)))
            return (None, *(ctx.grads[n].to(t.dtype) * cotangent if n in ctx.grads else None
                            for n, t in zip(ctx.bridge.program.arg_names, tensors)))

    return FusedLoss
