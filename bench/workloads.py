"""The benchmark programs, each written once against an array namespace ``xp``.

``body(xp, *arrays)`` is traced by symdiff with ``xp = numpy`` and run as is by
numpy and (through ``peers.torch_namespace``) by PyTorch.  JAX cannot update
arrays in place and nobody but symdiff has ``sd.map``, so such workloads also
carry a ``functional`` body: the same function written with slices only, which
JAX runs (and numpy and PyTorch too, for ``sd.map`` workloads).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

import symdiff as sd

Init = Callable[[np.random.Generator, tuple], np.ndarray]


def normal(scale: float = 1.0) -> Init:
    return lambda rng, shape: (rng.standard_normal(shape) * scale).astype(np.float32)


def fan_in(rng: np.random.Generator, shape: tuple) -> np.ndarray:
    """Weights scaled by 1/sqrt(fan-in), so activations stay O(1) at every size."""
    return (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)


def positive(rng: np.random.Generator, shape: tuple) -> np.ndarray:
    return rng.uniform(0.5, 2.0, shape).astype(np.float32)


VOCAB = 1024


def vocab_indices(rng: np.random.Generator, shape: tuple) -> np.ndarray:
    return rng.integers(0, VOCAB, shape).astype(np.int32)


def one_hot(rng: np.random.Generator, shape: tuple) -> np.ndarray:
    return np.eye(shape[1], dtype=np.float32)[rng.integers(0, shape[1], shape[0])]


@dataclass(frozen=True)
class Size:
    label: str                      # what the table shows, e.g. "n=10M"
    shapes: dict[str, tuple]        # argument name -> shape, in argument order


@dataclass(frozen=True)
class Workload:
    name: str
    body: Callable                  # body(xp, *arrays) -> scalar
    small: Size
    large: Size
    wrt: tuple[str, ...]
    functional: Callable | None = None   # slices-only twin for JAX (and for others when uses_map)
    uses_map: bool = False
    init: dict[str, Init] = field(default_factory=dict)   # default: standard normal
    tol: float = 1e-3               # relative L2 error of each gradient against the reference
    ints: tuple[str, ...] = ()      # int32 (index) arguments; the rest are float32
    options: dict = field(default_factory=dict)   # sd.differentiable_program keywords of this variant

    def size(self, which: str) -> Size:
        return {"small": self.small, "large": self.large}[which]

    def inputs(self, size: Size, seed: int = 0) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        return {n: self.init.get(n, normal())(rng, s) for n, s in size.shapes.items()}

    def array_body(self, for_jax: bool) -> Callable:
        """The body a peer runs: JAX needs the functional twin whenever there is one,
        the others only where the body uses ``sd.map``."""
        if self.functional is not None and (for_jax or self.uses_map):
            return self.functional
        return self.body


# -- bodies ------------------------------------------------------------------------

def elementwise_chain(xp, x, w):
    y = x * w
    y = xp.tanh(y)
    y = y * x
    y = y + 0.5
    y = xp.exp(y)
    y = y * w
    y = xp.sin(y)
    y = y * y
    y = y - x
    y = y * 0.1
    return xp.sum(y)


def softmax_xent(xp, logits, y):
    """Mean softmax cross-entropy of rows of ``logits`` against (one-hot) rows of ``y``."""
    m = xp.max(logits, axis=1, keepdims=True)
    s = logits - m
    lse = xp.log(xp.sum(xp.exp(s), axis=1, keepdims=True))
    return -xp.mean(xp.sum(y * (s - lse), axis=1))


def mlp_softmax_xent(xp, x, w1, b1, w2, y):
    h = xp.maximum(x @ w1 + b1, 0.0)
    return softmax_xent(xp, h @ w2, y)


def layer_norm(xp, x, g, b):
    mu = xp.mean(x, axis=-1, keepdims=True)
    var = xp.mean((x - mu) ** 2, axis=-1, keepdims=True)
    y = (x - mu) / xp.sqrt(var + 1e-5) * g + b
    return xp.mean(y * y * 0.5 + y)


STENCIL_STEPS = 10


def jacobi_2d(xp, u, steps=STENCIL_STEPS):
    u = xp.copy(u)
    for _ in range(steps):
        u[1:-1, 1:-1] = 0.2 * (u[1:-1, 1:-1] + u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
    return xp.mean(u * u)


def jacobi_2d_functional(xp, u, steps=STENCIL_STEPS):
    for _ in range(steps):
        u = u.at[1:-1, 1:-1].set(
            0.2 * (u[1:-1, 1:-1] + u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:]))
    return xp.mean(u * u)


def conv1d(xp, x, k):
    n, taps = x.shape[0], k.shape[0]
    y = k[0] * x[0:n - taps + 1]
    for j in range(1, taps):
        y = y + k[j] * x[j:n - taps + 1 + j]
    return xp.mean(xp.tanh(y))


def atax(xp, a, x):
    y = a.T @ (a @ x)
    return xp.sum(xp.tanh(y))


def bicg(xp, a, p, r):
    q = a @ p
    s = a.T @ r
    return xp.sum(q * q) + xp.sum(xp.tanh(s))


def nbody_energy(xp, x, y, z, m):
    dx = x[:, None] - x[None, :]
    dy = y[:, None] - y[None, :]
    dz = z[:, None] - z[None, :]
    r = xp.sqrt(dx * dx + dy * dy + dz * dz + 1e-2)
    return -0.5 * xp.sum(m[:, None] * m[None, :] / r)


def map_stencil(xp, a, w):
    n, m = a.shape
    out = xp.zeros_like(a)
    for i, j in sd.map[1:n - 1, 1:m - 1]:
        out[i, j] = w[0] * a[i, j] + w[1] * (a[i - 1, j] + a[i + 1, j] + a[i, j - 1] + a[i, j + 1])
    s = xp.zeros(1, dtype=xp.float32)
    for i, j in sd.map[0:n, 0:m]:
        s[0] += out[i, j] * out[i, j]
    return s[0]


def map_stencil_functional(xp, a, w):
    inner = w[0] * a[1:-1, 1:-1] + w[1] * (a[:-2, 1:-1] + a[2:, 1:-1] + a[1:-1, :-2] + a[1:-1, 2:])
    return xp.sum(inner * inner)


def embedding_bag(xp, emb, idx):
    return xp.mean(xp.tanh(emb[idx].sum(axis=1)) ** 2)


def stencil_5(xp, a):
    """A 1-D five-point stencil in sd.map: its reverse is five shifted scatter-adds."""
    n = a.shape[0]
    out = xp.zeros_like(a)
    for i in sd.map[2:n - 2]:
        out[i] = 0.1 * a[i - 2] + 0.2 * a[i - 1] + 0.4 * a[i] + 0.2 * a[i + 1] + 0.1 * a[i + 2]
    return xp.mean(xp.tanh(out))


def stencil_5_functional(xp, a):
    inner = 0.1 * a[:-4] + 0.2 * a[1:-3] + 0.4 * a[2:-2] + 0.2 * a[3:-1] + 0.1 * a[4:]
    return xp.sum(xp.tanh(inner)) / a.shape[0]


def sum_reduction(xp, x):
    return xp.sum(x * x)


# -- models (issue 33): the forms users train, written once for numpy, JAX and torch -------------

def mlp_tanh(xp, x, w1, b1, w2, y):
    """Two layers, tanh, squared error."""
    p = xp.tanh(x @ w1 + b1) @ w2
    return xp.mean((p - y) ** 2)


def ffn_block(xp, x, g, b, w1, b1, w2, b2):
    """A transformer's feed-forward block: layer norm, GELU (tanh form), residual."""
    mu = xp.mean(x, axis=-1, keepdims=True)
    var = xp.mean((x - mu) ** 2, axis=-1, keepdims=True)
    h = (x - mu) / xp.sqrt(var + 1e-5) * g + b
    u = h @ w1 + b1
    gelu = 0.5 * u * (1.0 + xp.tanh(0.7978845608 * (u + 0.044715 * u * u * u)))
    out = x + gelu @ w2 + b2
    return xp.mean(out * out)


def attention(xp, x, wq, wk, wv, wo):
    """Multi-head self-attention over a batch of sequences, 4 heads, softmax with max-subtraction."""
    bsz, n, d = x.shape
    heads, dh = 4, d // 4

    def split(t):
        return xp.swapaxes(xp.reshape(t, (bsz, n, heads, dh)), 1, 2)
    q, k, v = split(x @ wq), split(x @ wk), split(x @ wv)
    s = q @ xp.swapaxes(k, 2, 3) * (1.0 / dh ** 0.5)
    s = s - xp.max(s, axis=-1, keepdims=True)
    p = xp.exp(s)
    p = p / xp.sum(p, axis=-1, keepdims=True)
    o = xp.reshape(xp.swapaxes(p @ v, 1, 2), (bsz, n, d))
    return xp.mean((o @ wo) ** 2)


def attention_einsum(xp, x, wq, wk, wv, wo):
    """``attention`` written with einsum, heads as an axis of their own (no
    swapaxes): issue 31 asks for it to run as fast as the ``@`` form."""
    bsz, n, d = x.shape
    heads, dh = 4, d // 4

    def project(t, w):
        return xp.reshape(xp.einsum("bnd,de->bne", t, w), (bsz, n, heads, dh))
    q, k, v = project(x, wq), project(x, wk), project(x, wv)
    s = xp.einsum("bqhe,bkhe->bhqk", q, k) * (1.0 / dh ** 0.5)
    s = s - xp.max(s, axis=-1, keepdims=True)
    p = xp.exp(s)
    p = p / xp.sum(p, axis=-1, keepdims=True)
    o = xp.reshape(xp.einsum("bhqk,bkhe->bqhe", p, v), (bsz, n, d))
    return xp.mean(xp.einsum("bnd,de->bne", o, wo) ** 2)


RNN_STEPS = 32


def elman_rnn(xp, xs, h0, wx, wh, b):
    """An Elman RNN unrolled over ``RNN_STEPS`` inputs: h = tanh(x W + h U + b)."""
    h = h0
    for t in range(RNN_STEPS):
        h = xp.tanh(xs[t] @ wx + h @ wh + b)
    return xp.mean(h * h)


def _sizes(small: str, large: str, **shapes: tuple[tuple, tuple]) -> tuple[Size, Size]:
    """``name=(small_shape, large_shape)`` pairs, in argument order."""
    return (Size(small, {n: s for n, (s, _) in shapes.items()}),
            Size(large, {n: s for n, (_, s) in shapes.items()}))


WORKLOADS: list[Workload] = [
    Workload("elementwise_chain", elementwise_chain,
             *_sizes("n=100k", "n=10M", x=((100_000,), (10_000_000,)), w=((100_000,), (10_000_000,))),
             wrt=("x", "w")),
    Workload("mlp_softmax_xent", mlp_softmax_xent,
             *_sizes("256x64-64-10", "4096x512-512-10", x=((256, 64), (4096, 512)), w1=((64, 64), (512, 512)),
                     b1=((64,), (512,)), w2=((64, 10), (512, 10)), y=((256, 10), (4096, 10))),
             wrt=("w1", "b1", "w2"), init={"w1": fan_in, "w2": fan_in, "b1": normal(0.1), "y": one_hot}),
    Workload("layer_norm", layer_norm,
             *_sizes("256x128", "4096x1024", x=((256, 128), (4096, 1024)), g=((128,), (1024,)),
                     b=((128,), (1024,))),
             wrt=("x", "g", "b")),
    Workload("jacobi_2d_inplace", jacobi_2d, *_sizes("64x64", "512x512", u=((64, 64), (512, 512))),
             wrt=("u",), functional=jacobi_2d_functional),
    Workload("conv1d_slices", conv1d,
             *_sizes("n=16k", "n=4M", x=((16_384,), (4_194_304,)), k=((5,), (5,))), wrt=("x", "k")),
    Workload("atax", atax, *_sizes("256x256", "2048x2048", a=((256, 256), (2048, 2048)), x=((256,), (2048,))),
             wrt=("a", "x"), init={"a": fan_in}),
    Workload("bicg", bicg,
             *_sizes("256x256", "2048x2048", a=((256, 256), (2048, 2048)), p=((256,), (2048,)),
                     r=((256,), (2048,))),
             wrt=("a", "p", "r"), init={"a": fan_in}),
    Workload("nbody_energy", nbody_energy,
             *_sizes("N=256", "N=2048", x=((256,), (2048,)), y=((256,), (2048,)), z=((256,), (2048,)),
                     m=((256,), (2048,))),
             wrt=("x", "y", "z", "m"), init={"m": positive}),
    Workload("map_stencil_sum", map_stencil,
             *_sizes("128x128", "2048x2048", a=((128, 128), (2048, 2048)), w=((2,), (2,))),
             wrt=("a", "w"), functional=map_stencil_functional, uses_map=True),
    # atomic vs atomic-free reverse passes, side by side
    *[Workload(f"embedding_bag{suffix}", embedding_bag,
               *_sizes("V=1k,128x8 bags", "V=1k,1024x8 bags", emb=((VOCAB, 32), (VOCAB, 32)),
                       idx=((128, 8), (1024, 8))),
               wrt=("emb",), ints=("idx",), init={"idx": vocab_indices}, options=options)
      for suffix, options in (("_atomic", {}), ("_deterministic", {"deterministic": True}))],
    *[Workload(f"stencil_backward{suffix}", stencil_5, *_sizes("n=64k", "n=4M", a=((65_536,), (4_194_304,))),
               wrt=("a",), functional=stencil_5_functional, uses_map=True, options=options)
      for suffix, options in (("_atomic", {"stencil_gathers": False}), ("_gather", {}))],
    Workload("sum_reduction", sum_reduction, *_sizes("n=100k", "n=16M", x=((100_000,), (16_777_216,))),
             wrt=("x",)),
    Workload("mlp_tanh", mlp_tanh,
             *_sizes("256x64-64-10", "4096x512-512-10", x=((256, 64), (4096, 512)), w1=((64, 64), (512, 512)),
                     b1=((64,), (512,)), w2=((64, 10), (512, 10)), y=((256, 10), (4096, 10))),
             wrt=("w1", "b1", "w2"), init={"w1": fan_in, "w2": fan_in, "b1": normal(0.1)}),
    Workload("ffn_block", ffn_block,
             *_sizes("256x64-256", "2048x256-1024", x=((256, 64), (2048, 256)), g=((64,), (256,)),
                     b=((64,), (256,)), w1=((64, 256), (256, 1024)), b1=((256,), (1024,)),
                     w2=((256, 64), (1024, 256)), b2=((64,), (256,))),
             wrt=("x", "g", "b", "w1", "b1", "w2", "b2"), init={"w1": fan_in, "w2": fan_in, "b1": normal(0.1),
                                                               "b2": normal(0.1)}),
    Workload("attention", attention,
             *_sizes("2x32x64", "8x128x256", x=((2, 32, 64), (8, 128, 256)), wq=((64, 64), (256, 256)),
                     wk=((64, 64), (256, 256)), wv=((64, 64), (256, 256)), wo=((64, 64), (256, 256))),
             wrt=("x", "wq", "wk", "wv", "wo"), init={w: fan_in for w in ("wq", "wk", "wv", "wo")}),
    Workload("attention_einsum", attention_einsum,
             *_sizes("2x32x64", "8x128x256", x=((2, 32, 64), (8, 128, 256)), wq=((64, 64), (256, 256)),
                     wk=((64, 64), (256, 256)), wv=((64, 64), (256, 256)), wo=((64, 64), (256, 256))),
             wrt=("x", "wq", "wk", "wv", "wo"), init={w: fan_in for w in ("wq", "wk", "wv", "wo")}),
    Workload("elman_rnn", elman_rnn,
             *_sizes("32 steps of 64", "32 steps of 256", xs=((RNN_STEPS, 16, 64), (RNN_STEPS, 64, 256)),
                     h0=((16, 64), (64, 256)), wx=((64, 64), (256, 256)), wh=((64, 64), (256, 256)),
                     b=((64,), (256,))),
             wrt=("wx", "wh", "b"), init={"wx": fan_in, "wh": fan_in, "b": normal(0.1)}),
]
