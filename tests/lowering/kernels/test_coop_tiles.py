"""Tensor-core products through Vulkan's cooperative matrices
(lowering.kernels.coop_tiles).

lavapipe has no cooperative matrices, so the products run there with the
target's ``stand_in``: the same kernels with the 16x16x16 loads, products and
stores written in plain Slang by the extension's layouts.  Every product form,
batches, narrow and split-K products, ragged sizes and prefetching must then
give float32 sums of exact products of the 16-bit operands (checked against
float64).  The text a GPU driver would get instead is compiled to SPIR-V and
passed through Khronos' validator, and must hold one ``OpCooperativeMatrixMulAddKHR``
per fragment product; which targets claim the form is checked from their features.
"""
# (no ``from __future__ import annotations``: the programs' shape annotations close over local sizes)
import re
from dataclasses import replace
from types import SimpleNamespace

import ml_dtypes
import numpy as np
import pytest

import slang_compiler
import spirv_tools
import symdiff as sd
from symdiff.ir.storage import computed_in_float32
from symdiff import lowering
from symdiff.lowering import backends, targets
from symdiff.lowering.backends.vulkan import cooperative_matrices
from symdiff.lowering.codegen import generate
from symdiff.lowering.kernels import precision, tile_shapes
from symdiff.lowering.kernels.registry import choose
from symdiff.lowering.kernels.writer import KernelShape
from symdiff.lowering.plan import plan
from symdiff.lowering.plan_types import HostKernel

from .test_group_tiles import B, K, M, N, gpu_form

MARK = "cooperative matrices"  # the comment opening a cooperative-matrix product's sums
COOP = frozenset({"float16", "bfloat16"})
STAND_IN = targets.TensorCores(targets.COOPERATIVE_MATRIX, COOP, stand_in=True)
# Small tiles over 8 warps: 64x32 over 4x2 (a fragment a warp), 64x64 over 2x4 (2x1
# fragments a warp); narrow products 128x16 over 8x1.
SMALL = dict(tensor_tile=(64, 32), tensor_warps=(4, 2), tensor_tile_k=16, tensor_narrow_tile=(128, 16),
             tensor_narrow_warps=(8, 1), split_k_min_length=512, split_k_min_slice=64, split_k_target_workgroups=16)
OTHER = dict(tensor_tile=(64, 64), tensor_warps=(2, 4), tensor_tile_k=32)
HALVES = [pytest.param(np.float16, sd.f16, id="float16"), pytest.param(ml_dtypes.bfloat16, sd.bf16, id="bfloat16")]


def halves(half, shapes, seed):
    r = np.random.default_rng(seed)
    return [r.standard_normal(s).astype(half) for s in shapes]


def assert_exact_products_summed(got, a, b):
    """``got`` is ``a @ b`` (batched or not) of 16-bit ``a``, ``b``: exact products
    summed in float32, within 8 sqrt(K) units of the terms' root-sum-square."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    exact = a64 @ b64
    tol = 8 * np.sqrt(a.shape[-1]) * 2.0 ** -24 * np.sqrt(a64 ** 2 @ b64 ** 2)
    assert np.all(np.abs(got - exact) <= tol), np.max(np.abs(got - exact) / tol)


TUNINGS = pytest.mark.parametrize("tuning", [SMALL, dict(OTHER, group_prefetch=True)],
                                  ids=["fragment-a-warp", "prefetching"])


@pytest.mark.vulkan
@pytest.mark.parametrize("half, spec", HALVES)
@TUNINGS
def test_every_product_form_and_batches_sum_exact_products(monkeypatch, half, spec, tuning):
    """A B, A^T B, A B^T and a batch's A B, of 16-bit arguments of sizes no tile
    divides: each is the cotangent of a float32 argument, so its gradient is the
    product itself."""
    gpu_form(monkeypatch, tensor_cores=STAND_IN, **tuning)
    every_product_form_sums_exact_products(half, spec)


@TUNINGS
def test_on_a_vulkan_gpu_the_matrix_units_sum_exact_products(monkeypatch, tuning):
    """The same through the driver's cooperative matrices, where this machine's
    Vulkan device is a GPU that has them (bench.gpu_session runs it)."""
    if "vulkan" not in lowering.available_devices():
        pytest.skip("no vulkan device here")
    cores = backends.of("vulkan").target().tensor_cores
    if cores is None or cores.instructions != targets.COOPERATIVE_MATRIX or cores.stand_in:
        pytest.skip("this Vulkan device has no cooperative matrices")
    gpu_form(monkeypatch, **tuning)
    every_product_form_sums_exact_products(np.float16, sd.f16)


def every_product_form_sums_exact_products(half, spec):
    def f(a: spec[M, K], b: spec[K, N], at: spec[K, M], bt: spec[N, K], u: spec[B, M, K], v: spec[B, K, N],
          z1: sd.f32[M, N], z2: sd.f32[M, N], z3: sd.f32[M, N], zb: sd.f32[B, M, N]):
        return np.sum(z1 * (a @ b)) + np.sum(z2 * (at.T @ b)) + np.sum(z3 * (a @ bt.T)) + np.sum(zb * (u @ v))
    prog = sd.differentiable_program(f)
    a, b, at, bt, u, v = halves(half, [(M, K), (K, N), (K, M), (N, K), (B, M, K), (B, K, N)], seed=1)
    zs = [np.zeros((M, N), np.float32)] * 3 + [np.zeros((B, M, N), np.float32)]
    _, grads = prog.value_and_grad(a, b, at, bt, u, v, *zs, wrt=["z1", "z2", "z3", "zb"], device="vulkan")
    assert prog.slang_source(device="vulkan").count(MARK) == 4
    assert_exact_products_summed(grads["z1"], a, b)
    assert_exact_products_summed(grads["z2"], at.T, b)
    assert_exact_products_summed(grads["z3"], a, bt.T)
    assert_exact_products_summed(grads["zb"], u, v)


R, D = 1536, 37


def forms(prog, wrt, target) -> dict[str, str]:
    p = plan(computed_in_float32(prog.backward_graph(wrt=wrt)), {}, target)
    return {k.name: choose(KernelShape(p, k, target)).body.name for k in p.kernels if not isinstance(k, HostKernel)}


@pytest.mark.vulkan
def test_narrow_and_split_k_products_sum_exact_products(monkeypatch):
    """x @ w with 10 outputs a row (the narrow tile) and x^T y over 1536 rows cut
    into slices (split-K), whose partial products take the form too."""
    gpu_form(monkeypatch, tensor_cores=STAND_IN, **SMALL)

    def f(x: sd.f16[R, D], w: sd.f16[D, 10], y: sd.f16[R, 10], g1: sd.f32[R, 10], g2: sd.f32[D, 10]):
        return np.sum(g1 * (x @ w)) + np.sum(g2 * (x.T @ y))
    prog = sd.differentiable_program(f)
    chosen = forms(prog, ["g1", "g2"], backends.of("vulkan").target())
    coop = [name for name, form in chosen.items() if form == "coop_tiles"]
    assert len(coop) == 2 and any(name.endswith("stage1") for name in coop), chosen
    x, w, y = halves(np.float16, [(R, D), (D, 10), (R, 10)], seed=2)
    zeros = np.zeros((R, 10), np.float32), np.zeros((D, 10), np.float32)
    _, grads = prog.value_and_grad(x, w, y, *zeros, wrt=["g1", "g2"], device="vulkan")
    assert_exact_products_summed(grads["g1"], x, w)
    assert_exact_products_summed(grads["g2"], x.T, y)


def hardware(tuning=None) -> targets.Target:
    """A hardware Vulkan GPU's target whose driver has cooperative matrices."""
    target = replace(backends.vulkan.TARGET, tensor_cores=targets.TensorCores(targets.COOPERATIVE_MATRIX, COOP))
    return target if tuning is None else replace(target, tuning=replace(target.tuning, **tuning))


def test_only_sixteen_bit_products_take_the_form_and_tf32_stays_exact():
    n = 256

    def f16(x: sd.f16[n, n], y: sd.f16[n, n]):
        return np.tanh(x @ y)

    def f32(x: sd.f32[n, n], y: sd.f32[n, n]):
        return np.tanh(x @ y)

    def mixed(x: sd.f16[n, n], y: sd.bf16[n, n]):
        return np.tanh(x @ y)

    def bodies(fn, target, at="highest"):
        p = plan(precision.with_precision(computed_in_float32(sd.differentiable_program(fn).graph), at), {}, target)
        return [choose(KernelShape(p, k, target)).body.name for k in p.kernels if not isinstance(k, HostKernel)]
    assert bodies(f16, hardware()) == ["coop_tiles"]
    assert bodies(f32, hardware(), "tf32") == ["group_tiles"]  # no TF32 cooperative matrices: exact
    assert bodies(mixed, hardware()) == ["group_tiles"]  # float16 with bfloat16 is a float32 product
    only_half = replace(hardware(), tensor_cores=replace(hardware().tensor_cores, operands=frozenset({"float16"})))
    assert bodies(f16, only_half) == ["coop_tiles"]
    assert bodies(f16, backends.cuda.TARGET) == ["tensor_tiles"]  # mma.sync's family


def test_a_vulkan_driver_claims_cooperative_matrices_only_with_the_features_and_32_lane_subgroups():
    def device(features, waves=(32, 32)):
        return SimpleNamespace(has_feature=lambda f: f in features,
                               info=SimpleNamespace(limits=SimpleNamespace(min_wave_size=waves[0],
                                                                           max_wave_size=waves[1])))
    Feature = backends.vulkan.spy.Feature
    claimed = cooperative_matrices(device({Feature.cooperative_matrix, Feature.half}))
    assert claimed == targets.TensorCores(targets.COOPERATIVE_MATRIX, frozenset({"float16"}))
    assert cooperative_matrices(device({Feature.cooperative_matrix, Feature.half}, waves=(32, 64))) is None
    assert cooperative_matrices(device({Feature.half})) is None
    assert cooperative_matrices(device({Feature.cooperative_matrix})) is None


def test_tiles_split_into_whole_cooperative_matrices_or_are_refused_by_name():
    tuning = targets.TUNING
    tile_shapes.check_tensor(tuning, targets.COOPERATIVE_MATRIX)
    # 128x32 over 2x4 warps: 64x8 a warp is whole 16x8 mma.sync fragments, half a cooperative matrix
    narrow_warps = replace(tuning, tensor_tile=(128, 32), tensor_warps=(2, 4))
    tile_shapes.check_tensor(narrow_warps, targets.MMA_SYNC)
    with pytest.raises(ValueError, match=r"tensor_tile/tensor_warps = \(128, 32\)/\(2, 4\).*16x16"):
        tile_shapes.check_tensor(narrow_warps, targets.COOPERATIVE_MATRIX)


needs_validator = pytest.mark.skipif(not (slang_compiler.available() and spirv_tools.available()),
                                     reason="no Slang compiler library or SPIRV-Tools with cooperative matrices")


@needs_validator
@pytest.mark.parametrize("spec, element", [(sd.f16, "%half"), (sd.bf16, "%bfloat16")], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("prefetch", [False, True], ids=["staged", "prefetching"])
def test_the_products_are_valid_spirv_with_a_matrix_product_per_fragment(tmp_path, spec, element, prefetch):
    """The default tuning's 128x128 tiles (4x2 fragments a warp, 16 k's at a
    time) and a narrow product's, as a Vulkan GPU's driver would get them."""
    n, rows = 512, 4096

    def f(a: spec[n, n], b: spec[n, n], x: spec[rows, n], w: spec[n, 10], c: sd.f32[n, n], g: sd.f32[rows, 10]):
        return np.sum(c * (a @ b)) + np.sum(g * (x @ w))
    target = hardware(dict(group_prefetch=prefetch))
    module = generate(plan(computed_in_float32(sd.differentiable_program(f).graph), {}, target), target)
    entries = [e for e in module.entry_points(False) if "matmul" in e]
    assert len(entries) == 2 and module.source.count(MARK) == 2
    tuning = target.tuning
    for entry, ((bm, bn), (wm, wn)) in zip(sorted(entries), [(tuning.tensor_tile, tuning.tensor_warps),
                                                              (tuning.tensor_narrow_tile, tuning.tensor_narrow_warps)]):
        assembly = slang_compiler.compile_source(module.source, "spirv", [entry])[entry]
        spirv_tools.validate(assembly, tmp_path)
        products_in_a_k_tile = (bm // wm // 16) * (bn // wn // 16)
        assert len(re.findall(r"\bOpCooperativeMatrixMulAddKHR\b", assembly)) in (1, products_in_a_k_tile), entry
        matrix_types = re.findall(r"OpTypeCooperativeMatrixKHR (%\w+) %\w+ %int_16 %int_16 %int_(\d)", assembly)
        assert {(t, use) for t, use in matrix_types} == {(element, "0"), (element, "1"), ("%float", "2")}, entry
        assert "OpCooperativeMatrixStoreKHR" in assembly
