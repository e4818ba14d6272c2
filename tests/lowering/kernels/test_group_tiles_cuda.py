"""The CUDA a group-tiled product becomes, read without a GPU: Slang's CUDA
source for the kernel (the compiler library in slangpy's wheel) compiled by
nvcc for sm_90 (an H100), then its PTX and ptxas's resource counts checked
for what the form means to do: no spills, registers for two workgroups a
multiprocessor, the groupshared tiles the Tuning asks for, barriers, the
unrolled block of fused multiply-adds per staged k, and 16-byte operand loads
(``ld.global.v4.f32``: rows of 512 floats start 16-byte aligned; the scalar
path for other rows is checked on lavapipe, test_group_tiles.py) (``../shared/notes/gpu.md``,
"Reading GPU kernels without a GPU").  Skips where nvcc or the compiler
library is missing."""
# (no ``from __future__ import annotations``: the programs' shape annotations close over local sizes)
import re
import shutil
import subprocess

import numpy as np
import pytest

import slang_compiler
import symdiff as sd
from symdiff.lowering import backends
from symdiff.lowering.codegen import generate
from symdiff.lowering.plan import plan

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None or not slang_compiler.available(),
                                reason="needs nvcc and slangpy's Slang compiler library")
WIDE_LOAD = r"\bld\.global(?:\.nc)?\.v4\.f32\b"  # 16 bytes from global memory into four registers


def cuda_resources(cu: str, tmp_path) -> tuple[str, dict[str, int]]:
    """The PTX of CUDA source ``cu`` for sm_90, and ptxas's counts for its kernel."""
    (tmp_path / "k.cu").write_text(cu)
    run = subprocess.run(["nvcc", "-arch=sm_90", "-ptx", "k.cu", "-o", "k.ptx"], cwd=tmp_path,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    run = subprocess.run(["ptxas", "-arch=sm_90", "-v", "k.ptx", "-o", "k.cubin"], cwd=tmp_path,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    numbers = {name: int(m.group(1)) for name, pattern in (
        ("registers", r"Used (\d+) registers"), ("smem", r"(\d+) bytes smem"),
        ("stack", r"(\d+) bytes stack frame"), ("spill_stores", r"(\d+) bytes spill stores"),
        ("spill_loads", r"(\d+) bytes spill loads")) for m in [re.search(pattern, run.stdout + run.stderr)] if m}
    return (tmp_path / "k.ptx").read_text(), numbers


def forward_product_ptx(n: int, tmp_path) -> tuple[str, dict[str, int]]:
    """PTX and resources of the group-tiled ``a @ b`` kernel of an n x n program's gradient."""
    def f(a: sd.f32[n, n], b: sd.f32[n, n], c: sd.f32[n, n]):
        return np.sum(c * (a @ b))
    graph = sd.differentiable_program(f).backward_graph(wrt=["a", "b", "c"])
    module = generate(plan(graph, {}, backends.cuda.TARGET), backends.cuda.TARGET)
    entry = next(e for e in module.entry_points(False) if "matmul" in e)
    return cuda_resources(slang_compiler.compile_source(module.source, "cuda", [entry])[entry], tmp_path)


def test_the_forward_product_compiles_for_sm90_without_spills(tmp_path):
    ptx, used = forward_product_ptx(512, tmp_path)
    tuning = backends.cuda.TARGET.tuning
    (bm, bn), (tm, tn), k = tuning.group_tile, tuning.group_thread_tile, tuning.group_tile_k
    assert used["stack"] == used["spill_stores"] == used["spill_loads"] == 0, used
    assert used["registers"] <= 65536 // (2 * tuning.group_size), used  # two workgroups a multiprocessor
    assert used["smem"] == 4 * k * (bm + 1 + bn + 1), used  # both float tiles, a padding column each
    assert len(re.findall(r"\bbar\.sync\b", ptx)) >= 2  # staged, then read before the next tiles
    assert len(re.findall(r"\bst\.shared\.f32\b", ptx)) == bm * k // tuning.group_size + bn * k // tuning.group_size
    assert len(re.findall(r"\bfma\.rn\.f32\b", ptx)) >= k * tm * tn  # the staged k's unrolled
    assert not re.search(r"\b(w?mma)\b", ptx)  # exact float32: no tensor cores
    # rows of 512 floats: each thread stages its share of both tiles 16 bytes a load
    quads = -(-bm * k // (4 * tuning.group_size)) + -(-bn * k // (4 * tuning.group_size))
    assert len(re.findall(WIDE_LOAD, ptx)) == quads

