"""Layers ``sd.compile_module`` keeps whole (``torch.fx`` leaf modules)
instead of tracing through them, because their forward mutates state or
branches on it: batch normalisation, whose training step updates running
statistics in place, dropout, whose mask comes from torch's generator, and
attention (``nn.MultiheadAttention``, ``nn.TransformerEncoder[Layer]``), whose
forward branches on tensor properties and fast paths ``torch.fx`` cannot
trace; they are written here from their documented maths.

A layer's implementation gets the ``Step`` that runs the graph: it reads the
layer's parameters and buffers there (program inputs), takes the next dropout
noise, hands back new running statistics, which the compiled module copies
into the buffers after the call, and runs each submodule ``within`` its path,
so the graph view shows an encoder's layers, their attention, linear and norm
modules rather than one box for the whole encoder.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Protocol

import numpy as np

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
    def within(self, path: str, module: "torch.nn.Module") -> ContextManager[None]: ...


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


def _attention_check(module: "torch.nn.Module") -> str | None:
    if module.bias_k is not None or module.add_zero_attn:
        return "add_bias_kv=True and add_zero_attn=True are not supported"
    if module.training and module.dropout > 0:
        return ("attention dropout in training draws its mask inside torch's fused attention, which a compiled "
                "module cannot reproduce: build it with dropout=0.0, or compile it in eval()")
    return None


def _project(x: Array, weight: Array, bias: Array | None) -> Array:
    return nn.linear(x, weight, bias)


def attention(step: Step, path: str, module: "torch.nn.Module", query: Array, key: Array, value: Array,
              key_padding_mask: Array | None = None, need_weights: bool = True, attn_mask: Array | None = None,
              average_attn_weights: bool = True, is_causal: bool = False) -> tuple[Array, Array | None]:
    """``nn.MultiheadAttention.forward`` (no attention dropout): scaled dot
    products per head, boolean masks as ``-inf``, float masks added."""
    name = (lambda n: f"{path}.{n}" if path else n)
    unbatched = query.ndim == 2
    if unbatched:
        query, key, value = query[:, None], key[:, None], value[:, None]
        key_padding_mask = None if key_padding_mask is None else key_padding_mask[None]
    if module.batch_first and not unbatched:
        query, key, value = (np.swapaxes(t, 0, 1) for t in (query, key, value))
    embed, heads = module.embed_dim, module.num_heads
    bias = step.state(name("in_proj_bias")) if module.in_proj_bias is not None else None
    biases = [None] * 3 if bias is None else [bias[k * embed:(k + 1) * embed] for k in range(3)]
    if module._qkv_same_embed_dim:
        w = step.state(name("in_proj_weight"))
        weights = [w[k * embed:(k + 1) * embed] for k in range(3)]
    else:
        weights = [step.state(name(f"{c}_proj_weight")) for c in "qkv"]
    q, k, v = (_project(t, w_, b_) for t, w_, b_ in zip((query, key, value), weights, biases))
    length, batch, source = q.shape[0], q.shape[1], k.shape[0]
    d = embed // heads

    def split(t: Array, n: int) -> Array:  # (n, N, E) -> (N, H, n, d)
        return np.transpose(t.reshape((n, batch, heads, d)), (1, 2, 0, 3))

    q, k, v = split(q, length), split(k, source), split(v, source)
    scores = (q * (1 / math.sqrt(d))) @ np.swapaxes(k, -1, -2)
    if attn_mask is None and is_causal:
        attn_mask = np.triu(np.ones((length, source)), 1) > 0
    if attn_mask is not None:
        mask = attn_mask if attn_mask.ndim == 2 else attn_mask.reshape((batch, heads, length, source))
        scores = _masked(scores, mask)
    if key_padding_mask is not None:
        scores = _masked(scores, key_padding_mask[:, None, None, :])
    weights_ = nn.softmax(scores, -1)
    out = np.transpose(weights_ @ v, (2, 0, 1, 3)).reshape((length, batch, embed))
    with step.within(name("out_proj"), module.out_proj):
        out = _project(out, step.state(name("out_proj.weight")),
                       step.state(name("out_proj.bias")) if module.out_proj.bias is not None else None)
    if module.batch_first and not unbatched:
        out = np.swapaxes(out, 0, 1)
    if unbatched:
        out = out[:, 0]
    if not need_weights:
        return out, None
    averaged = np.mean(weights_, axis=1) if average_attn_weights else weights_
    return out, (averaged[0] if unbatched else averaged)


def _masked(scores: Array, mask: Array) -> Array:
    if np.dtype(str(mask.dtype)) == np.bool_:
        return np.where(mask, -np.inf, scores)
    return scores + mask


def attention_state(module: "torch.nn.Module") -> list[str]:
    names = ["in_proj_weight"] if module._qkv_same_embed_dim else ["q_proj_weight", "k_proj_weight", "v_proj_weight"]
    names += ["in_proj_bias"] if module.in_proj_bias is not None else []
    return names + ["out_proj.weight"] + (["out_proj.bias"] if module.out_proj.bias is not None else [])


def encoder_layer(step: Step, path: str, module: "torch.nn.Module", src: Array, src_mask: Array | None = None,
                  src_key_padding_mask: Array | None = None, is_causal: bool = False) -> Array:
    """``nn.TransformerEncoderLayer.forward`` (its unfused path), post- or pre-norm."""
    name = (lambda n: f"{path}.{n}" if path else n)

    def norm(which: str, x: Array) -> Array:
        layer = getattr(module, which)
        with step.within(name(which), layer):
            return nn.layer_norm(x, layer.normalized_shape, step.state(name(f"{which}.weight")),
                                 step.state(name(f"{which}.bias")) if layer.bias is not None else None, layer.eps)

    def linear(which: str, x: Array) -> Array:
        bias = step.state(name(f"{which}.bias")) if getattr(module, which).bias is not None else None
        with step.within(name(which), getattr(module, which)):
            return nn.linear(x, step.state(name(f"{which}.weight")), bias)

    def self_attention(x: Array) -> Array:
        with step.within(name("self_attn"), module.self_attn):
            out, _ = attention(step, name("self_attn"), module.self_attn, x, x, x, src_key_padding_mask, False,
                               src_mask, True, is_causal)
        return dropout(step, name("dropout1"), module.dropout1, out)

    def feed_forward(x: Array) -> Array:
        h = dropout(step, name("dropout"), module.dropout, _activation(module.activation)(linear("linear1", x)))
        return dropout(step, name("dropout2"), module.dropout2, linear("linear2", h))

    x = src
    if module.norm_first:
        x = x + self_attention(norm("norm1", x))
        return x + feed_forward(norm("norm2", x))
    x = norm("norm1", x + self_attention(x))
    return norm("norm2", x + feed_forward(x))


def _activation(fn: Any) -> Callable:
    import torch
    import torch.nn.functional as F
    if fn is F.relu or isinstance(fn, torch.nn.ReLU):
        return nn.relu
    if fn is F.gelu or isinstance(fn, torch.nn.GELU):
        return lambda x: nn.gelu(x, getattr(fn, "approximate", "none"))
    raise ValueError(f"activation {fn!r} is not supported (relu or gelu)")


def _encoder_check(module: "torch.nn.Module") -> str | None:
    try:
        _activation(module.activation)
    except ValueError as err:
        return str(err)
    if module.training and module.dropout.p > 0:
        return ("dropout in training: its attention dropout draws its mask inside torch's fused attention, which "
                "a compiled module cannot reproduce; build the layer with dropout=0.0, or compile it in eval()")
    return _attention_check(module.self_attn)


def encoder_state(module: "torch.nn.Module") -> list[str]:
    names = [f"self_attn.{n}" for n in attention_state(module.self_attn)]
    for which in ("linear1", "linear2", "norm1", "norm2"):
        layer = getattr(module, which)
        names += [f"{which}.weight"] + ([f"{which}.bias"] if layer.bias is not None else [])
    return names


def encoder(step: Step, path: str, module: "torch.nn.Module", src: Array, mask: Array | None = None,
            src_key_padding_mask: Array | None = None, is_causal: bool | None = None) -> Array:
    """``nn.TransformerEncoder.forward``: its layers in turn, then its norm."""
    name = (lambda n: f"{path}.{n}" if path else n)
    x = src
    for k, layer in enumerate(module.layers):
        with step.within(name(f"layers.{k}"), layer):
            x = encoder_layer(step, name(f"layers.{k}"), layer, x, mask, src_key_padding_mask, bool(is_causal))
    if module.norm is None:
        return x
    norm = module.norm
    with step.within(name("norm"), norm):
        return nn.layer_norm(x, norm.normalized_shape, step.state(name("norm.weight")),
                             step.state(name("norm.bias")) if norm.bias is not None else None, norm.eps)


def _encoder_stack_check(module: "torch.nn.Module") -> str | None:
    import torch
    if module.norm is not None and not isinstance(module.norm, torch.nn.LayerNorm):
        return "a norm other than nn.LayerNorm is not supported"
    return next(filter(None, (_encoder_check(layer) for layer in module.layers)), None)


def encoder_stack_state(module: "torch.nn.Module") -> list[str]:
    names = [f"layers.{k}.{n}" for k, layer in enumerate(module.layers) for n in encoder_state(layer)]
    if module.norm is not None:
        names += ["norm.weight"] + (["norm.bias"] if module.norm.bias is not None else [])
    return names


@dataclass(frozen=True)
class Layer:
    """A leaf module: its implementation, the state names (relative to the
    layer) it reads in the layer's current mode, and a compile-time check."""
    run: Callable
    state: Callable[[Any], list[str]]
    check: Callable[[Any], str | None] = lambda module: None


@functools.cache
def layers() -> dict[type, Layer]:
    """Leaf module types, by class."""
    import torch
    nn_ = torch.nn
    table: dict[type, Layer] = {}
    for kind in (nn_.BatchNorm1d, nn_.BatchNorm2d, nn_.BatchNorm3d):
        table[kind] = Layer(batch_norm, batch_norm_state)
    for kind in (nn_.Dropout, nn_.Dropout1d, nn_.Dropout2d, nn_.Dropout3d):
        table[kind] = Layer(dropout, lambda module: [])
    table[nn_.MultiheadAttention] = Layer(attention, attention_state, _attention_check)
    table[nn_.TransformerEncoderLayer] = Layer(encoder_layer, encoder_state, _encoder_check)
    table[nn_.TransformerEncoder] = Layer(encoder, encoder_stack_state, _encoder_stack_check)
    return table
