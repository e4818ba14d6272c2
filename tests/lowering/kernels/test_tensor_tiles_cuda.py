"""The CUDA a TF32 tensor-core product becomes, read without a GPU (as
test_group_tiles_cuda.py reads the exact form's): nvcc for sm_90 must keep
the inline PTX, one ``mma.sync ... .tf32`` per 16x8 fragment of a warp's
block per 8 staged k's, one ``cvt.rna.tf32.f32`` per element a thread
stages (prefetching the next k's into registers or not), no spills,
registers for two workgroups a multiprocessor, and
groupshared memory for the two padded tiles only (the instruction's
stand-in scratch for other targets is not in the CUDA).  Skips where nvcc
or the compiler library is missing."""
# (no ``from __future__ import annotations``: the programs' shape annotations close over local sizes)
import re
from dataclasses import replace

import numpy as np
import pytest

import slang_compiler
import symdiff as sd
from symdiff.ir.storage import computed_in_float32
from symdiff.lowering import backends
from symdiff.lowering.codegen import generate
from symdiff.lowering.kernels import precision
from symdiff.lowering.kernels.tensor_tiles import TensorTiles
from symdiff.lowering.plan import plan

from .test_group_tiles_cuda import cuda_resources, pytestmark  # noqa: F401  (the same skip)

MMA = r"\bmma\.sync\.aligned\.m16n8k8\.row\.col\.f32\.tf32\.tf32\.f32\b"


@pytest.mark.parametrize("prefetch", [False, True], ids=["staged", "prefetching"])
def test_the_tf32_products_compile_to_tensor_core_instructions_without_spills(tmp_path, prefetch):
    n = 512

    def f(a: sd.f32[n, n], b: sd.f32[n, n], c: sd.f32[n, n]):
        return np.sum(c * (a @ b))
    graph = precision.with_precision(sd.differentiable_program(f).backward_graph(wrt=["a", "b", "c"]), "tf32")
    target = replace(backends.cuda.TARGET, tuning=replace(backends.cuda.TARGET.tuning, group_prefetch=prefetch))
    module = generate(plan(graph, {}, target), target)
    entries = [e for e in module.entry_points(False) if "matmul" in e]
    assert len(entries) == 3  # a @ b, and both gradients
    tuning = target.tuning
    (bm, bn), (wm, wn), k = tuning.tensor_tile, tuning.tensor_warps, tuning.tensor_tile_k
    fragments = (bm // wm // 16) * (bn // wn // 8)
    for entry in entries:
        ptx, used = cuda_resources(slang_compiler.compile_source(module.source, "cuda", [entry])[entry], tmp_path)
        assert used["stack"] == used["spill_stores"] == used["spill_loads"] == 0, (entry, used)
        assert used["registers"] <= 65536 // (2 * tuning.group_size), (entry, used)
        assert used["smem"] == 4 * k * (bm + TensorTiles.padding(bm) + bn + TensorTiles.padding(bn)), (entry, used)
        assert len(re.findall(MMA, ptx)) == fragments * k // 8, entry
        assert len(re.findall(r"\bcvt\.rna\.tf32\.f32\b", ptx)) == (bm + bn) * k // tuning.group_size, entry


@pytest.mark.parametrize("spec, ptx_type", [(sd.f16, "f16"), (sd.bf16, "bf16")], ids=["float16", "bfloat16"])
def test_sixteen_bit_products_compile_to_their_own_instruction(tmp_path, spec, ptx_type):
    """A product of two 16-bit arguments, at the default precision: one
    ``mma.sync ... m16n8k16 ... .{f16,bf16}`` per fragment per 16 staged k's,
    no TF32 rounding, no spills, registers for one workgroup a multiprocessor
    (packing two elements a register keeps more of them live than TF32's
    fragments: two workgroups' worth is not reached)."""
    n = 512

    def f(a: spec[n, n], b: spec[n, n], c: sd.f32[n, n]):
        return np.sum(c * (a @ b))
    target = backends.cuda.TARGET
    module = generate(plan(computed_in_float32(sd.differentiable_program(f).graph), {}, target), target)
    (entry,) = [e for e in module.entry_points(False) if "matmul" in e]
    tuning = target.tuning
    (bm, bn), (wm, wn), k = tuning.tensor_tile, tuning.tensor_warps, tuning.tensor_tile_k
    ptx, used = cuda_resources(slang_compiler.compile_source(module.source, "cuda", [entry])[entry], tmp_path)
    assert used["stack"] == used["spill_stores"] == used["spill_loads"] == 0, used
    assert used["registers"] <= min(255, 65536 // tuning.group_size), used
    mma = rf"\bmma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.{ptx_type}\.{ptx_type}\.f32\b"
    assert len(re.findall(mma, ptx)) == (bm // wm // 16) * (bn // wn // 8) * k // 16
    assert not re.findall(MMA, ptx) and not re.findall(r"\bcvt\.rna\.tf32\.f32\b", ptx)
