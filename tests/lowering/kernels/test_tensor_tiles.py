"""TF32 tensor-core products (lowering.kernels.tensor_tiles): chosen only at
``matmul_precision="tf32"`` on a target with tensor cores, and, forced on
lavapipe (where the instruction's plain-Slang stand-in runs the same
fragments) and on CUDA where a GPU is at hand (the instruction itself, the
same small tiles), every product form, batched, narrow and split-K products give
what TF32 arithmetic gives: the product of operands rounded to TF32, summed
in float32.  That model is computed here in float64 from a rounding written
apart from the kernel's (``tf32``), and each result is also checked to
differ from the exact product by far more than the tolerance, so a kernel
that skipped the rounding would fail.
"""
# (no ``from __future__ import annotations``: the programs' shape annotations close over local sizes)
from dataclasses import replace

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import symdiff as sd
from symdiff.lowering import backends, targets
from symdiff.lowering.kernels import precision, tile_shapes
from symdiff.lowering.kernels.registry import choose
from symdiff.lowering.kernels.writer import KernelShape
from symdiff.lowering.plan import plan
from symdiff.lowering.plan_types import HostKernel

from .test_group_tiles import B, K, M, N, close_to_jax, gpu_form, products, rand

MARK = "TF32 tensor-core fragments"  # the comment opening a tensor-core product's sums
# Small tiles over the workgroup's 8 warps: 32x32 over 2x4 warps (a fragment a warp), and
# 64x64 over 2x4 (2x2 fragments a warp, so fragment rows and columns are both indexed);
# narrow products 128x16 over 8x1 warps (1x2 fragments).
SMALL = dict(tensor_tile=(32, 32), tensor_warps=(2, 4), tensor_tile_k=8, tensor_narrow_tile=(128, 16),
             tensor_narrow_warps=(8, 1), split_k_min_length=512, split_k_min_slice=64, split_k_target_workgroups=16)
OTHER = dict(tensor_tile=(64, 64), tensor_warps=(2, 4), tensor_tile_k=16)


DEVICES = [pytest.param("vulkan", marks=pytest.mark.vulkan, id="vulkan"), pytest.param("cuda", id="cuda")]


def tensor_form(monkeypatch, device, **tuning) -> str:
    """``device`` in the GPU form with tensor cores and ``tuning``: lavapipe
    runs the instruction's stand-in, CUDA (on a GPU machine) the instruction."""
    return gpu_form(monkeypatch, device, tensor_cores=backends.cuda.TARGET.tensor_cores, **tuning)


def tf32(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to TF32 (10 mantissa bits; to nearest, ties away
    from zero), as float64: through the exponent, not the bits."""
    m, e = np.frexp(np.asarray(x, dtype=np.float64))  # x = m 2^e, 0.5 <= |m| < 1
    return np.sign(m) * np.floor(np.abs(m) * 2.0 ** 11 + 0.5) * 2.0 ** (e - 11)


def assert_tf32_product(got, a, b, exact):
    """``got`` is TF32 ``a @ b`` (float32 sums of rounded operands), not the
    exact product: each element within a float32 sum's rounding of the model
    (8 sqrt(K) units of its terms' root-sum-square), and most elements further
    from the exact product than four times that (the TF32 rounding is 2^13
    units of float32's: it did happen)."""
    model = tf32(a) @ tf32(b)
    tol = 8 * np.sqrt(a.shape[-1]) * 2.0 ** -24 * np.sqrt(tf32(a) ** 2 @ tf32(b) ** 2)
    assert np.all(np.abs(got - model) <= tol), np.max(np.abs(got - model) / tol)
    assert np.mean(np.abs(got - exact) > 4 * tol) > 0.5


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("tuning", [SMALL, OTHER, dict(OTHER, group_prefetch=True)],
                         ids=["fragment-a-warp", "2x2-fragments", "prefetching"])
def test_a_product_and_both_gradients_are_tf32_products(monkeypatch, tuning, device):
    device = tensor_form(monkeypatch, device, **tuning)

    def f(x: sd.f32[M, K], y: sd.f32[K, N], z: sd.f32[M, N]):
        return np.sum(z * (x @ y))
    prog = sd.differentiable_program(f, matmul_precision="tf32")
    x, y, z = rand([(M, K), (K, N), (M, N)], seed=3)
    _, grads = prog.value_and_grad(x, y, z, device=device)
    assert prog.slang_source(device=device).count(MARK) == 3
    x64, y64, z64 = (v.astype(np.float64) for v in (x, y, z))
    assert_tf32_product(grads["z"], x, y, x64 @ y64)  # the forward product, kept
    assert_tf32_product(grads["x"], z, y.T, z64 @ y64.T)  # G B^T
    assert_tf32_product(grads["y"], x.T, z, x64.T @ z64)  # A^T G


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("half, tuning", [(np.float16, SMALL), (ml_dtypes.bfloat16, dict(OTHER, group_prefetch=True))],
                         ids=["float16-fragment-a-warp", "bfloat16-prefetching"])
def test_sixteen_bit_products_are_exact_products_on_their_instruction(monkeypatch, tuning, half, device):
    """x @ y of two 16-bit arguments takes the 16-bit instruction at the default
    precision, and its sums are float32 sums of exact products (z's gradient is the
    product itself); at TF32 the gradients, one operand float32, take TF32."""
    device = tensor_form(monkeypatch, device, **tuning)
    spec, name = (sd.f16, "float16") if half == np.float16 else (sd.bf16, "bfloat16")

    def f(x: spec[M, K], y: spec[K, N], z: sd.f32[M, N]):
        return np.sum(z * (x @ y))
    x, y, z = rand([(M, K), (K, N), (M, N)], seed=4)
    x, y = x.astype(half), y.astype(half)
    for matmul_precision, tf32_products in (("highest", 0), ("tf32", 2)):
        prog = sd.differentiable_program(f, matmul_precision=matmul_precision)
        _, grads = prog.value_and_grad(x, y, z, device=device)
        source = prog.slang_source(device=device)
        assert source.count(f"{name} tensor-core fragments") == 1 and source.count(MARK) == tf32_products
        exact = x.astype(np.float64) @ y.astype(np.float64)
        tol = 8 * np.sqrt(K) * 2.0 ** -24 * np.sqrt(x.astype(np.float64) ** 2 @ y.astype(np.float64) ** 2)
        assert np.all(np.abs(grads["z"] - exact) <= tol), np.max(np.abs(grads["z"] - exact) / tol)


@pytest.mark.vulkan
def test_every_product_form_and_batches_match_jax_to_tf32_precision(monkeypatch):
    tensor_form(monkeypatch, "vulkan", **OTHER)

    def f(x: sd.f32[M, K], y: sd.f32[K, N], z: sd.f32[M, N], u: sd.f32[B, M, K], v: sd.f32[B, K, N]):
        return products(np, x, y, z, u, v)
    prog = sd.differentiable_program(f, matmul_precision="tf32")
    args = rand([(M, K), (K, N), (M, N), (B, M, K), (B, K, N)])
    value, grads = prog.value_and_grad(*args, device="vulkan")
    assert prog.slang_source(device="vulkan").count(MARK) == 6
    # TF32 keeps 11 significant bits: a few 2^-11 relative over sums of K = 23 terms
    close_to_jax(lambda *a: products(jnp, *a), args, value, grads, "xyzuv", rtol=4e-3)


R, D = 1536, 37


@pytest.mark.parametrize("device", DEVICES)
def test_narrow_and_split_k_products_are_tf32_products(monkeypatch, device):
    """An MLP's last layer: x @ w with 10 outputs a row (the narrow tile),
    its weight gradient x^T g over 1536 rows cut into slices (split-K), whose
    partial products take the tensor-core form too, and g w^T."""
    device = tensor_form(monkeypatch, device, **SMALL)

    def f(x: sd.f32[R, D], w: sd.f32[D, 10], g: sd.f32[R, 10]):
        return np.sum(g * (x @ w))
    prog = sd.differentiable_program(f, matmul_precision="tf32")
    target = backends.of(device).target()
    p = plan(precision.with_precision(prog.backward_graph(wrt=["x", "w", "g"]), "tf32"), {}, target)
    forms = {k.name: choose(KernelShape(p, k, target)).body.name for k in p.kernels if not isinstance(k, HostKernel)}
    # x @ w, g w^T, and x^T g's 16 slices (then summed over the slices)
    tensor = [name for name, form in forms.items() if form == "tensor_tiles"]
    assert len(tensor) == 3 and any(name.endswith("_d_b_stage1") for name in tensor), forms
    x, w, g = rand([(R, D), (D, 10), (R, 10)], seed=4)
    _, grads = prog.value_and_grad(x, w, g, device=device)
    x64, w64, g64 = (v.astype(np.float64) for v in (x, w, g))
    assert_tf32_product(grads["g"], x, w, x64 @ w64)
    assert_tf32_product(grads["w"], x.T, g, x64.T @ g64)
    assert_tf32_product(grads["x"], g, w.T, g64 @ w64.T)


@pytest.mark.parametrize("device", DEVICES)
def test_an_mlps_gradients_are_those_of_tf32_products(monkeypatch, device):
    """Products with fused epilogues (bias, ReLU mask) and a softmax between:
    the gradients match a float64 model whose every product rounds its
    operands to TF32 (an exact float32 run is 1e-2 from that model: ReLU
    masks flip where TF32 moves a pre-activation across 0)."""
    device = tensor_form(monkeypatch, device, **OTHER)
    rows, d, hidden, classes = 96, 40, 48, 10

    def mlp(xp, x, w1, b1, w2, y):
        pre = x @ w1 + b1
        logits = xp.maximum(pre, 0.0) @ w2
        shifted = logits - xp.max(logits, axis=1, keepdims=True)
        return -xp.mean(xp.sum(y * (shifted - xp.log(xp.sum(xp.exp(shifted), axis=1, keepdims=True))), axis=1))

    def f(x: sd.f32[rows, d], w1: sd.f32[d, hidden], b1: sd.f32[hidden], w2: sd.f32[hidden, classes],
          y: sd.f32[rows, classes]):
        return mlp(np, x, w1, b1, w2, y)
    prog = sd.differentiable_program(f, matmul_precision="tf32")
    x, w1, b1, w2 = rand([(rows, d), (d, hidden), (hidden,), (hidden, classes)], seed=5)
    y = np.eye(classes, dtype=np.float32)[np.random.default_rng(5).integers(0, classes, rows)]
    _, grads = prog.value_and_grad(x, w1, b1, w2, y, wrt=["x", "w1", "b1", "w2"], device=device)
    assert prog.slang_source(device=device).count(MARK) >= 5
    X, W1, B1, W2, Y = (a.astype(np.float64) for a in (x, w1, b1, w2, y))
    pre = tf32(X) @ tf32(W1) + B1
    h = np.maximum(pre, 0.0)
    logits = tf32(h) @ tf32(W2)
    p = np.exp(logits - logits.max(1, keepdims=True))
    dl = (p / p.sum(1, keepdims=True) - Y) / rows
    dh = (tf32(dl) @ tf32(W2.T)) * (pre > 0)
    model = {"x": tf32(dh) @ tf32(W1.T), "w1": tf32(X.T) @ tf32(dh), "b1": dh.sum(0), "w2": tf32(h.T) @ tf32(dl)}
    for name, want in model.items():
        assert np.linalg.norm(grads[name] - want) <= 1e-5 * np.linalg.norm(want), name


def test_chosen_only_at_tf32_on_tensor_core_targets_for_float32():
    n = 256

    def f(x: sd.f32[n, n], y: sd.f32[n, n]):
        return np.tanh(x @ y)

    def g(x: sd.f64[n, n], y: sd.f64[n, n]):
        return np.tanh(x @ y)

    def bodies(fn, target, at):
        p = plan(precision.with_precision(sd.differentiable_program(fn).graph, at), {}, target)
        return [choose(KernelShape(p, k, target)).body.name for k in p.kernels if not isinstance(k, HostKernel)]
    assert bodies(f, backends.cuda.TARGET, "tf32") == ["tensor_tiles"]
    assert bodies(f, backends.cuda.TARGET, "highest") == ["group_tiles"]  # exact float32 by default
    assert bodies(g, backends.cuda.TARGET, "tf32") == ["group_tiles"]  # float64 is never rounded
    assert bodies(f, backends.vulkan.TARGET, "tf32") == ["group_tiles"]  # no tensor cores claimed


def test_tensor_tiles_split_into_whole_fragments_or_are_refused_by_name():
    tuning = targets.TUNING
    assert tile_shapes.tensor_tile(tuning, 4096, 4096) == ((128, 128), (2, 4))
    assert tile_shapes.tensor_tile(tuning, 65536, 10) == ((256, 16), (8, 1))
    assert tile_shapes.tensor_tile(tuning, 10, 512) == ((16, 256), (1, 8))
    tile_shapes.check_tensor(tuning)
    with pytest.raises(ValueError, match=r"tensor_tile/tensor_warps = \(128, 128\)/\(16, 1\)"):
        tile_shapes.check_tensor(replace(tuning, tensor_warps=(16, 1)))  # 8 rows a warp: half a fragment
    with pytest.raises(ValueError, match="tensor_tile_k = 12"):
        tile_shapes.check_tensor(replace(tuning, tensor_tile_k=12))
