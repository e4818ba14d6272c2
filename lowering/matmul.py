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

Two more forms on the CPU device, where the plain one read memory across the
grain (``bench.linear_algebra``):

* ``A B^T`` (the reverse pass's ``dA = G B^T``): the row's operand runs along
  ``k`` only, so each output of the row read another cache line; it is read in
  blocks of ``CPU_TRANSPOSED_K`` k's per output, transposed into a local
  array the row loop reads along memory (512^3 at 7 -> 12-13 GFLOP/s on one
  core, CPU time on the loaded machine).
* vector-matrix products ``x @ A`` and ``A^T g`` (``matvec_shape``; the
  reverse pass of every ``A @ x``): one output per thread walked a column of
  ``A``; a thread now owns a row of ``CPU_VECTOR_ROW`` outputs and reads ``A``
  row by row, summing in doubles as every other in-thread float32 sum (mvt at
  2048 value_and_grad 99 -> 20 ms).  The planner still treats them as
  reductions (fused with others, split in two stages when long): only code
  generation tiles them, so every other target's plan is unchanged.

Everything else in the kernel (the epilogue: bias, activation, gradient
chains fused behind the matmul) runs per output point, afterwards, from the
tile's registers.  ``bench/matmul_kernels.py`` measures both forms.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import sympy

from symdiff.ir.graph import DataflowGraph, Memlet, Tasklet

from . import targets

if TYPE_CHECKING:
    from .plan import Kernel, Step

# Outputs per thread along (outer, inner) axis: see the module docstring.
VECTOR_TILE = (8, 4)
CPU_ROW = 512
# Rows per CPU thread: each element of the contiguous operand's row, once loaded,
# feeds CPU_ROWS rows of sums (4x512 floats, 8 KB, stay in L1).
CPU_ROWS = 4
# A B^T on the CPU device: the row's operand runs along k, so the row loop read
# one cache line per output.  It is read CPU_TRANSPOSED_K k's (a 64-byte line of
# float32) at a time per output into a local block, transposed, and the row loop
# reads the block along memory; rows of CPU_TRANSPOSED_ROW keep the block (16 KB)
# and the sums in L1.
CPU_TRANSPOSED_K = 16
CPU_TRANSPOSED_ROW = 256
# Outputs per CPU thread of a vector-matrix product (one row of sums, kept in
# doubles as every in-thread float32 sum is: lowering.codegen.WIDE_ACCUMULATORS).
CPU_VECTOR_ROW = 256
# Fewer outputs than this leave too few tiles for the cores: a long reduction is
# then better split in two stages (plan.split_large_reductions).
MIN_TILED_OUTPUTS = 256


@dataclass(frozen=True)
class MatmulShape:
    """A sum of ``coeff * a[.., k, ..] * b[.., k, ..]``: ``a`` is the read using
    ``row``, ``b`` the one using ``col``; other parallel symbols are batch axes.
    In a vector-matrix product (``matvec_shape``) the vector's axis is None."""

    row: sympy.Symbol | None
    col: sympy.Symbol | None
    k: sympy.Symbol
    a: str  # connector names
    b: str
    coeff: sympy.Expr

    @property
    def vector(self) -> bool:
        return self.row is None or self.col is None


def _product(graph: DataflowGraph, t: Tasklet) -> tuple[MatmulShape, Memlet, Memlet] | None:
    """``t`` as a sum of products of its two reads over one reduced symbol, with
    each read's output axes (either may have none), and the two reads' memlets;
    or None: one summed write, two reads, every index component a lone domain
    symbol."""
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
    if k not in used_a & used_b:
        return None
    shape = MatmulShape(only_a[-1] if only_a else None, only_b[-1] if only_b else None, k, ma.connector,
                        mb.connector, coeff)
    return shape, ma, mb


def matmul_shape(graph: DataflowGraph, t: Tasklet) -> MatmulShape | None:
    """The matmul reading of a tasklet, or None: one summed write, two reads,
    every index component a lone domain symbol, one reduced symbol read by
    both operands and one parallel symbol read by each operand alone."""
    found = _product(graph, t)
    return None if found is None or found[0].vector else found[0]


def matvec_shape(graph: DataflowGraph, t: Tasklet) -> MatmulShape | None:
    """A vector-matrix product whose matrix runs along memory with the output,
    ``out[j] += v[k] * m[k, j]`` (``x @ A``, and ``A^T g``: the reverse pass of
    every ``A @ x``), or None.  One output per thread walks a column of the
    matrix, one element per cache line; tiled along ``j`` (``tiling``) a
    thread reads rows of the matrix along memory instead.  ``A @ x`` (the
    matrix contiguous along the reduction) is not one: a thread per output
    already reads its row along memory."""
    found = _product(graph, t)
    if found is None or not found[0].vector or (found[0].row is None) == (found[0].col is None):
        return None
    shape, ma, mb = found
    axis, matrix = (shape.row, ma) if shape.row is not None else (shape.col, mb)
    return shape if matrix.index[-1] == axis else None


@dataclass
class Tiling:
    """How a kernel's threads cover its box: ``tile[a]`` outputs along box axis
    ``a`` per thread; ``outer``/``inner`` are the step's tiled symbols, the
    inner one running along contiguous memory where an operand allows (a
    vector-matrix product has no ``outer``: its tiles are one row)."""

    step: "Step"
    shape: MatmulShape
    outer: sympy.Symbol | None
    inner: sympy.Symbol
    tile: tuple[int, ...]
    box: tuple[int, ...]
    # > 0: the inner operand runs along memory with k only (A B^T, dY W^T): read this many of its
    # k's at a time per output of the row, transposed into a local block the row's loop reads along
    transposed: int = 0

    @property
    def grid(self) -> tuple[int, ...]:
        return tuple(-(-n // t) for n, t in zip(self.box, self.tile))

    @property
    def threads(self) -> int:
        return math.prod(self.grid)

    def axis(self, symbol: sympy.Symbol | None) -> int | None:
        return None if symbol is None else [s for s, _, _ in self.step.parallel].index(symbol)

    def along(self, symbol: sympy.Symbol | None) -> int:
        """Outputs of a tile along ``symbol`` (1 along a vector product's missing ``outer``)."""
        return 1 if symbol is None else self.tile[self.axis(symbol)]

    def ragged(self, symbol: sympy.Symbol | None) -> bool:
        """Whether the last tile along ``symbol`` reaches past the box."""
        return symbol is not None and self.box[self.axis(symbol)] % self.along(symbol) != 0


def _unit_stride(graph: DataflowGraph, t: Tasklet, connector: str, symbol: sympy.Symbol) -> bool:
    _, m = next((a, m) for a, m in graph.reads(t.name) if m.connector == connector)
    return m.index[-1] == symbol


def tiling(graph: DataflowGraph, kernel: "Kernel", device: "str | targets.Target") -> Tiling | None:
    """The register-blocked layout of a kernel whose first matmul-shaped step
    has enough outputs, else, on the CPU device, of its first vector-matrix
    product (``matvec_shape``; elsewhere neighbouring threads' columns are
    neighbouring lanes, read together), or None (one thread per output, as
    planned)."""
    if kernel.threads < MIN_TILED_OUTPUTS:
        return None
    sequential = targets.of(device).sequential
    for find in (matmul_shape, matvec_shape) if sequential else (matmul_shape,):
        for step in kernel.steps:
            if not _rest_per_output(kernel, step):
                continue
            shape = find(graph, step.tasklet) if len(step.loop) == 1 else None
            if shape is not None and all(graph.containers[r.memlet.container].dtype in ("float32", "float64")
                                         for r in step.reads):
                return _tiles(graph, kernel, step, shape, sequential)
    return None


def _rest_per_output(kernel: "Kernel", step: "Step") -> bool:
    """Whether every other step of ``kernel`` can run once per output of a tile
    (``codegen.per_output``): no loop, or a loop accumulating into its outputs.
    A row kernel's step looping over the row with plain writes (``lowering.rowfusion``:
    ``sum(y @ B)``'s gradient of B, fuzz seed 840141) cannot."""
    return all(not other.loop or all(w.memlet.accumulate for w in other.writes)
               for other in kernel.steps if other is not step)


def _tiles(graph: DataflowGraph, kernel: "Kernel", step: "Step", shape: MatmulShape, sequential: bool) -> Tiling:
    t = step.tasklet
    syms = [s for s, _, _ in step.parallel]
    tile = [1] * len(kernel.box)
    if shape.vector:
        inner = shape.row if shape.col is None else shape.col
        n_inner = kernel.box[syms.index(inner)]
        tile[syms.index(inner)] = -(-n_inner // -(-n_inner // CPU_VECTOR_ROW))
        return Tiling(step, shape, None, inner, tuple(tile), kernel.box)
    # the vectorised axis: one whose operand is contiguous along it, the output's last one on a tie
    out_last = graph.writes(t.name)[0][1].index[-1]
    unit = [s for s, c in ((shape.col, shape.b), (shape.row, shape.a)) if _unit_stride(graph, t, c, s)]
    inner = unit[0] if len(unit) == 1 else (out_last if out_last in (shape.row, shape.col) else shape.col)
    outer = shape.row if inner == shape.col else shape.col
    n_inner = kernel.box[syms.index(inner)]
    inner_operand = shape.b if inner == shape.col else shape.a
    transposed = CPU_TRANSPOSED_K if sequential and _unit_stride(graph, t, inner_operand, shape.k) else 0
    if sequential:
        row = CPU_TRANSPOSED_ROW if transposed else CPU_ROW
        tile[syms.index(inner)] = -(-n_inner // -(-n_inner // row))  # balanced rows of at most CPU_ROW
        tile[syms.index(outer)] = CPU_ROWS  # clamped below for a shorter axis
    else:
        tile[syms.index(outer)], tile[syms.index(inner)] = VECTOR_TILE
    return Tiling(step, shape, outer, inner, tuple(min(t, n) for t, n in zip(tile, kernel.box)), kernel.box,
                  transposed)
