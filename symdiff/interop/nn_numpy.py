"""Neural-network operators written with the numpy operations symdiff traces.

``sd.compile_module`` runs a PyTorch module's graph with these on traced
arrays (they work on plain numpy arrays too, which is how the tests check
them).  Each follows PyTorch's definition, written so that symdiff's
derivative is the one torch computes and stays finite where torch's does:
``sigmoid`` through ``tanh`` (no ``exp`` overflow), ``softplus`` through
``log1p(exp(-|z|))``, softmaxes shifted by their maximum.  Convolutions and
pooling take their sliding windows in one step each: a pooling reduces over
the window axes of one view of its input (an affine index map, no copy), a
convolution gathers its window columns and multiplies them by the weight as
one matrix product per group; their backward is the tracer's own scatter
through the view or the gather.  symdiff has no ``erf``:
the exact GELU integrates ``exp(-t^2)`` with a 49-point Clenshaw-Curtis rule,
accurate to 5e-16 (and its derivative too) in float64.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from ..ir.tracer.reshuffle import remap

Array = Any  # a numpy array or a symdiff traced array


def _indicator(condition: Array, dtype: Any) -> Array:
    """1 where ``condition`` holds, else 0, in ``dtype`` (``np.where(c, 1.0, 0.0)``
    is float64, which would turn a float32 program's values into float64)."""
    return np.where(condition, 1.0, 0.0).astype(dtype)


def _pair(value: int | Sequence[int], n: int) -> tuple[int, ...]:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,) * n


# -- activations --------------------------------------------------------------------
def relu(x: Array) -> Array:
    return np.maximum(x, 0)


def sigmoid(x: Array) -> Array:
    return 0.5 + 0.5 * np.tanh(0.5 * x)


def silu(x: Array) -> Array:
    return x * sigmoid(x)


def _clenshaw_curtis(n: int, dtype: Any) -> tuple[Array, Array]:
    """Nodes and weights of the ``n + 1``-point Clenshaw-Curtis rule on
    ``[0, 1]`` (``n`` even), from their closed form: built with ``np.arange``
    and ``np.cos``, they are a few tasklets in a trace (a table of constants
    would be one tasklet per number), computed in ``dtype`` (integers times a
    float would be float64, and make a float32 program's values float64)."""
    k, j = np.arange(n + 1, dtype=dtype), np.arange(1, n // 2 + 1, dtype=dtype)
    theta = k * (math.pi / n)
    b = 2 - _indicator(j == n // 2, dtype)
    c = 2 - _indicator((k == 0) | (k == n), dtype)
    w = c / n * (1 - np.sum(b / (4 * j * j - 1) * np.cos(2 * j * theta[:, None]), axis=1))
    return (1 - np.cos(theta)) / 2, w / 2


def erf(x: Array) -> Array:
    """``2/sqrt(pi) * x * integral_0^1 exp(-(x s)^2) ds`` by a 49-point
    Clenshaw-Curtis rule (error 5e-16, derivative too); ``|x| > 6`` is clipped
    (``erf(6) = 1 - 2e-17``)."""
    xc = np.clip(x, -6.0, 6.0)
    s, w = _clenshaw_curtis(48, x.dtype)
    return xc * np.sum(np.exp(-(xc[..., None] * s) ** 2) * (w * (2 / math.sqrt(math.pi))), axis=-1)


def gelu(x: Array, approximate: str = "none") -> Array:
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + erf(x * (1 / math.sqrt(2))))


def softplus(x: Array, beta: float = 1.0, threshold: float = 20.0) -> Array:
    """``log(1 + exp(beta x)) / beta``, linear where ``beta x > threshold`` (as torch)."""
    z = x * beta
    smooth = (np.maximum(z, 0) + np.log1p(np.exp(np.minimum(z, -z)))) / beta
    return np.where(z > threshold, x, smooth)


def leaky_relu(x: Array, negative_slope: float = 0.01) -> Array:
    return np.where(x > 0, x, x * negative_slope)


def elu(x: Array, alpha: float = 1.0) -> Array:
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0)))


def relu6(x: Array) -> Array:
    return np.clip(x, 0, 6)


def hardsigmoid(x: Array) -> Array:
    return relu6(x + 3) * (1 / 6)


def hardswish(x: Array) -> Array:
    return x * hardsigmoid(x)


def mish(x: Array) -> Array:
    return x * np.tanh(softplus(x))


def celu(x: Array, alpha: float = 1.0) -> Array:
    return np.maximum(x, 0) + np.minimum(alpha * np.expm1(np.minimum(x, 0) / alpha), 0)


_SELU_ALPHA, _SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946


def selu(x: Array) -> Array:
    return _SELU_SCALE * (np.maximum(x, 0) + np.minimum(_SELU_ALPHA * np.expm1(np.minimum(x, 0)), 0))


def logsigmoid(x: Array) -> Array:
    return -softplus(-x)


def softsign(x: Array) -> Array:
    return x / (1 + np.abs(x))


def prelu(x: Array, weight: Array) -> Array:
    """One slope per channel (axis 1), or one for all."""
    slope = weight if weight.size == 1 or x.ndim < 2 else weight.reshape((-1,) + (1,) * (x.ndim - 2))
    return np.where(x > 0, x, x * slope)


def glu(x: Array, dim: int = -1) -> Array:
    half = x.shape[dim] // 2
    a, b = np.split(x, [half], axis=dim)
    return a * sigmoid(b)


def softmax(x: Array, dim: int) -> Array:
    e = np.exp(x - np.max(x, axis=dim, keepdims=True))
    return e / np.sum(e, axis=dim, keepdims=True)


def log_softmax(x: Array, dim: int) -> Array:
    shifted = x - np.max(x, axis=dim, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=dim, keepdims=True))


# -- linear maps ----------------------------------------------------------------------
def linear(x: Array, weight: Array, bias: Array | None = None) -> Array:
    y = x @ np.swapaxes(weight, -1, -2)
    return y if bias is None else y + bias


def _windows(x: Array, kernel: Sequence[int], stride: Sequence[int], dilation: Sequence[int]) -> tuple[Array, tuple]:
    """``x``'s sliding windows over its trailing ``n = len(kernel)`` axes as
    one view, no copy: shape ``x.shape[:-n] + kernel + out``, element
    ``(..., k, p)`` being ``x[..., p * stride + k * dilation]`` (per axis).
    A traced ``x`` gives a read-only view whose index map is affine in the
    window and position axes (the tracer's ``remap``), so a reduction or a
    copy reads ``x`` itself; a numpy ``x`` gives numpy's strided view."""
    n = len(kernel)
    lead, spatial = tuple(x.shape[:-n]), tuple(x.shape[-n:])
    out = tuple((size - d * (k - 1) - 1) // s + 1 for size, k, s, d in zip(spatial, kernel, stride, dilation))
    if min(out) < 1:
        raise ValueError(f"kernel {tuple(kernel)} (dilation {tuple(dilation)}) is larger than the padded input "
                         f"{spatial}")
    shape = lead + tuple(kernel) + out
    if isinstance(x, np.ndarray):
        steps = x.strides[-n:]
        strides = x.strides[:-n] + tuple(t * d for t, d in zip(steps, dilation)) + \
            tuple(t * s for t, s in zip(steps, stride))
        return np.lib.stride_tricks.as_strided(x, shape, strides, writeable=False), out
    m = len(lead)

    def source(v: tuple) -> tuple:
        return v[:m] + tuple(v[m + n + i] * s + v[m + i] * d for i, (s, d) in enumerate(zip(stride, dilation)))
    return remap(x, shape, source, "a convolution's or pooling's sliding windows"), out


def _pad(x: Array, padding: Sequence[int], value: float = 0.0) -> Array:
    if not any(padding):
        return x
    widths = [(0, 0)] * (x.ndim - len(padding)) + [(p, p) for p in padding]
    return np.pad(x, widths, constant_values=value)


def _column_positions(shape: Sequence[int], kernel: Sequence[int], stride: Sequence[int],
                      dilation: Sequence[int], width: int) -> tuple[Array, tuple]:
    """Where each element of a convolution's window columns ``(width * K,
    N * positions)`` sits in the flattened input of ``shape`` ``(N, C,
    *spatial)``, for channels ``0 .. width - 1``: row ``c * K + k`` (``k`` a
    kernel offset in C order), column ``n * positions + p`` (``p`` a window
    position in C order).  Made with ``np.arange`` and integer arithmetic,
    which a traced program computes (an ``int32`` array)."""
    spatial = tuple(shape[2:])
    out = tuple((size - d * (k - 1) - 1) // s + 1 for size, k, s, d in zip(spatial, kernel, stride, dilation))
    taps, positions, image = int(np.prod(kernel)), int(np.prod(out)), int(np.prod(spatial))
    rows, columns = np.arange(width * taps).reshape((-1, 1)), np.arange(shape[0] * positions).reshape((1, -1))
    flat = rows // taps * image + columns // positions * (shape[1] * image)
    offset, position, step = rows % taps, columns % positions, 1
    for size, k, o, s, d in reversed(list(zip(spatial, kernel, out, stride, dilation))):
        flat = flat + ((position % o) * s + (offset % k) * d) * step
        offset, position, step = offset // k, position // o, step * size
    return flat, out


def conv(x: Array, weight: Array, bias: Array | None, stride: Any = 1, padding: Any = 0, dilation: Any = 1,
         groups: int = 1) -> Array:
    """``conv1d``/``conv2d``/``conv3d`` (batched input ``(N, C, *spatial)``):
    per group, one matrix product of the weight as a matrix ``(O/G, C/G *
    K)`` (a view: the weight's own layout) with the zero-padded input's
    window columns ``(C/G * K, N * positions)``, gathered in one step through
    positions computed from ``np.arange`` (``_column_positions``).  Both
    operands and the result are plain matrices, so the product, and each of
    its two reverse products (the weight's gradient sums over the batch and
    the positions at once), runs as one matrix product, which the CPU
    device can hand to the host's BLAS (``lowering.host_products``); the
    columns' gradient scatters back through the same positions.  (The
    windows read as a view instead of gathered: the lowering recomputes that
    copy inside the product's loops, with integer divisions, and a LeNet-5
    step ran 1.5x slower; a batched product per image: its weight gradient
    a reduction over the batch of products, 2-3x slower.)"""
    n = weight.ndim - 2
    kernel = tuple(weight.shape[2:])
    padded = _pad(x, _pair(padding, n))
    batch, per_group, width = x.shape[0], weight.shape[0] // groups, x.shape[1] // groups
    positions, out = _column_positions(tuple(padded.shape), kernel, _pair(stride, n), _pair(dilation, n), width)
    flat, group_size = padded.reshape(-1), width * int(np.prod(padded.shape[2:]))
    ys = []
    for g in range(groups):
        w = weight[g * per_group:(g + 1) * per_group].reshape((per_group, -1))
        ys.append(np.matmul(w, np.take(flat, positions + g * group_size)))
    y = ys[0] if groups == 1 else np.concatenate(ys, axis=0)
    y = np.swapaxes(y.reshape((weight.shape[0], batch, -1)), 0, 1).reshape((batch, weight.shape[0]) + out)
    return y if bias is None else y + bias.reshape((-1,) + (1,) * n)


# -- pooling ----------------------------------------------------------------------------
def max_pool(x: Array, n: int, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1) -> Array:
    kernel = _pair(kernel_size, n)
    stride = kernel if stride is None or stride == [] or stride == () else _pair(stride, n)
    windows, _ = _windows(_pad(x, _pair(padding, n), -np.inf), kernel, stride, _pair(dilation, n))
    return np.max(windows, axis=tuple(range(x.ndim - n, x.ndim)))


def avg_pool(x: Array, n: int, kernel_size: Any, stride: Any = None, padding: Any = 0,
             count_include_pad: bool = True, divisor_override: int | None = None) -> Array:
    kernel = _pair(kernel_size, n)
    stride = kernel if stride is None or stride == [] or stride == () else _pair(stride, n)
    pad = _pair(padding, n)
    windows, _ = _windows(_pad(x, pad), kernel, stride, (1,) * n)
    axes = tuple(range(x.ndim - n, x.ndim))
    total = np.sum(windows, axis=axes)
    if divisor_override:
        return total / divisor_override
    if count_include_pad or not any(pad):
        return total / int(np.prod(kernel))
    ones = np.ones(tuple(x.shape[-n:]), dtype=np.float64)  # a constant: how many real elements each window has
    counts, _ = _windows(_pad(ones, pad), kernel, stride, (1,) * n)
    return total / np.asarray(counts.sum(axis=tuple(range(n))), dtype=np.float64).astype(x.dtype)


def interpolate_nearest(x: Array, n: int, size: Any = None, scale_factor: Any = None) -> Array:
    """Mode ``"nearest"``: output ``i`` reads input ``floor(i * in / out)`` per
    spatial axis (``floor(i / scale)`` when a scale factor is given), a gather
    through index arrays made with ``np.arange``."""
    for k, axis in enumerate(range(x.ndim - n, x.ndim)):
        length = x.shape[axis]
        if size is not None:
            out = _pair(size, n)[k]
            index = (np.arange(out) * length) // out
        else:
            scale = _pair(scale_factor, n)[k]
            out = int(math.floor(length * scale))
            index = np.minimum(np.floor(np.arange(out) * (1 / scale)).astype("int32"), length - 1)
        x = np.take(x, index, axis=axis)
    return x


def adaptive_avg_pool(x: Array, n: int, output_size: Any) -> Array:
    """Output cell ``i`` averages input ``[floor(i L / out), ceil((i + 1) L / out))`` per axis, as torch."""
    for axis, size in zip(range(x.ndim - n, x.ndim), _pair(output_size, n)):
        length = x.shape[axis]
        size = length if size is None else size
        if length % size == 0:
            shape = tuple(x.shape[:axis]) + (size, length // size) + tuple(x.shape[axis + 1:])
            x = np.mean(x.reshape(shape), axis=axis + 1)
            continue
        cells = []
        for i in range(size):
            lo, hi = (i * length) // size, -((-(i + 1) * length) // size)
            key = (slice(None),) * axis + (slice(lo, hi),)
            cells.append(np.mean(x[key], axis=axis))
        x = np.stack(cells, axis=axis)
    return x


# -- normalisation -------------------------------------------------------------------
def _normalize(x: Array, axes: tuple[int, ...], eps: float) -> Array:
    mean = np.mean(x, axis=axes, keepdims=True)
    centered = x - mean
    var = np.mean(centered * centered, axis=axes, keepdims=True)
    return centered / np.sqrt(var + eps)


def layer_norm(x: Array, normalized_shape: Sequence[int], weight: Array | None = None, bias: Array | None = None,
               eps: float = 1e-5) -> Array:
    y = _normalize(x, tuple(range(x.ndim - len(tuple(normalized_shape)), x.ndim)), eps)
    y = y if weight is None else y * weight
    return y if bias is None else y + bias


def group_norm(x: Array, num_groups: int, weight: Array | None = None, bias: Array | None = None,
               eps: float = 1e-5) -> Array:
    grouped = x.reshape((x.shape[0], num_groups, -1))
    y = _normalize(grouped, (2,), eps).reshape(x.shape)
    per_channel = (-1,) + (1,) * (x.ndim - 2)
    y = y if weight is None else y * weight.reshape(per_channel)
    return y if bias is None else y + bias.reshape(per_channel)


def batch_norm_train(x: Array, weight: Array | None, bias: Array | None, eps: float) -> tuple[Array, Array, Array]:
    """``(y, batch mean, unbiased batch variance)``: batch statistics over all
    axes but the channel axis (1); the variance torch folds into its running
    estimate is the unbiased one, the one it normalises with the biased one."""
    axes = (0,) + tuple(range(2, x.ndim))
    count = x.size // x.shape[1]
    mean = np.mean(x, axis=axes, keepdims=True)
    centered = x - mean
    var = np.mean(centered * centered, axis=axes, keepdims=True)
    y = _affine(centered / np.sqrt(var + eps), weight, bias)
    unbiased = var * (count / max(count - 1, 1))
    return y, mean.reshape(-1), unbiased.reshape(-1)


def batch_norm_eval(x: Array, running_mean: Array, running_var: Array, weight: Array | None, bias: Array | None,
                    eps: float) -> Array:
    shape = (-1,) + (1,) * (x.ndim - 2)
    return _affine((x - running_mean.reshape(shape)) / np.sqrt(running_var.reshape(shape) + eps), weight, bias)


def _affine(y: Array, weight: Array | None, bias: Array | None) -> Array:
    shape = (-1,) + (1,) * (y.ndim - 2)
    y = y if weight is None else y * weight.reshape(shape)
    return y if bias is None else y + bias.reshape(shape)


# -- losses -----------------------------------------------------------------------------
def _reduce(loss: Array, reduction: str) -> Array:
    return {"mean": np.mean, "sum": np.sum}[reduction](loss) if reduction != "none" else loss


def mse_loss(x: Array, target: Array, reduction: str = "mean") -> Array:
    d = x - target
    return _reduce(d * d, reduction)


def l1_loss(x: Array, target: Array, reduction: str = "mean") -> Array:
    return _reduce(np.abs(x - target), reduction)


def binary_cross_entropy_with_logits(x: Array, target: Array, weight: Array | None = None,
                                     reduction: str = "mean", pos_weight: Array | None = None) -> Array:
    """torch's stable form: ``(1 - y) x + (1 + (pw - 1) y) (log1p(exp(-|x|)) + max(-x, 0))``."""
    log_weight = 1 if pos_weight is None else 1 + (pos_weight - 1) * target
    loss = (1 - target) * x + log_weight * (np.log1p(np.exp(np.minimum(x, -x))) + np.maximum(-x, 0))
    return _reduce(loss if weight is None else loss * weight, reduction)


def binary_cross_entropy(p: Array, target: Array, weight: Array | None = None, reduction: str = "mean") -> Array:
    """``-(y log p + (1 - y) log(1 - p))``, each log clamped at -100 as torch does."""
    loss = -(target * np.maximum(np.log(p), -100) + (1 - target) * np.maximum(np.log1p(-p), -100))
    return _reduce(loss if weight is None else loss * weight, reduction)


def smooth_l1_loss(x: Array, target: Array, reduction: str = "mean", beta: float = 1.0) -> Array:
    d = np.abs(x - target)
    loss = d if beta == 0 else np.where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta)
    return _reduce(loss, reduction)


def huber_loss(x: Array, target: Array, reduction: str = "mean", delta: float = 1.0,
               weight: Array | None = None) -> Array:
    d = np.abs(x - target)
    loss = np.where(d < delta, 0.5 * d * d, delta * (d - 0.5 * delta))
    return _reduce(loss if weight is None else loss * weight, reduction)


def kl_div(logq: Array, target: Array, reduction: str = "mean", log_target: bool = False) -> Array:
    """``target * (log target - logq)``, 0 where the target is 0 (torch's ``xlogy``)."""
    if log_target:
        loss = np.exp(target) * (target - logq)
    else:
        positive = target > 0
        loss = np.where(positive, target * np.log(np.where(positive, target, 1)), 0 * target) - target * logq
    if reduction == "batchmean":
        return np.sum(loss) / logq.shape[0]
    return _reduce(loss, reduction)


def _target_weights(target: Array, weight: Array | None, ignore_index: int, dtype: Any) -> tuple[Array, Array]:
    """``(target with ignored entries made 0, each entry's weight: 0 where ignored)``."""
    keep = target != ignore_index
    safe = np.where(keep, target, 0)
    return safe, _indicator(keep, dtype) if weight is None else np.take(weight, safe) * _indicator(keep, dtype)


def nll_loss(logp: Array, target: Array, weight: Array | None = None, ignore_index: int = -100,
             reduction: str = "mean") -> Array:
    """``-w[t] logp[n, t]`` with ``t = target[n]`` (class axis 1, any trailing
    axes); an ignored target counts for nothing, also in the mean, which
    divides by the summed weights (as torch)."""
    safe, w = _target_weights(target, weight, ignore_index, logp.dtype)
    loss = -np.squeeze(np.take_along_axis(logp, np.expand_dims(safe, 1), axis=1), axis=1) * w
    return np.sum(loss) / np.sum(w) if reduction == "mean" else _reduce(loss, reduction)


def cross_entropy(x: Array, target: Array, weight: Array | None = None, ignore_index: int = -100,
                  reduction: str = "mean", label_smoothing: float = 0.0) -> Array:
    """Class indices (an integer target) or class probabilities (a float
    target shaped like ``x``).  Label smoothing as torch: with indices,
    ``(1 - e) nll + e / C * sum_c -w_c logp_c``, normalised like the nll."""
    logp = log_softmax(x, 1)
    per_class = (-1,) + (1,) * (x.ndim - 2)
    if np.issubdtype(np.dtype(target.dtype), np.floating):
        probs = target if not label_smoothing else target * (1 - label_smoothing) + label_smoothing / x.shape[1]
        if weight is not None:
            probs = probs * weight.reshape(per_class)
        loss = -np.sum(logp * probs, axis=1)
        return np.sum(loss) / (x.size // x.shape[1]) if reduction == "mean" else _reduce(loss, reduction)
    nll = nll_loss(logp, target, weight, ignore_index, reduction)
    if not label_smoothing:
        return nll
    _, w = _target_weights(target, weight, ignore_index, logp.dtype)
    weighted = logp if weight is None else logp * weight.reshape(per_class)
    smooth = -np.sum(weighted, axis=1) * _indicator(target != ignore_index, logp.dtype)
    smooth = np.sum(smooth) / np.sum(w) if reduction == "mean" else _reduce(smooth, reduction)
    return nll * (1 - label_smoothing) + smooth * (label_smoothing / x.shape[1])


# -- lookups --------------------------------------------------------------------------
def embedding(idx: Array, weight: Array) -> Array:
    return np.take(weight, idx, axis=0)
