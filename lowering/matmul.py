"""Matmul-shaped reductions as register-blocked kernels.

A tasklet over ``(i, j, k)`` adding ``a[i, k] * b[k, j]`` into ``c[i, j]``
(any index order, extra batch symbols, a constant factor: the forward
matmul and both halves of its backward pass) would otherwise run one thread
per output element looping over ``k``: about 1 GFLOP/s on either backend
here, every operand element loaded once per output that uses it.  A thread
instead owns a tile of outputs, keeps their sums in registers, and loads each
operand element once per tile (the tile sizes are the target's
``Tuning``, ``lowering.targets``):

* slangpy's CPU device runs a kernel's threads one after another on each of
  up to two workers (``lowering.threads``), so parallelism within a thread
  is g++'s vectoriser.  A thread owns a tile of whole micro-kernel blocks
  (``Tuning.cpu_micro``: 8x32 outputs where AVX-512 gives 32 registers) and, per
  block of k's, packs the outer operand's slice k-major into a local array;
  each block of the tile then sums in registers over the block's k's, one
  row of the inner operand (read along memory) and one broadcast element per
  output row and k: g++ turns that into one vector FMA per row and k, with no
  load or store of a sum.  Where the inner operand runs along k only (``A
  B^T``: the reverse pass's ``dA = G B^T``) or the tiles would pass the
  box's edge, it is packed too, in square 64x64 tiles.  512^3 on one core,
  CPU time, 2.6 GHz AMD EPYC (peak ~83 GFLOP/s at 32 float32 FLOP/cycle):
  ``A B`` 35-46 -> 48-89, ``A^T B`` 33-48 -> 43-92, ``A B^T`` 13-16 -> 51-59
  GFLOP/s on a shared machine (the loops before kept a tile's sums in
  memory: 4 loads and 4 stores per 4 FMAs).
* lavapipe runs SIMD across threads: a thread owns an 8x4 tile, every loop
  unrolled (5 GFLOP/s against 0.9; groupshared tiles measured slower, its
  barriers are costly, and wider vector loads gained nothing).

On the CPU device, vector-matrix products ``x @ A`` and ``A^T g``
(``matvec_shape``; the reverse pass of every ``A @ x``) are tiled too: one
output per thread walked a column of ``A``; a thread now owns a row of
``Tuning.cpu_vector_row`` outputs and reads ``A`` row by row, summing in doubles as
every other in-thread float32 sum (mvt at 2048 value_and_grad 99 -> 20 ms).
The planner still treats them as reductions (fused with others, split in two
stages when long): only code generation tiles them, so every other target's
plan is unchanged.

Everything else in the kernel (the epilogue: bias, activation, gradient
chains fused behind the matmul) runs per output point, afterwards, from the
tile's sums.  ``bench/matmul_kernels.py`` measures the forms.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
import sympy

from symdiff.ir.graph import DataflowGraph, Memlet, Tasklet

from . import targets
from .host_products import same_factors
from .plan_types import Kernel, Step
from .remembered import remembered


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


@remembered
def _product(graph: DataflowGraph, t: Tasklet) -> tuple[MatmulShape, Memlet, Memlet] | None:
    """``t`` as a sum of products of its two reads over one reduced symbol, with
    each read's output axes (either may have none), and the two reads' memlets;
    or None: one summed write, two reads, every index component a lone domain
    symbol.  Remembered while planning (``lowering.remembered``): most passes ask it."""
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
    if len(reduced) != 1 or sa == sb or not same_factors(factors, (sa, sb)):
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
    # CPU device (``codegen.micro_kernel``): (rows, columns) of the block of the tile summed in
    # registers, the k's per block of the loop, and whether the inner operand is packed too
    micro: tuple[int, int] | None = None
    k_block: int = 0
    packed_inner: bool = False

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
    target = targets.of(device)
    if kernel.threads < target.tuning.min_tiled_outputs:
        return None
    for find in (matmul_shape, matvec_shape) if target.sequential else (matmul_shape,):
        for step in kernel.steps:
            if not _rest_per_output(kernel, step):
                continue
            shape = find(graph, step.tasklet) if len(step.loop) == 1 else None
            if shape is not None and all(graph.containers[r.memlet.container].dtype in ("float32", "float64")
                                         for r in step.reads):
                return _tiles(graph, kernel, step, shape, target)
    return None


def _rest_per_output(kernel: "Kernel", step: "Step") -> bool:
    """Whether every other step of ``kernel`` can run once per output of a tile
    (``codegen.per_output``): no loop, or a loop accumulating into its outputs.
    A row kernel's step looping over the row with plain writes (``lowering.rowfusion``:
    ``sum(y @ B)``'s gradient of B, fuzz seed 840141) cannot."""
    return all(not other.loop or all(w.memlet.accumulate for w in other.writes)
               for other in kernel.steps if other is not step)


def _tiles(graph: DataflowGraph, kernel: "Kernel", step: "Step", shape: MatmulShape,
           target: targets.Target) -> Tiling:
    t = step.tasklet
    syms = [s for s, _, _ in step.parallel]
    tile = [1] * len(kernel.box)
    if shape.vector:
        inner = shape.row if shape.col is None else shape.col
        n_inner = kernel.box[syms.index(inner)]
        tile[syms.index(inner)] = -(-n_inner // -(-n_inner // target.tuning.cpu_vector_row))
        return Tiling(step, shape, None, inner, tuple(tile), kernel.box)
    # the vectorised axis: one whose operand is contiguous along it, the output's last one on a tie
    out_last = graph.writes(t.name)[0][1].index[-1]
    unit = [s for s, c in ((shape.col, shape.b), (shape.row, shape.a)) if _unit_stride(graph, t, c, s)]
    inner = unit[0] if len(unit) == 1 else (out_last if out_last in (shape.row, shape.col) else shape.col)
    outer = shape.row if inner == shape.col else shape.col
    _, k0, k1 = step.loop[0]
    if target.sequential and math.prod(kernel.box) * (int(k1) - int(k0)) >= target.tuning.cpu_micro_min_work:
        return _cpu_tiles(graph, step, shape, outer, inner, tile, kernel.box, target)
    tile[syms.index(outer)], tile[syms.index(inner)] = target.tuning.vector_tile
    return Tiling(step, shape, outer, inner, tuple(min(t, n) for t, n in zip(tile, kernel.box)), kernel.box)


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def _balanced(n: int, most: int, multiple: int) -> int:
    """Outputs per tile along an axis of ``n``: as few tiles as ``most`` allows,
    equal, each a whole number of ``multiple`` (the last may pass ``n``)."""
    return _round_up(-(-n // -(-n // most)), multiple)


def _cpu_tiles(graph: DataflowGraph, step: "Step", shape: MatmulShape, outer: sympy.Symbol, inner: sympy.Symbol,
               tile: list[int], box: tuple[int, ...], target: targets.Target) -> Tiling:
    """The CPU device's blocking: tiles of whole micro-kernel blocks, the inner
    operand read in place when it runs along the inner axis and the tiles
    cover that axis exactly (its loads then never leave the box), else packed."""
    syms = [s for s, _, _ in step.parallel]
    o, i = syms.index(outer), syms.index(inner)
    inner_operand = shape.b if inner == shape.col else shape.a
    _, k0, k1 = step.loop[0]
    length = int(k1) - int(k0)
    tuning = target.tuning
    wide = box[o] * box[i] * length >= tuning.cpu_wide_micro_work and "-mavx512f" in targets.compiler_args(target)
    micro = tuning.cpu_micro if wide else tuning.cpu_micro_narrow
    rows, cols = micro
    tile[o], tile[i] = rows, _balanced(box[i], tuning.cpu_tile_columns, cols)
    packed = not _unit_stride(graph, step.tasklet, inner_operand, inner) or box[i] % tile[i] != 0
    if packed:
        tile[o], tile[i] = (_balanced(box[o], tuning.cpu_packed_tile[0], rows),
                            _balanced(box[i], tuning.cpu_packed_tile[1], cols))
    k_block = max(1, min(length, tuning.cpu_packed_k_block if packed else tuning.cpu_k_block))
    return Tiling(step, shape, outer, inner, tuple(tile), box, micro, k_block, packed)
