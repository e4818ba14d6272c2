"""Matmul-shaped reductions as register-blocked kernels.

A tasklet over ``(i, j, k)`` adding ``a[i, k] * b[k, j]`` into ``c[i, j]``
(any index order, extra batch symbols, a constant factor: the forward
matmul and both halves of its backward pass) would otherwise run one thread
per output element looping over ``k``: about 1 GFLOP/s on either backend
here, every operand element loaded once per output that uses it.  A thread
instead owns a tile of outputs, keeps their sums in registers, and loads each
operand element once per tile:

* slangpy's CPU device runs threads one after another, so parallelism is
  g++'s vectoriser: a thread owns ``CPU_ROWS`` rows (each up to ``CPU_ROW``)
  along the axis whose operand is contiguous, and the inner loop over it
  vectorises.  One row per thread streamed the whole contiguous operand once
  per row: fine while it sits in cache (22 GFLOP/s for 512x512x512 here,
  against 1.0), but the MLP's dW = X^T dH (512x4096 @ 4096x512, an 8 MB
  operand) fell to 15; four rows reuse each loaded element four times
  (35-37 GFLOP/s for both; 2 rows 24, 8 rows 28-34).
* lavapipe runs SIMD across threads: a thread owns an 8x4 tile, every loop
  unrolled (5 GFLOP/s against 0.9; groupshared tiles measured slower, its
  barriers are costly, and wider vector loads gained nothing).

Everything else in the kernel (the epilogue: bias, activation, gradient
chains fused behind the matmul) runs per output point, afterwards, from the
tile's registers.  ``bench/matmul_kernels.py`` measures both forms.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import sympy

from symdiff.ir.graph import DataflowGraph, Tasklet

from . import targets

if TYPE_CHECKING:
    from .plan import Kernel, Step

# Outputs per thread along (outer, inner) axis: see the module docstring.
VECTOR_TILE = (8, 4)
CPU_ROW = 512
# Rows per CPU thread: each element of the contiguous operand's row, once loaded,
# feeds CPU_ROWS rows of sums (4x512 floats, 8 KB, stay in L1).
CPU_ROWS = 4
# Fewer outputs than this leave too few tiles for the cores: a long reduction is
# then better split in two stages (plan.split_large_reductions).
MIN_TILED_OUTPUTS = 256


@dataclass(frozen=True)
class MatmulShape:
    """A sum of ``coeff * a[.., k, ..] * b[.., k, ..]``: ``a`` is the read using
    ``row``, ``b`` the one using ``col``; other parallel symbols are batch axes."""

    row: sympy.Symbol
    col: sympy.Symbol
    k: sympy.Symbol
    a: str  # connector names
    b: str
    coeff: sympy.Expr


def matmul_shape(graph: DataflowGraph, t: Tasklet) -> MatmulShape | None:
    """The matmul reading of a tasklet, or None: one summed write, two reads,
    every index component a lone domain symbol, one reduced symbol read by
    both operands and one parallel symbol read by each operand alone."""
    writes, reads = graph.writes(t.name), graph.reads(t.name)
    if len(writes) != 1 or len(reads) != 2 or writes[0][1].accumulate != "sum" or t.condition is not sympy.true:
        return None
    domain = set(t.index_symbols)
    if any(not (isinstance(e, sympy.Symbol) and e in domain) for _, m in writes + reads for e in m.index):
        return None
    out = writes[0][1]
    if len(set(out.index)) != len(out.index):
        return None
    reduced = [s for s in t.index_symbols if s not in out.index]
    (sa, ma), (sb, mb) = ((t.inputs[m.connector], m) for _, m in reads)
    # as_coeff_Mul: as_coeff_mul leaves a Float coefficient among the factors (1.5 * a @ b was untiled)
    coeff, rest = t.body[out.connector].as_coeff_Mul()
    factors = sympy.Mul.make_args(rest)
    if len(reduced) != 1 or sa == sb or sorted(factors, key=str) != sorted((sa, sb), key=str):
        return None
    (k,) = reduced
    used_a, used_b = set(ma.index), set(mb.index)
    only_a = [s for s in out.index if s in used_a - used_b]
    only_b = [s for s in out.index if s in used_b - used_a]
    if k not in used_a & used_b or not only_a or not only_b:
        return None
    return MatmulShape(only_a[-1], only_b[-1], k, ma.connector, mb.connector, coeff)


@dataclass
class Tiling:
    """How a kernel's threads cover its box: ``tile[a]`` outputs along box axis
    ``a`` per thread; ``outer``/``inner`` are the step's tiled symbols, the
    inner one running along contiguous memory where an operand allows."""

    step: "Step"
    shape: MatmulShape
    outer: sympy.Symbol
    inner: sympy.Symbol
    tile: tuple[int, ...]
    box: tuple[int, ...]

    @property
    def grid(self) -> tuple[int, ...]:
        return tuple(-(-n // t) for n, t in zip(self.box, self.tile))

    @property
    def threads(self) -> int:
        return math.prod(self.grid)

    def axis(self, symbol: sympy.Symbol) -> int:
        return [s for s, _, _ in self.step.parallel].index(symbol)


def _unit_stride(graph: DataflowGraph, t: Tasklet, connector: str, symbol: sympy.Symbol) -> bool:
    _, m = next((a, m) for a, m in graph.reads(t.name) if m.connector == connector)
    return m.index[-1] == symbol


def tiling(graph: DataflowGraph, kernel: "Kernel", device: "str | targets.Target") -> Tiling | None:
    """The register-blocked layout of a kernel whose first matmul-shaped step
    has enough outputs, or None (one thread per output, as planned)."""
    if kernel.threads < MIN_TILED_OUTPUTS:
        return None
    for step in kernel.steps:
        shape = matmul_shape(graph, step.tasklet) if len(step.loop) == 1 else None
        if shape is None or any(graph.containers[r.memlet.container].dtype not in ("float32", "float64")
                                for r in step.reads):
            continue
        t = step.tasklet
        # the vectorised axis: one whose operand is contiguous along it, the output's last one on a tie
        out_last = graph.writes(t.name)[0][1].index[-1]
        unit = [s for s, c in ((shape.col, shape.b), (shape.row, shape.a)) if _unit_stride(graph, t, c, s)]
        inner = unit[0] if len(unit) == 1 else (out_last if out_last in (shape.row, shape.col) else shape.col)
        outer = shape.row if inner == shape.col else shape.col
        syms = [s for s, _, _ in step.parallel]
        tile = [1] * len(kernel.box)
        n_inner = kernel.box[syms.index(inner)]
        if targets.of(device).sequential:
            tile[syms.index(inner)] = -(-n_inner // -(-n_inner // CPU_ROW))  # balanced rows of at most CPU_ROW
            tile[syms.index(outer)] = CPU_ROWS  # clamped below for a shorter axis
        else:
            tile[syms.index(outer)], tile[syms.index(inner)] = VECTOR_TILE
        return Tiling(step, shape, outer, inner, tuple(min(t, n) for t, n in zip(tile, kernel.box)), kernel.box)
    return None
