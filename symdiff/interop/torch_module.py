"""``sd.compile_module``: a PyTorch module whose forward is a symdiff program
and whose backward is that program's generated backward pass.

The compiled module holds the original module as its child, so its parameters
and buffers *are* the original ones: an optimiser stepping either module's
``parameters()`` changes what both compute.  Each call passes the parameters
and buffers to the program as arguments (nothing is copied at compile time),
through the ``sd.to_torch`` bridge, which gives torch's autograd the
program's VJP; a scalar loss in training runs the program's fused value and
gradient instead, once (``fused_loss``).  Before a call in training it draws
each dropout's noise from torch's generator, as torch's CPU dropout does
(same order, same values); after it, copies each batch norm's new running
statistics into its buffers and counts the batch, as torch does.

Per combination of training modes the module is traced once with
``torch.fx`` (``torch_graph``); the program traces and compiles once per
argument shapes, like any program.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..program import differentiable_program
from .fused_loss import fused_loss
from .programs import output_specs
from .torch_bridge import TorchFunction, _numpy_dtype
from .torch_graph import ModuleCompileError, ModuleGraph, modes


class _Compiled:
    """One traced mode: the graph, its program and the torch bridge around it."""

    def __init__(self, module: torch.nn.Module, given: int, device: str | None, options: dict[str, Any]):
        self.graph = ModuleGraph(module, given)
        self.program = differentiable_program(self.graph.program_function(), device=device, **options)
        self.bridge = TorchFunction(self.program, None, device)
        self.noise_shapes: dict[tuple, list] = {}
        self.scalar: dict[tuple, bool] = {}  # argument shapes -> whether the one output is a float scalar

    def arguments(self, inputs: tuple, draw: bool = True) -> list[torch.Tensor]:
        if len(inputs) != len(self.graph.inputs):
            raise TypeError(f"{self.graph.root}.forward takes {len(self.graph.inputs)} tensors "
                            f"({', '.join(n.name for n in self.graph.inputs)}), got {len(inputs)}; pass each as "
                            "a tensor, positionally or by name")
        tensors = [_argument(x, n) for x, n in zip(inputs, self.graph.arg_names)]
        return tensors + self.graph.state_tensors() + self._noises(tensors, draw)

    def _noises(self, inputs: list[torch.Tensor], draw: bool) -> list[torch.Tensor]:
        """Each dropout's noise, drawn in graph order as torch's CPU dropout draws it
        (``draw=False``: zeros of the shapes, leaving torch's generator as it is)."""
        if not self.graph.noises:
            return []
        key = tuple((tuple(t.shape), t.dtype) for t in inputs)
        if key not in self.noise_shapes:
            stand_ins = [np.zeros(tuple(t.shape), _numpy_dtype(t.dtype)) for t in inputs]
            self.noise_shapes[key] = self.graph.noise_shapes(stand_ins)
        out = []
        for noise, (shape, dtype) in zip(self.graph.noises, self.noise_shapes[key]):
            keep = 1 - noise.p
            if not draw:
                out.append(torch.zeros(shape, dtype=getattr(torch, dtype)))
                continue
            out.append(torch.empty(shape, dtype=getattr(torch, dtype)).bernoulli_(keep).div_(keep))
        return out

    def _loss_in_training(self, arguments: list[torch.Tensor]) -> bool:
        """Whether the call's one output is a float scalar that torch will
        differentiate: then ``fused_loss`` runs forward and backward at once
        (not under ``torch.compile``, which traces the bridge's custom op)."""
        if self.graph.batchnorms or len(self.graph.output_leaves) != 1 or not torch.is_grad_enabled() or \
                not any(t.requires_grad for t in arguments) or torch.compiler.is_compiling():
            return False
        key = tuple((tuple(t.shape), t.dtype) for t in arguments)
        if key not in self.scalar:
            ((shape, dtype),) = output_specs(self.program, [(k[0], _numpy_dtype(k[1])) for k in key])
            self.scalar[key] = shape == () and dtype.kind == "f" and not self.graph.cast_back
        return self.scalar[key]

    def trace(self, inputs: tuple) -> None:
        """Trace the program for these inputs now (errors at compile time)."""
        tensors = self.arguments(inputs, draw=False)
        output_specs(self.program, [(tuple(t.shape), _numpy_dtype(t.dtype)) for t in tensors])

    def __call__(self, inputs: tuple) -> Any:
        import torch.utils._pytree as pytree
        for path in self.graph.batchnorms:  # torch counts the batch before it reads momentum=None's factor
            layer = self.graph.module.get_submodule(path)
            if layer.num_batches_tracked is not None:
                layer.num_batches_tracked.add_(1)
        arguments = self.arguments(inputs)
        outs = fused_loss(self.bridge, arguments) if self._loss_in_training(arguments) else self.bridge(*arguments)
        outs = list(outs) if isinstance(outs, tuple) else [outs]
        count = len(self.graph.output_leaves)
        with torch.no_grad():
            updates = iter(outs[count:])
            for path in self.graph.batchnorms:
                layer = self.graph.module.get_submodule(path)
                layer.running_mean.copy_(next(updates))
                layer.running_var.copy_(next(updates))
        leaves = [out.detach().to(getattr(torch, self.graph.cast_back[k])) if k in self.graph.cast_back else out
                  for k, out in enumerate(outs[:count])]
        return pytree.tree_unflatten(leaves, self.graph.output_spec)


def _forward_arity(module: torch.nn.Module) -> int:
    """How many inputs ``forward`` takes without its defaults."""
    import inspect
    params = inspect.signature(module.forward).parameters.values()
    return sum(1 for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty)


def _argument(x: Any, name: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"compiled module input {name!r}: expected a tensor, got {type(x).__name__}")
    if x.dtype in (torch.int64, torch.int16, torch.int8, torch.uint8):
        return x.to(torch.int32)  # symdiff's index type (range-checked by the program)
    return x


class CompiledModule(torch.nn.Module):
    """``module`` whose forward runs as a symdiff program (made by
    ``sd.compile_module``).  ``self.module`` is the original module: the same
    parameters and buffers, the same ``train()``/``eval()`` state."""

    def __init__(self, module: torch.nn.Module, device: str | None, options: dict[str, Any]):
        super().__init__()
        self.module = module
        self.device = device
        self.options = dict(options)
        self._compiled: dict[tuple, _Compiled] = {}
        self._given = _forward_arity(module)

    def compiled(self, given: int) -> _Compiled:
        """The traced graph and program for the module's current modes, when
        calls pass the first ``given`` inputs of ``forward``."""
        key = (modes(self.module), given)
        if key not in self._compiled:
            self._compiled[key] = _Compiled(self.module, given, self.device, self.options)
        return self._compiled[key]

    @property
    def program(self):
        """The symdiff program of the latest call's (or the compile's) modes and inputs
        (``.graph``, ``.view()``, ``.slang_source()``, ...)."""
        return self.compiled(self._given).program

    def forward(self, *inputs: torch.Tensor, **named: torch.Tensor) -> Any:
        import inspect
        if named:  # in forward's order; a default skipped before a named input is passed as it is
            signature = inspect.signature(self.module.forward)
            try:
                bound = signature.bind(*inputs, **named).arguments
            except TypeError as err:
                raise TypeError(f"{type(self.module).__name__}.forward: {err}") from None
            names = list(signature.parameters)
            last = max(names.index(n) for n in bound)
            inputs = tuple(bound[n] if n in bound else signature.parameters[n].default for n in names[:last + 1])
        self._given = len(inputs)
        return self.compiled(len(inputs))(inputs)


def compile_module(module: torch.nn.Module, *example_inputs: torch.Tensor, device: str | None = None,
                   **options: Any) -> CompiledModule:
    """``module`` as a module whose forward and backward are symdiff's
    generated kernels (on ``device``: as for a program call).  It traces the
    module with ``torch.fx`` and, given ``example_inputs``, the program for
    their shapes at once, so an unsupported operator or form is refused here
    (``ModuleCompileError``, naming the module path and the operator).
    ``options``: ``differentiable_program``'s (``deterministic``,
    ``check_bounds``, ...)."""
    compiled = CompiledModule(module, device, options)
    if example_inputs:
        compiled._given = len(example_inputs)
        compiled.compiled(len(example_inputs)).trace(tuple(example_inputs))
    else:
        compiled.compiled(compiled._given)
    return compiled


__all__ = ["compile_module", "CompiledModule", "ModuleCompileError"]
