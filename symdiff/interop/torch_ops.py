"""Which torch operators ``sd.compile_module`` runs, and as what numpy code.

One table per kind of ``torch.fx`` node: ``FUNCTIONS`` (``call_function``
targets: torch and ``torch.nn.functional`` functions, Python operators),
``METHODS`` (``call_method`` names: ``x.view(...)``), and the leaf modules in
``torch_layers``.  Each entry is an ``Op``: the implementation, taking
torch's own arguments and returning what torch would (on numpy-style arrays,
traced or not), and an optional ``check`` of the node's constant arguments,
so that a form we do not run (``ceil_mode=True``) is refused when the module
is compiled, not when it is called.  The method and function spellings of an
operator (``x.sum(1)``, ``torch.sum(x, 1)``) share one implementation.
"""
from __future__ import annotations

import builtins
import operator
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from . import nn_numpy as nn

Array = Any


@dataclass(frozen=True)
class Op:
    """A supported operator: ``fn(*args, **kwargs)`` with torch's arguments;
    ``check(*args, **kwargs)`` returns why a call's constant arguments are
    not supported (or None)."""
    fn: Callable
    check: Callable[..., str | None] | None = None


def _is_array(x: Any) -> bool:
    return hasattr(x, "shape") and hasattr(x, "dtype") and not isinstance(x, np.generic)


def _dims(dim: Any, ndim: int) -> tuple[int, ...] | None:
    """torch's ``dim`` (None, an int, a tuple/list; ``()`` meaning all) as numpy axes."""
    if dim is None or dim == () or dim == []:
        return None
    return tuple(d % ndim for d in (dim if isinstance(dim, (tuple, list)) else (dim,)))


def _shape_args(shape: tuple) -> tuple:
    return tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else tuple(shape)


_DTYPES = {"float32": "float32", "float64": "float64", "float": "float32", "double": "float64",
           "float16": "float16", "half": "float16", "bfloat16": "bfloat16",
           "int32": "int32", "int64": "int32", "long": "int32", "int": "int32", "bool": "bool"}


def _numpy_dtype(dtype: Any) -> str:
    name = str(dtype).removeprefix("torch.")
    if name not in _DTYPES:
        raise TypeError(f"dtype {dtype} is not supported (float32, float64, float16, bfloat16, int32/int64 as "
                        "int32, bool)")
    return _DTYPES[name]


def _cast(x: Array, dtype: Any) -> Array:
    return x.astype(_numpy_dtype(dtype))


def _to(x: Array, *args: Any, **kwargs: Any) -> Array:
    """``x.to(dtype)``, ``x.to(other)`` (other's dtype), ``x.to(device, dtype)``:
    only the dtype counts; a device is the one the compiled module runs on."""
    wanted = [a.dtype if _is_array(a) else a for a in (*args, kwargs.get("dtype"))]
    dtypes = [d for d in wanted if str(d).removeprefix("torch.") in _DTYPES]
    return _cast(x, dtypes[-1]) if dtypes else x


# -- reductions ----------------------------------------------------------------------------
def _reduction(fn: Callable) -> Callable:
    def reduce(x: Array, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Array:
        y = fn(x, axis=_dims(dim, x.ndim), keepdims=keepdim)
        return y if dtype is None else _cast(y, dtype)
    return reduce


def _amax(x: Array, dim: Any = (), keepdim: bool = False) -> Array:
    return np.max(x, axis=_dims(dim, x.ndim), keepdims=keepdim)


def _amin(x: Array, dim: Any = (), keepdim: bool = False) -> Array:
    return np.min(x, axis=_dims(dim, x.ndim), keepdims=keepdim)


def _extremum(largest: bool) -> Callable:
    """``torch.max(x)``, ``torch.max(x, dim, keepdim) -> (values, indices)``, ``torch.max(x, other)``."""
    def fn(x: Array, dim: Any = None, keepdim: bool = False) -> Any:
        if _is_array(dim):
            return (np.maximum if largest else np.minimum)(x, dim)
        if dim is None:
            return (np.max if largest else np.min)(x)
        values = (np.max if largest else np.min)(x, axis=dim, keepdims=keepdim)
        indices = (np.argmax if largest else np.argmin)(x, axis=dim)
        return values, (np.expand_dims(indices, dim) if keepdim else indices)
    return fn


# -- shapes -----------------------------------------------------------------------------------
def _view(x: Array, *shape: Any) -> Array:
    return np.reshape(x, _shape_args(shape))


def _flatten(x: Array, start_dim: int = 0, end_dim: int = -1) -> Array:
    if x.ndim == 0:
        return np.reshape(x, (1,))
    start, end = start_dim % x.ndim, end_dim % x.ndim
    return np.reshape(x, tuple(x.shape[:start]) + (-1,) + tuple(x.shape[end + 1:]))


def _permute(x: Array, *dims: Any) -> Array:
    return np.transpose(x, _shape_args(dims))


def _transpose(x: Array, dim0: int, dim1: int) -> Array:
    return np.swapaxes(x, dim0, dim1)


def _t(x: Array) -> Array:
    return x if x.ndim < 2 else np.swapaxes(x, 0, 1)


def _squeeze(x: Array, dim: Any = None) -> Array:
    if dim is None:
        return np.squeeze(x)
    axes = tuple(d for d in _dims(dim, x.ndim) if x.shape[d] == 1)
    return np.squeeze(x, axis=axes) if axes else x


def _expand(x: Array, *sizes: Any) -> Array:
    sizes = _shape_args(sizes)
    lead = len(sizes) - x.ndim
    shape = tuple(s if s != -1 else x.shape[k - lead] for k, s in enumerate(sizes))
    return np.broadcast_to(x, shape)


def _repeat(x: Array, *sizes: Any) -> Array:
    sizes = _shape_args(sizes)
    x = np.reshape(x, (1,) * (len(sizes) - x.ndim) + tuple(x.shape))
    return np.tile(x, sizes)


def _size(x: Array, dim: int | None = None) -> Any:
    return tuple(x.shape) if dim is None else x.shape[dim]


def _cat(tensors: Sequence[Array], dim: int = 0) -> Array:
    return np.concatenate(list(tensors), axis=dim)


def _stack(tensors: Sequence[Array], dim: int = 0) -> Array:
    return np.stack(list(tensors), axis=dim)


def _split_at(x: Array, sizes: Sequence[int], dim: int) -> tuple:
    bounds = np.cumsum([0] + list(sizes))
    return tuple(x[(slice(None),) * (dim % x.ndim) + (slice(int(a), int(b)),)] for a, b in zip(bounds, bounds[1:]))


def _split(x: Array, split_size_or_sections: Any, dim: int = 0) -> tuple:
    n = x.shape[dim]
    if isinstance(split_size_or_sections, int):
        s = split_size_or_sections
        sizes = [min(s, n - k) for k in range(0, n, s)]
    else:
        sizes = list(split_size_or_sections)
    return _split_at(x, sizes, dim)


def _chunk(x: Array, chunks: int, dim: int = 0) -> tuple:
    return _split(x, -(-x.shape[dim] // chunks), dim)


# -- elementwise ----------------------------------------------------------------------------
def _add(x: Any, y: Any, *, alpha: float = 1) -> Any:
    return x + y * alpha if alpha != 1 else x + y


def _sub(x: Any, y: Any, *, alpha: float = 1) -> Any:
    return x - y * alpha if alpha != 1 else x - y


def _div(x: Any, y: Any, *, rounding_mode: str | None = None) -> Any:
    if rounding_mode is None:
        return x / y
    return np.floor(x / y) if rounding_mode == "floor" else np.trunc(x / y)


def _clamp(x: Array, min: Any = None, max: Any = None) -> Array:  # noqa: A002 (torch's names)
    if min is not None:
        x = np.maximum(x, min)
    return x if max is None else np.minimum(x, max)


def _where(condition: Array, x: Any, y: Any) -> Array:
    return np.where(condition, x, y)


def _rsqrt(x: Array) -> Array:
    return 1 / np.sqrt(x)


def _pad(x: Array, pad: Sequence[int], mode: str = "constant", value: float | None = None) -> Array:
    """``F.pad``: ``pad`` lists (before, after) pairs from the last axis backwards."""
    pairs = [(pad[k], pad[k + 1]) for k in range(0, len(pad), 2)]
    widths = [(0, 0)] * (x.ndim - len(pairs)) + pairs[::-1]
    numpy_mode = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}[mode]
    if numpy_mode == "constant":
        return np.pad(x, widths, constant_values=value or 0.0)
    return np.pad(x, widths, mode=numpy_mode)


def _unbatched(n: int, fn: Callable) -> Callable:
    """``fn`` for inputs with a batch axis; an input of rank ``n + 1`` (no batch) gets one."""
    def run(x: Array, *args: Any, **kwargs: Any) -> Array:
        if x.ndim == n + 1:
            return fn(x[None], *args, **kwargs)[0]
        return fn(x, *args, **kwargs)
    return run


def _conv(x: Array, weight: Array, bias: Array | None = None, stride: Any = 1, padding: Any = 0,
          dilation: Any = 1, groups: int = 1) -> Array:
    n = weight.ndim - 2
    if isinstance(padding, str):
        if padding == "same":
            dil = dilation if isinstance(dilation, (tuple, list)) else (dilation,) * n
            totals = [d * (k - 1) for d, k in zip(dil, weight.shape[2:])]
            pairs = [(t // 2, t - t // 2) for t in totals]
            x = _pad(x, [v for pair in pairs[::-1] for v in pair])
        padding = 0
    return _unbatched(n, nn.conv)(x, weight, bias, stride, padding, dilation, groups)


def _conv_check(x: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0, dilation: Any = 1,
                groups: int = 1) -> str | None:
    if padding == "same" and any(s != 1 for s in (stride if isinstance(stride, (tuple, list)) else (stride,))):
        return "padding='same' needs stride 1 (as in torch)"
    return None


def _pool_check(*args: Any, ceil_mode: bool = False, return_indices: bool = False, **kwargs: Any) -> str | None:
    names = ["kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices"]
    given = dict(zip(names, args[1:]))
    if given.get("ceil_mode", ceil_mode):
        return "ceil_mode=True is not supported: pad the input (F.pad) so the windows fit"
    if given.get("return_indices", return_indices):
        return "return_indices=True is not supported"
    return None


def _avg_pool_check(*args: Any, ceil_mode: bool = False, **kwargs: Any) -> str | None:
    if (args[4] if len(args) > 4 else ceil_mode):
        return "ceil_mode=True is not supported: pad the input (F.pad) so the windows fit"
    return None


def _max_pool(n: int) -> Callable:
    def pool(x: Array, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
             ceil_mode: bool = False, return_indices: bool = False) -> Array:
        return _unbatched(n, nn.max_pool)(x, n, kernel_size, stride, padding, dilation)
    return pool


def _avg_pool(n: int) -> Callable:
    def pool(x: Array, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,
             count_include_pad: bool = True, divisor_override: int | None = None) -> Array:
        return _unbatched(n, nn.avg_pool)(x, n, kernel_size, stride, padding, count_include_pad, divisor_override)
    return pool


def _adaptive_avg_pool(n: int) -> Callable:
    def pool(x: Array, output_size: Any) -> Array:
        return nn.adaptive_avg_pool(x, n, output_size)
    return pool


def _legacy_reduction_check(*args: Any, size_average: Any = None, reduce: Any = None, **kwargs: Any) -> str | None:
    if size_average is not None or reduce is not None:
        return "size_average= and reduce= are deprecated in torch: pass reduction='mean'|'sum'|'none'"
    return None


def _mse_loss(x: Array, target: Array, size_average: Any = None, reduce: Any = None, reduction: str = "mean",
              weight: Array | None = None) -> Array:
    if weight is not None:
        d = x - target
        return nn._reduce(d * d * weight, reduction)
    return nn.mse_loss(x, target, reduction)


def _l1_loss(x: Array, target: Array, size_average: Any = None, reduce: Any = None,
             reduction: str = "mean", weight: Array | None = None) -> Array:
    loss = np.abs(x - target)
    return nn._reduce(loss if weight is None else loss * weight, reduction)


def _cross_entropy(x: Array, target: Array, weight: Array | None = None, size_average: Any = None,
                   ignore_index: int = -100, reduce: Any = None, reduction: str = "mean",
                   label_smoothing: float = 0.0) -> Array:
    return nn.cross_entropy(x, target, weight, ignore_index, reduction, label_smoothing)


def _nll_loss(x: Array, target: Array, weight: Array | None = None, size_average: Any = None,
              ignore_index: int = -100, reduce: Any = None, reduction: str = "mean") -> Array:
    return nn.nll_loss(x, target, weight, ignore_index, reduction)


def _embedding(idx: Array, weight: Array, padding_idx: int | None = None, max_norm: Any = None,
               norm_type: float = 2.0, scale_grad_by_freq: bool = False, sparse: bool = False) -> Array:
    out = nn.embedding(idx, weight)
    if padding_idx is None:
        return out
    # the padding row is zero (torch initialises it so and never updates it): a mask keeps its gradient zero
    return out * np.expand_dims(nn._indicator(idx != padding_idx % weight.shape[0], out.dtype), -1)


def _embedding_check(idx: Any, weight: Any, padding_idx: Any = None, max_norm: Any = None, *args: Any,
                     **kwargs: Any) -> str | None:
    if max_norm is not None:
        return "max_norm= renormalises the weight in place: not supported"
    return None


def _batch_norm(x: Array, running_mean: Array | None, running_var: Array | None, weight: Array | None = None,
                bias: Array | None = None, training: bool = False, momentum: float = 0.1,
                eps: float = 1e-5) -> Array:
    if training or running_mean is None:
        return nn.batch_norm_train(x, weight, bias, eps)[0]
    return nn.batch_norm_eval(x, running_mean, running_var, weight, bias, eps)


def _batch_norm_check(x: Any, running_mean: Any, running_var: Any, weight: Any = None, bias: Any = None,
                      training: bool = False, *args: Any, **kwargs: Any) -> str | None:
    if training and running_mean is not None:
        return ("F.batch_norm in training with running statistics updates them in place: use nn.BatchNorm1d/2d/3d "
                "(compiled as a layer), or pass running_mean=None")
    return None


def _softmax(fn: Callable) -> Callable:
    def run(x: Array, dim: int | None = None, _stacklevel: int = 3, dtype: Any = None) -> Array:
        if dim is None:
            dim = 0 if x.ndim in (0, 1, 3) else 1  # torch's legacy implicit choice
        x = x if dtype is None else _cast(x, dtype)
        return fn(x, dim)
    return run


def _activation(fn: Callable) -> Callable:
    """An elementwise activation whose torch form takes ``inplace``: the
    interpreter rebinds the input for in-place calls."""
    def run(x: Array, *args: Any, inplace: bool = False, **kwargs: Any) -> Array:
        return fn(x, *args, **kwargs)
    return run


def _hardtanh(x: Array, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> Array:
    return np.clip(x, min_val, max_val)


def _variance(x: Array, dim: Any = None, unbiased: bool | None = None, keepdim: bool = False, *,
              correction: float | None = None) -> Array:
    """``torch.var``: ``correction`` (default 1, Bessel's) or the older ``unbiased``."""
    if isinstance(dim, bool):  # torch.var(x, False): the positional ``unbiased`` form
        dim, unbiased = None, dim
    ddof = correction if correction is not None else (0 if unbiased is False else 1)
    return np.var(x, axis=_dims(dim, x.ndim), ddof=ddof, keepdims=keepdim)


def _std(*args: Any, **kwargs: Any) -> Array:
    return np.sqrt(_variance(*args, **kwargs))


def _normalize(x: Array, p: float = 2.0, dim: int = 1, eps: float = 1e-12, out: None = None) -> Array:
    """``F.normalize``: ``x / max(||x||_p, eps)`` along ``dim``."""
    norm = np.sum(np.abs(x) ** p, axis=dim, keepdims=True) ** (1 / p) if p != 2 else \
        np.sqrt(np.sum(x * x, axis=dim, keepdims=True))
    return x / np.maximum(norm, eps)


def _sdpa(query: Array, key: Array, value: Array, attn_mask: Array | None = None, dropout_p: float = 0.0,
          is_causal: bool = False, scale: float | None = None, enable_gqa: bool = False) -> Array:
    """``F.scaled_dot_product_attention`` without dropout: softmax(q k^T scale + mask) v."""
    length, source = query.shape[-2], key.shape[-2]
    scores = (query * (scale if scale is not None else 1 / np.sqrt(query.shape[-1]))) @ np.swapaxes(key, -1, -2)
    if is_causal:
        scores = np.where(np.triu(np.ones((length, source)), 1) > 0, -np.inf, scores)
    if attn_mask is not None:
        masked = np.dtype(str(attn_mask.dtype)) == np.bool_
        scores = np.where(attn_mask, scores, -np.inf) if masked else scores + attn_mask
    return nn.softmax(scores, -1) @ value


def _sdpa_check(*args: Any, dropout_p: float = 0.0, enable_gqa: bool = False, **kwargs: Any) -> str | None:
    if (args[4] if len(args) > 4 else dropout_p) or enable_gqa:
        return "dropout_p > 0 and enable_gqa are not supported"
    return None


def _creation(fill: Callable) -> Callable:
    """``torch.zeros(*size, dtype=...)`` & co.: a traced constant (device and layout ignored)."""
    def make(*size: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False, **kwargs: Any) -> Array:
        return fill(_shape_args(size), _numpy_dtype(dtype) if dtype is not None else "float32")
    return make


def _full(size: Sequence[int], fill_value: float, *, dtype: Any = None, device: Any = None, **kwargs: Any) -> Array:
    kind = _numpy_dtype(dtype) if dtype is not None else ("bool" if isinstance(fill_value, bool) else "float32")
    return np.full(tuple(size), fill_value, dtype=kind)


def _arange(*bounds: Any, dtype: Any = None, device: Any = None, **kwargs: Any) -> Array:
    kind = _numpy_dtype(dtype) if dtype is not None else (
        "int32" if all(isinstance(b, int) for b in bounds) else "float32")
    return np.arange(*bounds, dtype=kind)


def _like(fill: Callable) -> Callable:
    def make(x: Array, dtype: Any = None, **kwargs: Any) -> Array:
        return fill(x.shape, _numpy_dtype(dtype) if dtype is not None else x.dtype)
    return make


def _triangle(keep_upper: bool) -> Callable:
    """``torch.triu``/``tril`` of the last two axes."""
    def tri(x: Array, diagonal: int = 0) -> Array:
        rows, cols = x.shape[-2], x.shape[-1]
        upper = (np.arange(cols)[None, :] - np.arange(rows)[:, None]) >= diagonal
        below = (np.arange(cols)[None, :] - np.arange(rows)[:, None]) <= diagonal
        return np.where(upper if keep_upper else below, x, np.zeros_like(x))
    return tri


def _interpolate(x: Array, size: Any = None, scale_factor: Any = None, mode: str = "nearest",
                 align_corners: Any = None, recompute_scale_factor: Any = None, antialias: bool = False) -> Array:
    return nn.interpolate_nearest(x, x.ndim - 2, size, scale_factor)


def _interpolate_check(x: Any, size: Any = None, scale_factor: Any = None, mode: str = "nearest",
                       *args: Any, **kwargs: Any) -> str | None:
    if mode != "nearest":
        return f"mode={mode!r} is not supported (mode='nearest' is)"
    if kwargs.get("recompute_scale_factor"):
        return "recompute_scale_factor=True is not supported"
    return None


def _loss(fn: Callable, *names: str) -> Callable:
    """A loss taking torch's arguments (the deprecated ``size_average``/``reduce``
    left out: ``_legacy_reduction_check`` refuses them) as ``fn``'s by name."""
    def run(x: Array, target: Array, *args: Any, **kwargs: Any) -> Array:
        given = dict(zip(names, args))
        given.update(kwargs)
        given.pop("size_average", None)
        given.pop("reduce", None)
        return fn(x, target, **given)
    return run


def _einsum(equation: str, *operands: Any) -> Array:
    if len(operands) == 1 and isinstance(operands[0], (tuple, list)):
        operands = tuple(operands[0])
    return np.einsum(equation, *operands)


def _getattr(x: Any, name: str) -> Any:
    if _is_array(x):
        attrs = {"shape": lambda: tuple(x.shape), "ndim": lambda: x.ndim, "T": lambda: np.transpose(x),
                 "mT": lambda: np.swapaxes(x, -1, -2), "dtype": lambda: x.dtype}
        if name not in attrs:
            raise AttributeError(f"tensor attribute {name!r} is not supported (only {', '.join(attrs)})")
        return attrs[name]()
    return getattr(x, name)


_REDUCTIONS = {"sum": _reduction(np.sum), "mean": _reduction(np.mean), "prod": _reduction(np.prod),
               "amax": _amax, "amin": _amin, "max": _extremum(True), "min": _extremum(False),
               "argmax": lambda x, dim=None, keepdim=False: np.argmax(x, axis=dim, keepdims=keepdim),
               "var": _variance, "std": _std}

_ELEMENTWISE = {
    "relu": nn.relu, "tanh": np.tanh, "sigmoid": nn.sigmoid, "exp": np.exp, "log": np.log, "log1p": np.log1p,
    "expm1": np.expm1, "sqrt": np.sqrt, "rsqrt": _rsqrt, "abs": np.abs, "neg": np.negative, "sin": np.sin,
    "cos": np.cos, "square": np.square, "reciprocal": np.reciprocal, "sign": np.sign, "floor": np.floor,
    "ceil": np.ceil, "round": np.round, "erf": nn.erf, "silu": nn.silu,
    "add": _add, "sub": _sub, "subtract": _sub, "mul": np.multiply, "multiply": np.multiply, "div": _div,
    "divide": _div, "true_divide": np.divide, "pow": np.power, "maximum": np.maximum, "minimum": np.minimum,
    "clamp": _clamp, "clip": _clamp, "where": _where, "matmul": np.matmul, "mm": np.matmul, "bmm": np.matmul,
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
    "ge": np.greater_equal, "logical_not": np.logical_not,
}

_SHAPES = {"view": _view, "reshape": _view, "flatten": _flatten, "permute": _permute, "transpose": _transpose,
           "swapaxes": _transpose, "t": _t, "unsqueeze": np.expand_dims, "squeeze": _squeeze, "expand": _expand,
           "repeat": _repeat, "split": _split, "chunk": _chunk}

METHODS: dict[str, Op] = {name: Op(fn) for name, fn in {**_REDUCTIONS, **_ELEMENTWISE, **_SHAPES}.items()}
METHODS.update({
    "size": Op(_size), "dim": Op(lambda x: x.ndim), "numel": Op(lambda x: int(np.prod(x.shape))),
    "contiguous": Op(lambda x, *a, **k: x), "clone": Op(lambda x, *a, **k: x + 0),
    "view_as": Op(lambda x, other: np.reshape(x, other.shape)),
    "reshape_as": Op(lambda x, other: np.reshape(x, other.shape)),
    "expand_as": Op(lambda x, other: np.broadcast_to(x, other.shape)),
    "type_as": Op(lambda x, other: x.astype(other.dtype)), "to": Op(_to),
    "float": Op(lambda x: x.astype("float32")), "double": Op(lambda x: x.astype("float64")),
    "half": Op(lambda x: x.astype("float16")), "bfloat16": Op(lambda x: x.astype("bfloat16")),
    "long": Op(lambda x: x.astype("int32")), "int": Op(lambda x: x.astype("int32")),
    "softmax": Op(_softmax(nn.softmax)), "log_softmax": Op(_softmax(nn.log_softmax)),
    "masked_fill": Op(lambda x, mask, value: np.where(mask, value, x)),
    # x.where(condition, y) is torch.where(condition, x, y): the tensor is the value, not the condition
    "where": Op(lambda x, condition, y: np.where(condition, x, y)),
    "triu": Op(_triangle(True)), "tril": Op(_triangle(False)),
})


def _functions() -> dict[Callable, Op]:
    """The ``call_function`` table (built on first use: it imports torch)."""
    import torch
    import torch.nn.functional as F

    table: dict[Callable, Op] = {
        operator.add: Op(operator.add), operator.sub: Op(operator.sub), operator.mul: Op(operator.mul),
        operator.truediv: Op(operator.truediv), operator.floordiv: Op(operator.floordiv),
        operator.neg: Op(operator.neg), operator.pos: Op(operator.pos), operator.pow: Op(operator.pow),
        operator.matmul: Op(operator.matmul), operator.getitem: Op(operator.getitem),
        operator.eq: Op(operator.eq), operator.ne: Op(operator.ne), operator.lt: Op(operator.lt),
        operator.le: Op(operator.le), operator.gt: Op(operator.gt), operator.ge: Op(operator.ge),
        operator.and_: Op(operator.and_), operator.or_: Op(operator.or_), operator.invert: Op(operator.invert),
        builtins.getattr: Op(_getattr),
        torch.cat: Op(_cat), torch.concat: Op(_cat), torch.stack: Op(_stack), torch.einsum: Op(_einsum),
        torch.softmax: Op(_softmax(nn.softmax)), torch.log_softmax: Op(_softmax(nn.log_softmax)),
        F.softmax: Op(_softmax(nn.softmax)), F.log_softmax: Op(_softmax(nn.log_softmax)),
        F.linear: Op(nn.linear), F.relu: Op(_activation(nn.relu)), F.gelu: Op(_activation(nn.gelu)),
        F.silu: Op(_activation(nn.silu)), F.tanh: Op(np.tanh), F.sigmoid: Op(nn.sigmoid),
        F.softplus: Op(nn.softplus), F.leaky_relu: Op(_activation(nn.leaky_relu)), F.elu: Op(_activation(nn.elu)),
        F.hardtanh: Op(_hardtanh), F.layer_norm: Op(nn.layer_norm), F.group_norm: Op(nn.group_norm),
        F.batch_norm: Op(_batch_norm, _batch_norm_check),
        F.mse_loss: Op(_mse_loss, _legacy_reduction_check), F.l1_loss: Op(_l1_loss, _legacy_reduction_check),
        F.cross_entropy: Op(_cross_entropy, _legacy_reduction_check),
        F.nll_loss: Op(_nll_loss, _legacy_reduction_check),
        F.embedding: Op(_embedding, _embedding_check), F.pad: Op(_pad),
        torch.conv1d: Op(_conv, _conv_check), torch.conv2d: Op(_conv, _conv_check),
        torch.conv3d: Op(_conv, _conv_check),
        F.max_pool1d: Op(_max_pool(1), _pool_check), F.max_pool2d: Op(_max_pool(2), _pool_check),
        F.avg_pool1d: Op(_avg_pool(1), _avg_pool_check), F.avg_pool2d: Op(_avg_pool(2), _avg_pool_check),
        F.adaptive_avg_pool1d: Op(_adaptive_avg_pool(1)), F.adaptive_avg_pool2d: Op(_adaptive_avg_pool(2)),
        torch.flatten: Op(_flatten), torch.reshape: Op(_view), torch.permute: Op(_permute),
        torch.transpose: Op(_transpose), torch.t: Op(_t), torch.unsqueeze: Op(np.expand_dims),
        torch.squeeze: Op(_squeeze), torch.split: Op(_split), torch.chunk: Op(_chunk),
        F.hardswish: Op(_activation(nn.hardswish)), F.hardsigmoid: Op(_activation(nn.hardsigmoid)),
        F.mish: Op(_activation(nn.mish)), F.selu: Op(_activation(nn.selu)), F.celu: Op(_activation(nn.celu)),
        F.relu6: Op(_activation(nn.relu6)), F.logsigmoid: Op(nn.logsigmoid), F.softsign: Op(nn.softsign),
        F.prelu: Op(nn.prelu), F.glu: Op(nn.glu),
        F.binary_cross_entropy_with_logits: Op(
            _loss(nn.binary_cross_entropy_with_logits, "weight", "size_average", "reduce", "reduction",
                  "pos_weight"), _legacy_reduction_check),
        F.binary_cross_entropy: Op(_loss(nn.binary_cross_entropy, "weight", "size_average", "reduce", "reduction"),
                                   _legacy_reduction_check),
        F.smooth_l1_loss: Op(_loss(nn.smooth_l1_loss, "size_average", "reduce", "reduction", "beta"),
                             _legacy_reduction_check),
        F.huber_loss: Op(_loss(nn.huber_loss, "reduction", "delta", "weight")),
        F.kl_div: Op(_loss(nn.kl_div, "size_average", "reduce", "reduction", "log_target"),
                     _legacy_reduction_check),
        F.interpolate: Op(_interpolate, _interpolate_check),
        F.max_pool3d: Op(_max_pool(3), _pool_check), F.avg_pool3d: Op(_avg_pool(3), _avg_pool_check),
        F.adaptive_avg_pool3d: Op(_adaptive_avg_pool(3)),
        F.normalize: Op(_normalize), F.scaled_dot_product_attention: Op(_sdpa, _sdpa_check),
        torch.zeros: Op(_creation(np.zeros)), torch.ones: Op(_creation(np.ones)), torch.full: Op(_full),
        torch.arange: Op(_arange), torch.zeros_like: Op(_like(np.zeros)), torch.ones_like: Op(_like(np.ones)),
        torch.triu: Op(_triangle(True)), torch.tril: Op(_triangle(False)),
    }
    for name, fn in {**_REDUCTIONS, **_ELEMENTWISE}.items():
        if hasattr(torch, name):
            table.setdefault(getattr(torch, name), Op(fn))
    table[torch.relu] = Op(nn.relu)
    return table


_FUNCTIONS: dict[Callable, Op] | None = None


def function_op(target: Callable) -> Op | None:
    global _FUNCTIONS
    if _FUNCTIONS is None:
        _FUNCTIONS = _functions()
    try:
        return _FUNCTIONS.get(target)
    except TypeError:  # an unhashable target
        return None


def supported_functions() -> list[str]:
    function_op(operator.add)
    return sorted({display_name(t) for t in _FUNCTIONS})


def display_name(target: Any) -> str:
    """``torch.nn.functional.relu``, ``operator.add``, ``torch.conv2d``: how a user finds the operator."""
    import torch.nn.functional as F
    for name in dir(F):
        if getattr(F, name, None) is target and not name.startswith("_"):
            return f"torch.nn.functional.{name}"
    import torch
    for name in dir(torch):
        if not name.startswith("_") and getattr(torch, name, None) is target:
            return f"torch.{name}"
    module = getattr(target, "__module__", None) or "builtins"
    return f"{module}.{getattr(target, '__name__', repr(target))}"
