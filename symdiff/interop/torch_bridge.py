"""``sd.to_torch``: a program as a torch function whose outputs torch's
autograd differentiates through the program's own generated backward pass.

The program becomes a ``torch.library.custom_op`` (one per ``to_torch`` call,
in the ``symdiff`` namespace) with a fake implementation (output shapes and
dtypes from the traced graph) and a registered autograd formula, so it also
runs under ``torch.compile``; where the installed torch has no ``custom_op``
(before 2.4) a ``torch.autograd.Function`` carries the same formula.

Backward runs the program's backward pass once, for the inputs torch needs
(``ctx.needs_input_grad``): the VJP program of those inputs
(``interop.programs.vjp_program``), itself wrapped by this bridge, so that
``create_graph=True`` differentiates it again through its own backward pass.

Data: CPU tensors are read in place (``Tensor.numpy()``); the one copy is
the program's upload, or none on the numpy device.  On slangpy's CPU device the
results are the kernels' own buffers, viewed by torch through DLPack
(``lowering.dlpack``); on other devices they are read back into host memory
once per call.  Tensors on a GPU are copied to the host and results back: a
zero-copy CUDA path is not built yet.
"""
from __future__ import annotations

import itertools
import re
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from symdiff import lowering
from symdiff.ir.graph import DTYPES
from symdiff.lowering import dlpack
from symdiff.lowering.backends import resolve

from ..program import DifferentiableProgram, ProgramError, differentiable_program
from .programs import float_arguments, output_specs, vjp_program

if TYPE_CHECKING:
    import torch

_op_numbers = itertools.count()


def _custom_ops_available() -> bool:
    import torch
    return hasattr(torch.library, "custom_op") and hasattr(torch.library.CustomOpDef, "register_autograd")


def _numpy_dtype(dtype: "torch.dtype") -> np.dtype:
    name = str(dtype).removeprefix("torch.")
    return np.dtype(DTYPES.get(name, name))  # bfloat16: ml_dtypes'


def _torch_dtype(dtype: np.dtype) -> "torch.dtype":
    import torch
    return getattr(torch, np.dtype(dtype).name)


def host_array(t: "torch.Tensor") -> np.ndarray:
    """A tensor's values as a numpy array, read in place where it is on the CPU
    (a bfloat16 tensor through its bits: numpy has no bfloat16 of torch's)."""
    import torch
    t = t.detach().cpu()
    return t.view(torch.int16).numpy().view(DTYPES["bfloat16"]) if t.dtype == torch.bfloat16 else t.numpy()


def from_numpy(array: np.ndarray) -> "torch.Tensor":
    """A CPU tensor over ``array``'s memory (bfloat16 through its bits: ``host_array``'s inverse)."""
    import torch
    if array.dtype == DTYPES["bfloat16"]:
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


def as_tensor(out: Any, arrays: Sequence[np.ndarray], like: Sequence["torch.Tensor"]) -> "torch.Tensor":
    """A program result as a new tensor on the arguments' device: a view of the
    kernels' buffer where it is host memory, else the host array (copied when
    it is an argument returned as is, or read-only)."""
    import torch
    if isinstance(out, lowering.DeviceArray) and out.dtype != "bfloat16":  # (DLPack has no numpy bfloat16)
        tensor = torch.from_dlpack(out)  # a view of the kernels' buffer
    else:
        out = np.asarray(out)
        if not out.flags.writeable or any(np.may_share_memory(out, a) for a in arrays):
            out = out.copy()  # an argument returned as is (numpy device): a custom op's output is new
        tensor = from_numpy(out)
    return tensor.to(like[0].device) if like else tensor


class TorchFunction:
    """A program as a torch function (made by ``sd.to_torch``).

    Call it with tensors (or arrays, converted with ``torch.as_tensor``),
    positionally or by argument name; it returns a tensor, or a tuple for
    several outputs.  Arguments outside ``wrt`` are constants to torch
    (detached): no gradient flows to them."""

    def __init__(self, program: DifferentiableProgram, wrt: Sequence[str] | None, device: str | None):
        self.program = program
        self.wrt = None if wrt is None else tuple(wrt)
        for w in self.wrt or ():
            if w not in program.arg_names:
                raise ProgramError(f"to_torch: wrt={w!r} is not an argument of {program.name}; its arguments are "
                                   f"{program.arg_names}")
        self.device = device
        self._backward: dict[tuple, TorchFunction] = {}  # (argument shapes, needed inputs) -> VJP bridge
        self._op = self._define() if _custom_ops_available() else self._function()

    def __repr__(self) -> str:
        return f"<to_torch {self.program.name}({', '.join(self.program.arg_names)})>"

    def __call__(self, *args: Any, **kwargs: Any) -> "torch.Tensor | tuple[torch.Tensor, ...]":
        import torch
        values = self.program._bind(args, kwargs)
        tensors = []
        for name in self.program.arg_names:
            t = torch.as_tensor(values[name])
            tensors.append(t if self.wrt is None or name in self.wrt else t.detach())
        outs = self._op(*tensors)
        return outs[0] if len(outs) == 1 else tuple(outs)

    # -- the op's parts: forward, fake, autograd ---------------------------------------
    def _forward(self, *tensors: "torch.Tensor") -> list["torch.Tensor"]:
        """Run the program on the tensors' memory; results as new tensors."""
        arrays = [host_array(t) for t in tensors]
        device = self.device or self.program.device
        outs = self.program(*arrays, device=device, device_arrays=dlpack.in_host_memory(resolve(device)))
        return [as_tensor(out, arrays, tensors) for out in (outs if isinstance(outs, tuple) else (outs,))]

    def _fake(self, *tensors: "torch.Tensor") -> list["torch.Tensor"]:
        """Outputs' shapes and dtypes, for torch.compile's tracing (no run)."""
        specs = output_specs(self.program, [(tuple(t.shape), _numpy_dtype(t.dtype)) for t in tensors])
        return [tensors[0].new_empty(shape, dtype=_torch_dtype(dtype)) for shape, dtype in specs]

    @staticmethod
    def _setup(ctx: Any, inputs: Sequence["torch.Tensor"], output: Any) -> None:
        ctx.save_for_backward(*inputs)

    def _grads(self, ctx: Any, cotangents: Sequence["torch.Tensor"]) -> tuple["torch.Tensor | None", ...]:
        """Gradients of the inputs torch needs, from one run of their VJP program
        (torch passes zeros as the cotangent of an output it did not use)."""
        tensors = ctx.saved_tensors
        names = [n for n, need in zip(self.program.arg_names, ctx.needs_input_grad) if need]
        if not names:
            return (None,) * len(tensors)
        shapes = [(tuple(t.shape), _numpy_dtype(t.dtype)) for t in tensors]
        grads = self._vjp_bridge(shapes, tuple(names))(*tensors, *cotangents)
        by_name = dict(zip(names, grads if isinstance(grads, tuple) else (grads,)))
        return tuple(by_name[n].to(t.dtype) if n in by_name else None for n, t in zip(self.program.arg_names, tensors))

    def _vjp_bridge(self, shapes: list, names: tuple[str, ...]) -> "TorchFunction":
        key = (tuple(shapes), names)
        if key not in self._backward:
            differentiable = float_arguments(self.program, shapes)
            bad = [n for n in names if n not in differentiable]
            if bad:
                raise ProgramError(f"torch asks for gradients of {bad}, which are not float arguments of "
                                   f"{self.program.name}: detach them")
            self._backward[key] = TorchFunction(vjp_program(self.program, shapes, names), None, self.device)
        return self._backward[key]

    # -- registration ----------------------------------------------------------------
    def _define(self) -> Callable:
        """A ``torch.library.custom_op`` of the program: works under torch.compile."""
        import torch
        base = re.sub(r"\W", "_", self.program.name).strip("_") or "program"
        params = ", ".join(f"Tensor a{i}" for i in range(len(self.program.arg_names)))
        op = torch.library.custom_op(f"symdiff::{base}_{next(_op_numbers)}", self._forward, mutates_args=(),
                                     schema=f"({params}) -> Tensor[]")
        op.register_fake(self._fake)
        op.register_autograd(lambda ctx, grads: self._grads(ctx, grads), setup_context=self._setup)
        return op

    def _function(self) -> Callable:
        """The same formula as a ``torch.autograd.Function`` (torch < 2.4)."""
        import torch
        bridge = self

        class ProgramFunction(torch.autograd.Function):
            @staticmethod
            def forward(*tensors):
                return tuple(bridge._forward(*tensors))

            @staticmethod
            def setup_context(ctx, inputs, output):
                bridge._setup(ctx, inputs, output)
                ctx.mark_non_differentiable(*[o for o in output if not o.is_floating_point()])

            @staticmethod
            def backward(ctx, *grads):
                return bridge._grads(ctx, grads)

        return ProgramFunction.apply


def to_torch(program: DifferentiableProgram | Callable, wrt: Sequence[str] | str | None = None,
             device: str | None = None) -> TorchFunction:
    """``program`` as a torch function over tensors whose outputs torch's
    autograd differentiates (backward runs the program's generated backward
    pass once, for the inputs torch needs; higher orders through it again).

    ``wrt``: the arguments torch may differentiate (default: every float
    argument); others are constants.  ``device``: as for a program call.
    A plain function is decorated with ``sd.differentiable_program`` first.
    Importing torch happens here, not at ``import symdiff``."""
    if not isinstance(program, DifferentiableProgram):
        program = differentiable_program(program)
    return TorchFunction(program, (wrt,) if isinstance(wrt, str) else wrt, device)
