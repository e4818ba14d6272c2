"""Groupshared-tile products and split-K (lowering.kernels.group_tiles, split_k):
chosen on GPU targets, and on lavapipe (forced into the GPU form, small tiles,
sizes no tile divides) every transpose form, batched products and split
weight gradients agree with JAX in float64, and the tile shape changes no bit.
"""
# (no ``from __future__ import annotations``: the programs' shape annotations close over local sizes)
from dataclasses import replace

import jax
import ml_dtypes
import jax.numpy as jnp
import numpy as np
import pytest

import symdiff as sd
from float_bounds import within_half_spacing
from symdiff import lowering
from symdiff.lowering import backends, targets
from symdiff.lowering.kernels import split_k, tile_shapes
from symdiff.lowering.kernels.registry import choose
from symdiff.lowering.kernels.writer import KernelShape
from symdiff.lowering.plan import plan
from symdiff.lowering.plan_types import HostKernel

jax.config.update("jax_enable_x64", True)

MARK = "through groupshared memory"  # the comment opening a group-tiled product's sums
# Tiles small enough for sizes a test runs in seconds on lavapipe, two shapes: 16x16
# threads of 2x1 outputs, and 16x16 threads of one output each.
SMALL = dict(group_tile=(32, 16), group_thread_tile=(2, 1), group_tile_k=4,
             split_k_min_length=512, split_k_min_slice=64, split_k_target_workgroups=16)
OTHER = dict(group_tile=(16, 16), group_thread_tile=(1, 1), group_tile_k=8)


def gpu_form(monkeypatch, device: str = "vulkan", tensor_cores: targets.TensorCores | None = None,
             **tuning) -> str:
    """``device`` in the GPU form (lavapipe's own target keeps thread-per-output
    products), claiming ``tensor_cores`` (or its own), with ``tuning``; skipped where absent."""
    if device not in lowering.available_devices():
        pytest.skip(f"no {device} device here")
    backend = type(backends.of(device))
    own = backend.target
    monkeypatch.setattr(backend, "target", lambda b: replace(
        own(b), workgroup_reductions=True, tensor_cores=tensor_cores or own(b).tensor_cores,
        tuning=replace(own(b).tuning, **tuning)))
    return device


def rand(shapes, seed=0):
    r = np.random.default_rng(seed)
    return [r.standard_normal(s).astype(np.float32) for s in shapes]


def close_to_jax(fn, args, got_value, got_grads, names, rtol=2e-5):
    """``value_and_grad`` of the same function in JAX float64."""
    value, grads = jax.jit(jax.value_and_grad(fn, argnums=tuple(range(len(args)))))(
        *[jnp.asarray(a, dtype=jnp.float64) for a in args])
    assert abs(got_value - float(value)) <= rtol * max(1.0, abs(float(value)))
    for name, ref in zip(names, grads):
        ref = np.asarray(ref)
        np.testing.assert_allclose(got_grads[name], ref, rtol=0, atol=rtol * max(1.0, np.abs(ref).max()), err_msg=name)


M, K, N, B = 37, 23, 29, 3  # no tile divides any of them


def products(xp, x, y, z, u, v):
    """A B forward, and its gradients G B^T and A^T G (every transpose form), and a batch's."""
    return xp.sum(xp.tanh(x @ y) * z) + xp.sum(xp.tanh(u @ v))


@pytest.mark.vulkan
def test_every_product_form_matches_jax_float64(monkeypatch):
    gpu_form(monkeypatch, **SMALL)

    def f(x: sd.f32[M, K], y: sd.f32[K, N], z: sd.f32[M, N], u: sd.f32[B, M, K], v: sd.f32[B, K, N]):
        return products(np, x, y, z, u, v)
    prog = sd.differentiable_program(f)
    args = rand([(M, K), (K, N), (M, N), (B, M, K), (B, K, N)])
    value, grads = prog.value_and_grad(*args, device="vulkan")
    # two products forward, two gradients each backward
    assert prog.slang_source(device="vulkan").count(MARK) == 6
    close_to_jax(lambda *a: products(jnp, *a), args, value, grads, "xyzuv")


@pytest.mark.vulkan
def test_operands_whose_rows_align_are_staged_16_bytes_a_load(monkeypatch):
    """K = 24 and M = 37, N = 29: an operand read along K (rows of 24 floats,
    16-byte aligned) is staged four elements a load, one read along M or N
    one at a time, in the same kernels; both agree with JAX float64."""
    gpu_form(monkeypatch, **OTHER)
    m, k, n = M, 24, N

    def f(x: sd.f32[m, k], y: sd.f32[k, n], z: sd.f32[m, n], u: sd.f32[B, m, k], v: sd.f32[B, k, n]):
        return products(np, x, y, z, u, v)
    prog = sd.differentiable_program(f)
    args = rand([(m, k), (k, n), (m, n), (B, m, k), (B, k, n)], seed=2)
    source = prog.slang_source(device="vulkan")
    # per product pair: x in x @ y and in x^T G (rows of k); y, G and the gradient's x@y^T reads along n or m
    assert source.count(MARK) == 6 and source.count("16 bytes a load") == 4
    value, grads = prog.value_and_grad(*args, device="vulkan")
    close_to_jax(lambda *a: products(jnp, *a), args, value, grads, "xyzuv")


@pytest.mark.vulkan
def test_the_tile_shape_changes_no_bit(monkeypatch):
    """Each output sums its k's in order in whichever tile, staged with or
    without prefetching the next k's into registers: the same bits."""
    def make():
        def f(x: sd.f32[M, K], y: sd.f32[N, K]):
            return np.sum(np.tanh(x @ y.T))
        return sd.differentiable_program(f)
    args = rand([(M, K), (N, K)], seed=1)
    results = []
    for tuning in (SMALL, OTHER, dict(OTHER, group_prefetch=True)):
        gpu_form(monkeypatch, **tuning)
        prog = make()
        results.append(prog.value_and_grad(*args, device="vulkan"))
        source = prog.slang_source(device="vulkan")
        prefetched = source.count("for the next k's")  # two loads a tile: before the loop and in it
        assert source.count(MARK) == 3 and prefetched == (12 if "group_prefetch" in tuning else 0)
    (v1, g1) = results[0]
    assert all(v == v1 and all(np.array_equal(g[n], g1[n]) for n in g1) for v, g in results[1:])
    close_to_jax(lambda x, y: jnp.sum(jnp.tanh(x @ y.T)), args, v1, g1, "xy")


@pytest.mark.vulkan
@pytest.mark.parametrize("half", [np.float16, ml_dtypes.bfloat16], ids=["float16", "bfloat16"])
def test_sixteen_bit_operands_are_staged_widened(monkeypatch, half):
    """16-bit arguments are read by the products themselves, each element widened as it
    is staged (``ir.storage``: no float32 copy of them is made); the gradients, rounded
    once to 16 bits, are within half a 16-bit spacing of JAX float64."""
    gpu_form(monkeypatch, **SMALL)
    spec = sd.f16 if half == np.float16 else sd.bf16
    load = "f16_value(" if half == np.float16 else "bf16_value("

    def f(x: spec[M, K], y: spec[K, N], z: sd.f32[M, N], u: spec[B, M, K], v: spec[B, K, N]):
        return products(np, x, y, z, u, v)
    prog = sd.differentiable_program(f)
    args = [a.astype(half) if a.ndim != 2 or a.shape != (M, N) else a
            for a in rand([(M, K), (K, N), (M, N), (B, M, K), (B, K, N)], seed=3)]
    source = prog.slang_source(device="vulkan")
    assert source.count(MARK) == 6 and "widen_" not in source
    staged = [line for line in source.splitlines() if "][mm_at] = " in line]
    assert sum(load in line for line in staged) == 8  # x, y, u, v forward; x, y, u, v in one gradient each
    value, grads = prog.value_and_grad(*args, device="vulkan")
    want, ref = jax.jit(jax.value_and_grad(lambda *a: products(jnp, *a), argnums=(0, 1, 2, 3, 4)))(
        *[jnp.asarray(np.asarray(a, np.float64)) for a in args])
    for name, r in zip("xyuv", (ref[0], ref[1], ref[3], ref[4])):
        within_half_spacing(grads[name], np.asarray(r), half)
    assert abs(float(value) - float(want)) <= 1e-4 * abs(float(want))


R, D, H = 1536, 19, 21


def mlp(xp, x, w1, w2):
    return xp.sum(xp.sin(xp.tanh(x @ w1) @ w2))


@pytest.mark.vulkan
def test_split_k_weight_gradients_match_jax_and_repeat_bit_for_bit(monkeypatch):
    gpu_form(monkeypatch, **SMALL)

    def f(x: sd.f32[R, D], w1: sd.f32[D, H], w2: sd.f32[H, 10]):
        return mlp(np, x, w1, w2)
    prog = sd.differentiable_program(f)
    # w1's gradient, 19x21 over 1536 rows: 2 tiles of 32x16; 16 workgroups // 2 = 8 slices at most,
    # 1536 // 64 = 24 long enough, 8 divides 1536: 8 slices of 192 rows
    p = plan(prog.backward_graph(wrt=["x", "w1", "w2"]), {}, backends.of("vulkan").target())
    (stage1,) = [k for k in p.kernels if any(s.tasklet.name.endswith("_stage1") and "matmul" in s.tasklet.name
                                             for s in k.steps)]
    assert stage1.box[0] == 8
    assert choose(KernelShape(p, stage1, backends.of("vulkan").target())).body.name == "group_tiles"
    args = rand([(R, D), (D, H), (H, 10)], seed=2)
    value, grads = prog.value_and_grad(*args, device="vulkan")
    close_to_jax(lambda *a: mlp(jnp, *a), args, value, grads, ["x", "w1", "w2"])
    again_value, again = prog.value_and_grad(*args, device="vulkan")
    assert again_value == value and all(np.array_equal(again[n], grads[n]) for n in grads)


def test_chosen_where_workgroups_run_together():
    n = 256

    def f(x: sd.f32[n, n], y: sd.f32[n, n]):
        return np.tanh(x @ y)
    graph = sd.differentiable_program(f).graph
    for target, body in ((backends.cuda.TARGET, "group_tiles"), (backends.vulkan.TARGET, "group_tiles"),
                         (backends.vulkan.LAVAPIPE, "register_tiles")):
        p = plan(graph, {}, target)
        assert [choose(KernelShape(p, k, target)).body.name for k in p.kernels
                if not isinstance(k, HostKernel)] == [body]


def test_split_k_slices_an_mlps_weight_gradients_on_an_h100_sized_target():
    # 512x10 (2 narrow tiles of 256x16) over 65536 rows: 264 // 2 = 132 at most, and
    # 65536 // 512 = 128 long enough, 128 divides 65536;
    # 512x512 (64 tiles of 64x64): 264 // 64 = 4; a 4096^2 gemm's 4096 tiles: none; lavapipe: none
    assert split_k.slices(backends.cuda.TARGET, 512, 10, 1, 65536) == 128
    assert split_k.slices(backends.cuda.TARGET, 512, 512, 1, 65536) == 4
    assert split_k.slices(backends.cuda.TARGET, 4096, 4096, 1, 4096) == 1
    assert split_k.slices(backends.vulkan.LAVAPIPE, 512, 10, 1, 65536) == 1
    # a contraction with no divisor in range is left whole: 65537 = 65537 (prime)
    assert split_k.slices(backends.cuda.TARGET, 512, 10, 1, 65537) == 1


def test_narrow_products_take_narrow_tiles_along_their_wide_axis():
    tuning = targets.TUNING
    assert tile_shapes.workgroup_tile(tuning, 65536, 10) == ((256, 16), (16, 1))
    assert tile_shapes.workgroup_tile(tuning, 10, 512) == ((16, 256), (1, 16))
    assert tile_shapes.workgroup_tile(tuning, 17, 4096) == ((64, 64), (4, 4))


def test_tile_numbers_that_make_no_workgroup_are_refused_by_name():
    with pytest.raises(ValueError, match=r"group_tile/group_thread_tile = \(64, 64\)/\(4, 2\)"):
        tile_shapes.check(replace(targets.TUNING, group_thread_tile=(4, 2)))
