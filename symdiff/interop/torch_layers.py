"""Layers ``sd.compile_module`` keeps whole (``torch.fx`` leaf modules)
instead of tracing through them, because their forward mutates state or
branches on it: batch normalisation, whose training step updates running
statistics in place, and dropout, whose mask comes from torch's generator.

A layer's implementation gets the ``Step`` that runs the graph: it reads the
layer's parameters and buffers there (program inputs), takes the next dropout
noise, and hands back new running statistics, which the compiled module
copies into the buffers after the call.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Protocol

from . import nn_numpy as nn

if TYPE_CHECKING:
    import torch

Array = Any


class Step(Protocol):
    """What a layer may ask of the graph run it takes part in."""

    def state(self, name: str) -> Array: ...
    def noise(self, x: Array, p: float, feature: bool) -> Array: ...
    def running_update(self, path: str, mean: Array, var: Array) -> None: ...
    def factor(self, path: str) -> Array: ...


def updates_running_stats(module: "torch.nn.Module") -> bool:
    """A batch norm layer in training with running statistics: its step updates them."""
    return module.training and module.track_running_stats and module.running_mean is not None


def batch_norm(step: Step, path: str, module: "torch.nn.Module", x: Array) -> Array:
    """As ``nn.BatchNorm*d.forward``: batch statistics in training (and without
    running statistics), the running ones in evaluation; a training step
    returns ``(1 - f) * running + f * batch`` for each statistic, with the
    unbiased batch variance, ``f`` the momentum (or ``1 / batches`` when
    ``momentum=None``), as torch."""
    prefix = f"{path}." if path else ""
    weight = step.state(prefix + "weight") if module.affine else None
    bias = step.state(prefix + "bias") if module.affine else None
    if module.training or module.running_mean is None:
        y, mean, var = nn.batch_norm_train(x, weight, bias, module.eps)
        if updates_running_stats(module):
            f = step.factor(path)
            step.running_update(path, (1 - f) * step.state(prefix + "running_mean") + f * mean,
                                (1 - f) * step.state(prefix + "running_var") + f * var)
        return y
    return nn.batch_norm_eval(x, step.state(prefix + "running_mean"), step.state(prefix + "running_var"),
                              weight, bias, module.eps)


def batch_norm_state(module: "torch.nn.Module") -> list[str]:
    """The tensors (relative names) a batch norm layer reads in its current mode."""
    names = ["weight", "bias"] if module.affine else []
    if module.running_mean is not None and (updates_running_stats(module) or not module.training):
        names += ["running_mean", "running_var"]
    return names


def dropout(step: Step, path: str, module: "torch.nn.Module", x: Array) -> Array:
    return dropout_values(step, x, module.p, module.training, feature=_is_feature_dropout(module))


def dropout_values(step: Step, x: Array, p: float, training: bool, feature: bool) -> Array:
    """torch's CPU dropout: identity for ``p = 0`` or in evaluation (no random
    draw), zeros for ``p = 1``, else ``x * noise`` with the noise drawn by the
    compiled module as torch draws it (``bernoulli(1 - p) / (1 - p)``)."""
    if not training or p == 0:
        return x
    if p == 1:
        return x * 0
    return x * step.noise(x, p, feature)


def _is_feature_dropout(module: "torch.nn.Module") -> bool:
    import torch
    return isinstance(module, (torch.nn.Dropout1d, torch.nn.Dropout2d, torch.nn.Dropout3d))


def layers() -> dict[type, tuple[Callable, Callable[[Any], list[str]]]]:
    """Leaf module types: ``(implementation, the state names it reads)``."""
    import torch
    nn_ = torch.nn
    table: dict[type, tuple[Callable, Callable]] = {}
    for kind in (nn_.BatchNorm1d, nn_.BatchNorm2d, nn_.BatchNorm3d):
        table[kind] = (batch_norm, batch_norm_state)
    for kind in (nn_.Dropout, nn_.Dropout1d, nn_.Dropout2d, nn_.Dropout3d):
        table[kind] = (dropout, lambda module: [])
    return table
