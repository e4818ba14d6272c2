"""Train one PyTorch model several ways on the same batches, in step: through
sd.compile_module and in plain torch, in float32 (plus a plain-torch float64
copy, the reference) or all in float64.  Shared by examples/torch_lenet.py and
torch_transformer.py, and by their tests (tests/examples).

It prints the losses every 20 steps, then how far each run's weights drifted
from the reference run's (max over parameters of max |difference| / max
|reference weight|): in float32, symdiff's drift next to torch float32's says
whether symdiff trained as torch does, up to float32 rounding.
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import numpy as np
import torch

import symdiff as sd

Optimizer = Callable[[Iterable[torch.nn.Parameter]], torch.optim.Optimizer]


@dataclass
class InStep:
    """What a run measured: per step the loss of each run (``runs`` names
    the columns; symdiff's first), each run's trained model, and each run's
    drift from the reference run (the last)."""
    runs: list[str]
    losses: np.ndarray             # (steps, runs)
    models: dict[str, torch.nn.Module]
    drift: dict[str, float]
    seconds: float


def sgd(params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
    """The optimiser the examples train every copy with: SGD with momentum
    (Adam divides each gradient by its running magnitude, so a near-zero
    gradient's rounding moves a weight by a whole step, in every float32 run)."""
    return torch.optim.SGD(params, lr=0.02, momentum=0.9)


def _as(dtype: torch.dtype, batch: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Float inputs in the model's dtype; integer ones (classes, tokens) as they are."""
    return [x.to(dtype) if x.is_floating_point() else x for x in batch]


def train_in_step(model: torch.nn.Module, data: Sequence[Sequence[torch.Tensor]], steps: int,
                  optimizer: Optimizer, device: str | None, dtype: torch.dtype = torch.float32,
                  quiet: bool = False, watch: Callable[[torch.nn.Module], None] | None = None) -> InStep:
    """``steps`` optimiser steps of ``model`` (whose forward returns the loss)
    on ``data`` in turn, compiled and in plain torch, all in ``dtype`` (in
    float32 a float64 plain-torch copy too, the reference); prints as
    described above unless ``quiet``.  ``watch`` is called with the plain-torch
    copy in ``dtype`` before training (to register hooks on it)."""
    model = model.to(dtype)
    runs = {"symdiff": model, "torch": copy.deepcopy(model)}
    if watch:
        watch(runs["torch"])
    if dtype != torch.float64:
        runs["torch float64"] = copy.deepcopy(model).double()
    start = time.perf_counter()
    compiled = sd.compile_module(model, *_as(dtype, data[0]), device=device)
    stepping = [(compiled if name == "symdiff" else net, optimizer(net.parameters())) for name, net in runs.items()]
    losses = np.zeros((steps, len(runs)))
    for step in range(steps):
        batch = data[step % len(data)]
        for k, (net, opt) in enumerate(stepping):
            opt.zero_grad()
            loss = net(*_as(next(net.parameters()).dtype, batch))
            loss.backward()
            opt.step()
            losses[step, k] = loss.item()
        if not quiet and (step % 20 == 0 or step == steps - 1):
            print(f"step {step:3d}: " + ", ".join(f"{name} loss {v:.6f}" for name, v in zip(runs, losses[step])))
    seconds = time.perf_counter() - start
    reference = list(runs.values())[-1]
    drift = {name: max(((p.double() - q.double()).abs().max() / q.double().abs().max()).item()
                       for p, q in zip(net.parameters(), reference.parameters()))
             for name, net in list(runs.items())[:-1]}
    if not quiet:
        print(f"loss {losses[0, 0]:.4f} -> {losses[-1, 0]:.4f}; {steps} steps in {seconds:.1f} s")
        for name, value in drift.items():
            print(f"{name} {str(dtype).removeprefix('torch.')}: max relative difference {value:.2e} from the "
                  f"{list(runs)[-1]}-trained weights")
    return InStep(list(runs), losses, runs, drift, seconds)
