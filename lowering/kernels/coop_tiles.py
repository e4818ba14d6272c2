"""Tensor-core products through Vulkan's cooperative matrices
(VK_KHR_cooperative_matrix; Slang's ``linalg.CoopMat``), on a target whose
tensor cores are of that family (``targets.COOPERATIVE_MATRIX``: a hardware
Vulkan GPU whose driver has them, ``backends.vulkan.cooperative_matrices``).

The same workgroup tiles as ``tensor_tiles`` (staged through groupshared
memory, every transpose form and batch read through the operand's own index,
the warps splitting the tile), for products of two float16 (or bfloat16)
operands: their products are exact in float32 and the matrix units sum them
in float32 (in their own order), as the other forms would.  The extension
has no TF32, so a float32 product stays with the exact forms on Vulkan.

What differs from ``mma.sync`` is that a cooperative matrix is opaque: which
lane holds which element is the driver's.  So:

* the staged tiles hold the 16-bit values themselves (``half``), in
  one-dimensional arrays (a ``CoopMat.Load`` pointer is to an element), rows
  padded to a multiple of 8 elements (the extension wants 16-byte aligned rows);
* per 16 staged k's each warp loads its fragments from them with
  ``CoopMat.Load`` (A: the outer operand's tile, ``k``-major, so column-major
  with the row length as stride; B: row-major) and sums each 16x16 block of
  its outputs with ``coopMatMulAdd`` into accumulator matrices;
* after the sums, in the epilogue (``before_output``), the warp stores one
  16x16 accumulator at a time with ``CoopMat.Store`` (row-major) into its own
  groupshared block (``_sums_block``), and each lane reads its 8 outputs of it
  back from there by the same layout (``element``):
  row ``lane / 2``, columns ``2 c + lane % 2``, ``c`` < 8 (neighbouring
  lanes, neighbouring columns).  One block a warp (1.25 KB) instead of the
  whole tile's sums (64 KB for 128x128, past what many drivers give a workgroup).

The form's warps are taken as a workgroup's consecutive 32 invocations
(``group_thread / 32``), which is how NVIDIA's and AMD's drivers form
subgroups of a one-dimensional workgroup; ``cooperative_matrices`` claims the
family only where subgroups are always 32 wide.

lavapipe has no cooperative matrices, so tests run the form with the target's
``TensorCores.stand_in``: the loads, products and stores written in plain
Slang by the layouts the extension defines (element (r, c) of a row-major
matrix at ``offset + r * stride + c``, of a column-major one at ``offset + c *
stride + r``); every other part of the kernel is the same text.  The
cooperative-matrix text itself is compiled to SPIR-V here and checked by
``spirv-val`` (tests/lowering/kernels/test_coop_tiles.py); only a GPU runs it.
"""
from __future__ import annotations

import sympy

from .. import targets
from .group_tiles import GroupTiling
from .tensor_tiles import TensorTiles, TensorTiling
from .tile_shapes import COOP_SIDE, WARP
from .writer import KernelWriter, identifier

# A lane's outputs of a fragment (row ``lane / 2``, every other column), and the
# row length of a warp's groupshared block of sums (16 + 4: rows 16-byte aligned, as
# the extension asks, and the 32 lanes' reads at most two to a bank: rows r and r + 8)
LANE_OUTPUTS = COOP_SIDE * COOP_SIDE // WARP
SUMS_ROW = COOP_SIDE + 4
# The 16-bit operand formats' element types in a staged tile, and a staged element
# widened again (the stand-in keeps a bfloat16's bits: lavapipe has no bfloat16 type)
_ELEMENTS = {"float16": "half", "bfloat16": "BFloat16"}
_STAND_IN_ELEMENTS = {"float16": "half", "bfloat16": "uint16_t"}
_STAND_IN_STAGED = {"float16": "half({})", "bfloat16": "uint16_t(asuint({}) >> 16)"}
_STAND_IN_WIDENED = {"float16": "float({})", "bfloat16": "asfloat(uint({}) << 16)"}
_LAYOUT = "linalg.CoopMatMatrixLayout"
ROW_MAJOR, COLUMN_MAJOR = "RowMajor", "ColumnMajor"


def element(array: str, offset: str, stride: str | int, layout: str, r: str, c: str) -> str:
    """Element (``r``, ``c``) of the matrix a ``CoopMat.Load``/``Store`` of
    ``layout`` finds at ``array[offset]`` with ``stride`` (SPV_KHR_cooperative_matrix:
    rows ``stride`` elements apart in a row-major matrix, columns in a column-major
    one): what the stand-in reads and writes, so the layouts the form asks for
    are the ones its tests check."""
    first, second = (r, c) if layout == ROW_MAJOR else (c, r)
    return f"{array}[{offset} + ({first}) * {stride} + {second}]"


def _sums_block(p: str) -> tuple[str, str, int, str]:
    """The warp's groupshared block a fragment's sums pass through: (array,
    offset, stride, layout), as ``element`` and ``CoopMat.Store`` take them."""
    return f"{p}_sums", f"mm_warp * {COOP_SIDE * SUMS_ROW}", SUMS_ROW, ROW_MAJOR


class CoopTiles(TensorTiles):
    name = "coop_tiles"
    instructions = targets.COOPERATIVE_MATRIX

    @staticmethod
    def stand_in(w: KernelWriter) -> bool:
        """Whether the target asks for the plain-Slang stand-in (``targets.TensorCores``)."""
        return w.target.tensor_cores.stand_in

    lane_place = "int mm_row = mm_lane / 2, mm_col = mm_lane % 2;  // the lane's row and columns of a fragment's sums"

    @staticmethod
    def fragments_named(gt: TensorTiling) -> str:
        return f"{COOP_SIDE}x{COOP_SIDE} {gt.operands} cooperative matrices"

    def tile_declaration(self, w: KernelWriter, gt: TensorTiling, read, tile: str, axis: sympy.Symbol) -> str:
        elements = (_STAND_IN_ELEMENTS if self.stand_in(w) else _ELEMENTS)[gt.operands]
        row = self.row(gt, axis)
        return f"static groupshared {elements} {tile}[{gt.k_tile * row}];  // [k][at], flat, rows of {row}"

    def slot(self, gt: GroupTiling, axis: sympy.Symbol, k: str, at: str) -> str:
        return f"[({k}) * {self.row(gt, axis)} + {at}]"

    def staged(self, w: KernelWriter, gt: TensorTiling, value: str) -> str:
        if self.stand_in(w):
            return _STAND_IN_STAGED[gt.operands].format(value)
        return f"{_ELEMENTS[gt.operands]}({value})"  # exact: a value of the format, widened

    def zero_sums(self, w: KernelWriter, gt: TensorTiling, p: str) -> None:
        rows, cols = gt.fragments
        warps = gt.warps[0] * gt.warps[1]
        w.emit(f"static groupshared float {p}_sums[{warps * COOP_SIDE * SUMS_ROW}];  // a fragment's sums a warp, "
               "on their way to its lanes", 1)
        loops = f"for (int mm_i = 0; mm_i < {rows}; mm_i++) for (int mm_j = 0; mm_j < {cols}; mm_j++)"
        if self.stand_in(w):
            w.emit(f"float {p}_acc[{rows}][{cols}][{LANE_OUTPUTS}];  // the lane's sums of each fragment", 1)
            w.emit(f"{loops} for (int mm_c = 0; mm_c < {LANE_OUTPUTS}; mm_c++) {p}_acc[mm_i][mm_j][mm_c] = 0.0f;", 1)
        else:
            w.declare(self, ("sums",))
            w.declare(self, ("operands", gt.operands))
            w.emit(f"coop_sums {p}_acc[{rows}][{cols}];  // the warp's fragments of sums", 1)
            w.emit(f"{loops} {p}_acc[mm_i][mm_j] = coop_sums(0.0f);", 1)

    def tile_sums(self, w: KernelWriter, gt: TensorTiling, p: str, outer_tile: str, inner_tile: str) -> None:
        rows, cols = gt.fragments
        (block_o, block_i), unroll = gt.warp_block, self.unrolled(w)
        row_a, row_b = self.row(gt, gt.outer), self.row(gt, gt.inner)
        # the staged tiles are k-major: A (outputs x k's) column-major, B (k's x outputs) row-major
        a = (outer_tile, f"mm_kk * {row_a} + mm_wo * {block_o} + mm_i * {COOP_SIDE}", row_a, COLUMN_MAJOR)
        b = (inner_tile, f"mm_kk * {row_b} + mm_wi * {block_i} + mm_j * {COOP_SIDE}", row_b, ROW_MAJOR)
        w.emit(f"{unroll}for (int mm_kk = 0; mm_kk < {gt.k_tile}; mm_kk += {COOP_SIDE})", 2)
        w.emit("{", 2)
        if self.stand_in(w):  # the lane's sums: row mm_row of A's fragment times columns 2 c + mm_col of B's
            widened = _STAND_IN_WIDENED[gt.operands]
            a_element = widened.format(element(*a, "mm_row", "mm_q"))
            b_element = widened.format(element(*b, "mm_q", "2 * mm_c + mm_col"))
            w.emit(f"{unroll}for (int mm_i = 0; mm_i < {rows}; mm_i++) {unroll}for (int mm_j = 0; mm_j < {cols}; "
                   f"mm_j++) {unroll}for (int mm_c = 0; mm_c < {LANE_OUTPUTS}; mm_c++)", 3)
            w.emit(f"for (int mm_q = 0; mm_q < {COOP_SIDE}; mm_q++) {p}_acc[mm_i][mm_j][mm_c] += "
                   f"{a_element} * {b_element};", 4)
        else:
            for frags, kind, count, var, (tile, at, stride, layout) in (
                    (f"{p}_frag_a", f"coop_a_{gt.operands}", rows, "mm_i", a),
                    (f"{p}_frag_b", f"coop_b_{gt.operands}", cols, "mm_j", b)):
                w.emit(f"{kind} {frags}[{count}];", 3)
                w.emit(f"{unroll}for (int {var} = 0; {var} < {count}; {var}++) "
                       f"{frags}[{var}] = {kind}.Load<{_LAYOUT}.{layout}>({tile}, {at}, {stride});", 3)
            w.emit(f"{unroll}for (int mm_i = 0; mm_i < {rows}; mm_i++) {unroll}for (int mm_j = 0; mm_j < {cols}; "
                   f"mm_j++)", 3)
            w.emit(f"{p}_acc[mm_i][mm_j] = linalg.coopMatMulAdd<float, false>({p}_frag_a[mm_i], {p}_frag_b[mm_j], "
                   f"{p}_acc[mm_i][mm_j]);", 4)
        w.emit("}", 2)

    def before_output(self, w: KernelWriter, tl: TensorTiling) -> None:
        p = identifier(tl.step.tasklet.name)
        sums = _sums_block(p)
        w.emit(f"if (mm_v % {LANE_OUTPUTS} == 0)  // a fragment's first output: the warp's sums of it into "
               "groupshared memory", 2)
        w.emit("{", 2)
        if self.stand_in(w):  # each lane stores its own sums where the layout puts them
            w.emit(f"for (int mm_c = 0; mm_c < {LANE_OUTPUTS}; mm_c++) {element(*sums, 'mm_row', '2 * mm_c + mm_col')}"
                   f" = {p}_acc[mm_u][mm_v / {LANE_OUTPUTS}][mm_c];", 3)
        else:  # the accumulator picked by constant indices (unrolled), so the matrices stay in registers
            tile, at, stride, layout = sums
            rows, cols = tl.fragments
            unroll = self.unrolled(w)
            w.emit("GroupMemoryBarrierWithWaveSync();  // the lanes have read the last fragment's", 3)
            w.emit(f"{unroll}for (int mm_i = 0; mm_i < {rows}; mm_i++) {unroll}for (int mm_j = 0; mm_j < {cols}; "
                   f"mm_j++)", 3)
            w.emit(f"if (mm_i == mm_u && mm_j == mm_v / {LANE_OUTPUTS}) "
                   f"{p}_acc[mm_i][mm_j].Store<{_LAYOUT}.{layout}>({tile}, {at}, {stride});", 4)
            w.emit("GroupMemoryBarrierWithWaveSync();", 3)
        w.emit("}", 2)

    @staticmethod
    def sum_at(p: str) -> str:
        return element(*_sums_block(p), "mm_row", f"2 * (mm_v % {LANE_OUTPUTS}) + mm_col")

    @staticmethod
    def point(tl: TensorTiling, a: int) -> str:
        """Box coordinate along axis ``a`` of sum (``mm_u``, ``mm_v``) of the
        thread's: row ``lane / 2`` of fragment row ``mm_u``, column ``2 (mm_v
        % 8) + lane % 2`` of fragment column ``mm_v / 8``."""
        s = [s for s, _, _ in tl.step.parallel][a]
        block_o, block_i = tl.warp_block
        if s == tl.outer:
            return f"g{a} * {tl.tile[a]} + mm_wo * {block_o} + mm_u * {COOP_SIDE} + mm_row"
        if s == tl.inner:
            return (f"g{a} * {tl.tile[a]} + mm_wi * {block_i} + (mm_v / {LANE_OUTPUTS}) * {COOP_SIDE} "
                    f"+ 2 * (mm_v % {LANE_OUTPUTS}) + mm_col")
        return f"g{a}"

    def declaration(self, key: tuple, target: targets.Target) -> str:
        """A subgroup's cooperative-matrix types: float32 sums (key ``("sums",)``)
        or the A and B operands of a 16-bit format (``("operands", format)``)."""
        kind, *rest = key
        matrix = f"linalg.CoopMat<{{}}, MemoryScope.Subgroup, {COOP_SIDE}, {COOP_SIDE}, linalg.CoopMatMatrixUse.{{}}>"
        if kind == "sums":
            return (f"// {COOP_SIDE}x{COOP_SIDE} float32 sums of a subgroup's products (lowering.kernels.coop_tiles)\n"
                    f"typealias coop_sums = {matrix.format('float', 'MatrixAccumulator')};")
        (operands,) = rest
        element = _ELEMENTS[operands]
        return (f"// {COOP_SIDE}x{COOP_SIDE} {operands} operands of a subgroup's products "
                "(lowering.kernels.coop_tiles)\n"
                f"typealias coop_a_{operands} = {matrix.format(element, 'MatrixA')};\n"
                f"typealias coop_b_{operands} = {matrix.format(element, 'MatrixB')};")


FORM = CoopTiles()
