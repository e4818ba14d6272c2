"""Train one PyTorch model three ways on the same batches, in step: through
sd.compile_module, in plain torch float32, and in plain torch float64 (the
reference).  Shared by examples/torch_lenet.py and torch_transformer.py.

It prints the losses every 20 steps, then how far each float32 run's weights
drifted from the float64 run's (max over parameters of max |difference| /
max |float64 weight|): symdiff's drift next to torch float32's says whether
symdiff trained as torch does, up to float32 rounding.
"""
from __future__ import annotations

import copy
import time
from typing import Callable, Iterable, Sequence

import torch

import symdiff as sd

Optimizer = Callable[[Iterable[torch.nn.Parameter]], torch.optim.Optimizer]


def _as(dtype: torch.dtype, batch: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Float inputs in the model's dtype; integer ones (classes, tokens) as they are."""
    return [x.to(dtype) if x.is_floating_point() else x for x in batch]


def train_in_step(model: torch.nn.Module, data: Sequence[Sequence[torch.Tensor]], steps: int,
                  optimizer: Optimizer, device: str | None) -> None:
    """``steps`` optimiser steps of ``model`` (whose forward returns the loss)
    on ``data`` in turn, compiled and in plain torch; prints as described above."""
    twin = copy.deepcopy(model)
    reference = copy.deepcopy(model).double()
    start = time.perf_counter()
    compiled = sd.compile_module(model, *data[0], device=device)
    runs = [(compiled, optimizer(model.parameters())), (twin, optimizer(twin.parameters())),
            (reference, optimizer(reference.parameters()))]
    first = None
    for step in range(steps):
        batch = data[step % len(data)]
        losses = []
        for net, opt in runs:
            opt.zero_grad()
            loss = net(*_as(next(net.parameters()).dtype, batch))
            loss.backward()
            opt.step()
            losses.append(loss.item())
        first = losses[0] if first is None else first
        if step % 20 == 0 or step == steps - 1:
            print(f"step {step:3d}: symdiff loss {losses[0]:.6f}, torch loss {losses[1]:.6f}, "
                  f"torch float64 loss {losses[2]:.6f}")
    print(f"loss {first:.4f} -> {losses[0]:.4f}; {steps} steps in {time.perf_counter() - start:.1f} s")
    for name, net in (("symdiff", model), ("torch float32", twin)):
        drift = max(((p.double() - q).abs().max() / q.abs().max()).item()
                    for p, q in zip(net.parameters(), reference.parameters()))
        print(f"{name}: max relative difference {drift:.2e} from the float64-trained weights")
