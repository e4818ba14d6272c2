"""Tensor-core products through PTX ``mma.sync`` on a target whose tensor cores
are of that family (``Target.tensor_cores``: CUDA; Vulkan's cooperative
matrices are ``coop_tiles``'), in two kinds of operands:

* **16-bit:** a product of two float16 (or two bfloat16) arguments read where
  they are stored (``ir.storage``) sums its tiles with
  ``mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32`` (``.bf16``), at any
  precision: the products of 16-bit values are exact in float32, and the
  instruction sums them in float32 (in its own order), as the float32
  forms would.
* **TF32:** a float32 product in a program compiled at
  ``matmul_precision="tf32"`` (``precision``) sums with
  ``mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32``, as JAX's and
  PyTorch's default float32 matmuls do on an H100: inputs rounded to TF32 (10
  of float32's 23 mantissa bits, round to nearest), sums in float32.  A 16-bit
  operand among float32 ones (a reverse pass's ``G B^T``) goes this way too,
  unchanged by the rounding (it has at most TF32's 11 significant bits).

The exact float32 product ran at 30-170x JAX's time on an H100 (issue 36); the
instructions do 16x8x8 (16x8x16) multiply-adds a warp at once.

The workgroup tile is staged through groupshared memory as ``group_tiles``
stages it (every transpose form and batched products read through the
operand's own index, ragged edges clamped, ``k``'s past the end zeros), each
element rounded to TF32 once as it is stored.  The workgroup's warps split
the tile (``Tuning.tensor_tile`` over ``tensor_warps``: 128x128 over 2x4, a
warp 64x32); per staged 8 ``k``'s each warp loads its fragments from the
tiles and issues one instruction per 16x8 block of its outputs, whose sums
each thread keeps as ``float4`` accumulators (``c0``..``c3`` of the
instruction).  Tile rows are padded to a multiple of 32 plus 8 floats, so a
fragment load (lanes ``g + 8t`` apart) touches 32 distinct banks.

Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k8" (.tf32) and
"... for mma.m16n8k16 with floating point type"), with ``g = lane / 4`` and
``t = lane % 4``, A's rows along the tile's outer axis.  TF32, a register an
element: A (16x8) ``a0 = A[g][t]``, ``a1 = A[g+8][t]``, ``a2 = A[g][t+4]``,
``a3 = A[g+8][t+4]``; B (8x8) ``b0 = B[t][g]``, ``b1 = B[t+4][g]``.  16-bit,
a register two elements (the lower-indexed in the low half): A (16x16)
``A[g][2t, 2t+1]``, ``A[g+8][2t, 2t+1]``, ``A[g][2t+8, 2t+9]``,
``A[g+8][2t+8, 2t+9]``; B (16x8) ``B[2t, 2t+1][g]``, ``B[2t+8, 2t+9][g]``.
Both: C/D (16x8) ``c0 = C[g][2t]``, ``c1 = C[g][2t+1]``, ``c2 = C[g+8][2t]``,
``c3 = C[g+8][2t+1]``.

On CUDA the helpers are inline PTX (``cvt.rna.tf32.f32`` and the
``mma.sync``s).  On other targets they compute the same thing in plain Slang:
the rounding with integer operations, the instructions through per-warp
groupshared scratch (every lane writes its fragments where the layout puts
them, then reads back its four sums).  No other target claims this family,
so nothing runs that path but the tests, which force the form on lavapipe:
there the tiles, fragments and accumulators run and are checked against
float64, and only the instruction itself is left to a GPU.  The CUDA text is
compiled for sm_90 here (tests/lowering/kernels/test_tensor_tiles_cuda.py).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from symdiff.ir.graph import STORAGE_FLOATS

from .. import targets
from . import precision, tile_shapes
from .group_tiles import GroupTiles, GroupTiling, group_tiling
from .tile_shapes import FRAGMENTS, MMA_COLS, MMA_K, MMA_ROWS, WARP
from .writer import FUNCTION, KernelShape, KernelWriter

# The CUDA of the helpers (``declaration``): Slang passes it through as prelude text.
_CUDA = r"""
__device__ __forceinline__ float symdiff_tf32_round(float x)
{
    unsigned int r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return __uint_as_float(r);
}
#define SYMDIFF_MMA(name, shape_types)                                                      \
__device__ __forceinline__ float4 name(uint4 a, uint2 b, float4 c)                          \
{                                                                                           \
    float4 d;                                                                               \
    asm volatile("mma.sync.aligned." shape_types " "                                        \
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};"      \
                 : "=f"(d.x), "=f"(d.y), "=f"(d.z), "=f"(d.w)                               \
                 : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b.x), "r"(b.y),              \
                   "f"(c.x), "f"(c.y), "f"(c.z), "f"(c.w));                                 \
    return d;                                                                               \
}
SYMDIFF_MMA(symdiff_mma_tf32, "m16n8k8.row.col.f32.tf32.tf32.f32")
SYMDIFF_MMA(symdiff_mma_float16, "m16n8k16.row.col.f32.f16.f16.f32")
SYMDIFF_MMA(symdiff_mma_bfloat16, "m16n8k16.row.col.f32.bf16.bf16.f32")
"""
# The instruction's operands by their dtypes: its name (in helpers and comments) and the k's it sums.
_OPERANDS = {"tf32": ("TF32", MMA_K), "float16": ("float16", 2 * MMA_K), "bfloat16": ("bfloat16", 2 * MMA_K)}
# Two 16-bit operand elements as one register (exact: the values are the format's own).
_PAIRS = {"float16": "uint(f16_bits(low)) | (uint(f16_bits(high)) << 16)",
          "bfloat16": "(asuint(low) >> 16) | (asuint(high) & 0xFFFF0000u)"}
_UNPAIRED = {"float16": ("f16_value(uint16_t({r} & 0xFFFFu))", "f16_value(uint16_t({r} >> 16))"),
             "bfloat16": ("asfloat({r} << 16)", "asfloat({r} & 0xFFFF0000u)")}


@dataclass
class TensorTiling(GroupTiling):
    """A workgroup's tile split among ``warps`` (along outer, inner), each
    warp's block summed as ``fragment``-sized blocks of ``instructions``
    (``targets.TensorCores``); each thread holds ``per_thread`` sums of its
    warp's block: a lane's outputs of each fragment (``tile_shapes.FRAGMENTS``:
    two rows and two columns of an ``mma.sync`` fragment)."""

    warps: tuple[int, int] = (1, 1)
    operands: str = "tf32"  # a key of ``_OPERANDS``
    instructions: str = targets.MMA_SYNC
    fragment: tuple[int, int] = (MMA_ROWS, MMA_COLS)

    @property
    def mma_k(self) -> int:
        """The k's one instruction sums."""
        return _OPERANDS[self.operands][1]

    @property
    def warp_block(self) -> tuple[int, int]:
        """A warp's outputs along (outer, inner)."""
        return (self.tile[self.axis(self.outer)] // self.warps[0], self.tile[self.axis(self.inner)] // self.warps[1])

    @property
    def fragments(self) -> tuple[int, int]:
        """A warp's instruction blocks (``fragment``) along (outer, inner)."""
        (rows, cols), (m, n) = self.warp_block, self.fragment
        return rows // m, cols // n


def tensor_tiling(shape: KernelShape) -> TensorTiling | None:
    """The tensor-core tiling of ``shape``'s kernel, or None: a product into
    float32 that ``group_tiles`` would tile, on a target with tensor cores, of
    two operands of one 16-bit format, or at ``matmul_precision="tf32"`` of
    float32 operands (16-bit ones among them: ``operands_of``), in a format
    the target's tensor cores take."""
    cores = shape.target.tensor_cores
    if cores is None:
        return None
    gt = group_tiling(shape)
    if gt is None or shape.g.containers[gt.step.writes[0].memlet.container].dtype != "float32":
        return None
    operands = operands_of({shape.g.containers[r.memlet.container].dtype for r in gt.step.reads},
                           precision.of(shape.g))
    if operands not in cores.operands:
        return None
    tuning = shape.target.tuning
    tile_shapes.check_tensor(tuning, cores.instructions)
    o, i = gt.axis(gt.outer), gt.axis(gt.inner)
    (bm, bn), warps = tile_shapes.tensor_tile(tuning, gt.box[o], gt.box[i])
    tile = list(gt.tile)
    tile[o], tile[i] = bm, bn
    mma_k = _OPERANDS[operands][1]
    fragment, (lane_rows, lane_cols) = FRAGMENTS[cores.instructions]
    tt = TensorTiling(gt.step, gt.shape, gt.outer, gt.inner, tuple(tile), gt.box,
                      k_tile=-(-tuning.tensor_tile_k // mma_k) * mma_k, warps=warps, operands=operands,
                      instructions=cores.instructions, fragment=fragment)
    rows, cols = tt.fragments
    return replace(tt, per_thread=(lane_rows * rows, lane_cols * cols))


def operands_of(dtypes: set[str], matmul_precision: str) -> str | None:
    """The instruction's operands (a key of ``_OPERANDS``) for a product of
    operands of ``dtypes`` at ``matmul_precision``, or None: one 16-bit format
    its own, else TF32 where the precision allows it (a 16-bit value holds at
    most TF32's 11 significant bits: rounding it to TF32 changes nothing)."""
    if len(dtypes) == 1 and dtypes <= set(STORAGE_FLOATS):
        return next(iter(dtypes))
    if matmul_precision == "tf32" and dtypes <= {"float32", *STORAGE_FLOATS}:
        return "tf32"
    return None


class TensorTiles(GroupTiles):
    name = "tensor_tiles"
    declares = FUNCTION
    instructions = targets.MMA_SYNC  # the family this form writes

    def applies(self, shape: KernelShape) -> bool:
        tt = tensor_tiling(shape)
        return tt is not None and tt.instructions == self.instructions

    @staticmethod
    def tiling(shape: KernelShape) -> TensorTiling:
        return tensor_tiling(shape)

    # the lane's place in a fragment (``point`` and ``sum_at`` read it)
    lane_place = "int mm_g = mm_lane / 4, mm_t = mm_lane % 4;  // the lane's rows and columns in a fragment"

    def thread_place(self, w: KernelWriter, gt: TensorTiling) -> None:
        w.emit(f"int mm_warp = group_thread / {WARP}, mm_lane = group_thread % {WARP};", 1)
        w.emit(f"int mm_wo = mm_warp / {gt.warps[1]}, mm_wi = mm_warp % {gt.warps[1]};  "
               "// the warp's block of the tile", 1)
        w.emit(self.lane_place, 1)

    def described(self, gt: TensorTiling) -> str:
        (bm, bn), (wm, wn) = gt.warp_block, gt.warps
        return (f"a {bm * wm}x{bn * wn} tile of outputs over ({gt.outer}, {gt.inner}) a workgroup, {gt.k_tile} "
                f"{gt.shape.k}'s at a time through groupshared memory, {wm}x{wn} warps each summing {bm}x{bn} "
                f"in {self.fragments_named(gt)}")

    @staticmethod
    def fragments_named(gt: TensorTiling) -> str:
        """The blocks a warp sums, as ``described`` names them."""
        return f"{MMA_ROWS}x{MMA_COLS} {_OPERANDS[gt.operands][0]} tensor-core fragments"

    @staticmethod
    def padding(n: int) -> int:
        return (8 - n) % 32

    def staged(self, w: KernelWriter, gt: TensorTiling, value: str) -> str:
        if gt.operands != "tf32":
            return value  # a 16-bit value, widened exactly
        w.declare(self, ("round", 0))
        return f"tf32_round({value})"

    def zero_sums(self, w: KernelWriter, gt: TensorTiling, p: str) -> None:
        rows, cols = gt.fragments
        unroll = self.unrolled(w)
        w.emit(f"float4 {p}_acc[{rows}][{cols}];  // c0..c3 of each of the warp's fragments", 1)
        w.emit(f"{unroll}for (int mm_i = 0; mm_i < {rows}; mm_i++) {unroll}for (int mm_j = 0; mm_j < {cols}; "
               f"mm_j++) {p}_acc[mm_i][mm_j] = float4(0.0f);", 1)

    def tile_sums(self, w: KernelWriter, gt: TensorTiling, p: str, outer_tile: str, inner_tile: str) -> None:
        rows, cols = gt.fragments
        (block_o, block_i), warps = gt.warp_block, gt.warps[0] * gt.warps[1]
        unroll = self.unrolled(w)
        w.declare(self, ("mma", warps, gt.operands))
        w.emit(f"{unroll}for (int mm_kk = 0; mm_kk < {gt.k_tile}; mm_kk += {gt.mma_k})", 2)
        w.emit("{", 2)
        # the PTX layouts (module docstring): a's rows g and g + 8, b's column g
        a_at, b_at = f"mm_wo * {block_o} + mm_i * {MMA_ROWS} + mm_g", f"mm_wi * {block_i} + mm_j * {MMA_COLS} + mm_g"
        if gt.operands == "tf32":  # k's t and t + 4, an element a register
            a = [[f"{outer_tile}[mm_kk + {k}][{r}]"] for k in ("mm_t", "mm_t + 4") for r in ("mm_at", "mm_at + 8")]
            b = [[f"{inner_tile}[mm_kk + {k}][mm_at]"] for k in ("mm_t", "mm_t + 4")]
        else:  # k's 2t, 2t + 1 and 2t + 8, 2t + 9, two elements a register
            pairs = [("2 * mm_t", "2 * mm_t + 1"), ("2 * mm_t + 8", "2 * mm_t + 9")]
            a = [[f"{outer_tile}[mm_kk + {k}][{r}]" for k in ks] for ks in pairs for r in ("mm_at", "mm_at + 8")]
            b = [[f"{inner_tile}[mm_kk + {k}][mm_at]" for k in ks] for ks in pairs]
        self.fragments(w, gt, f"{p}_frag_a", "uint4", rows, "mm_i", a_at, a)
        self.fragments(w, gt, f"{p}_frag_b", "uint2", cols, "mm_j", b_at, b)
        w.emit(f"{unroll}for (int mm_i = 0; mm_i < {rows}; mm_i++) {unroll}for (int mm_j = 0; mm_j < {cols}; mm_j++)",
               3)
        w.emit(f"{p}_acc[mm_i][mm_j] = mma_{gt.operands}_{warps}w({p}_frag_a[mm_i], {p}_frag_b[mm_j], "
               f"{p}_acc[mm_i][mm_j], mm_warp, mm_lane);", 4)
        w.emit("}", 2)

    def fragments(self, w: KernelWriter, gt: TensorTiling, array: str, vector: str, count: int, var: str, at: str,
                  registers: list[list[str]]) -> None:
        """A warp's ``count`` fragments of one operand in ``array``, as the
        instruction's 32-bit registers, each of the lane's elements of the staged
        tile in ``registers`` (``mm_at``: the fragment's row or column ``at``)."""
        unroll = self.unrolled(w)
        if gt.operands != "tf32":
            w.declare(self, ("pair", gt.operands))
        w.emit(f"{vector} {array}[{count}];", 3)
        w.emit(f"{unroll}for (int {var} = 0; {var} < {count}; {var}++)", 3)
        w.emit("{", 3)
        w.emit(f"int mm_at = {at};", 4)
        packed = [f"asuint({r[0]})" if len(r) == 1 else f"{gt.operands}_pair({', '.join(r)})" for r in registers]
        w.emit(f"{array}[{var}] = {vector}({', '.join(packed)});", 4)
        w.emit("}", 3)

    @staticmethod
    def sum_at(p: str) -> str:
        return f"{p}_acc[mm_u / 2][mm_v / 2][(mm_u % 2) * 2 + mm_v % 2]"

    @staticmethod
    def point(tl: TensorTiling, a: int) -> str:
        """Box coordinate along axis ``a`` of sum (``mm_u``, ``mm_v``) of the
        thread's: row ``g`` or ``g + 8`` of fragment ``mm_u / 2``, column
        ``2t`` or ``2t + 1`` of fragment ``mm_v / 2``."""
        s = [s for s, _, _ in tl.step.parallel][a]
        block_o, block_i = tl.warp_block
        if s == tl.outer:
            return f"g{a} * {tl.tile[a]} + mm_wo * {block_o} + (mm_u / 2) * {MMA_ROWS} + (mm_u % 2) * 8 + mm_g"
        if s == tl.inner:
            return f"g{a} * {tl.tile[a]} + mm_wi * {block_i} + (mm_v / 2) * {MMA_COLS} + mm_t * 2 + mm_v % 2"
        return f"g{a}"

    def declaration(self, key: tuple, target: targets.Target) -> str:
        """``tf32_round`` (key ``("round", 0)``), the packing of two 16-bit
        elements (``("pair", operands)``) or the instruction for workgroups of
        ``warps`` warps (``("mma", warps, operands)``: its stand-in's scratch has a
        block per warp)."""
        kind, *rest = key
        if kind == "round":
            return f"""// TF32 rounding (lowering.kernels.tensor_tiles): cvt.rna.tf32.f32 on CUDA, elsewhere the
// same in integers: to nearest, ties away from zero, 13 low mantissa bits cleared
float tf32_round(float x)
{{
    __target_switch
    {{
    case cuda:
        __requirePrelude(R"({_CUDA})");
        __intrinsic_asm "symdiff_tf32_round($0)";
    default:
        return isfinite(x) ? asfloat((asuint(x) + 0x1000u) & 0xFFFFE000u) : x;
    }}
}}"""
        if kind == "pair":
            (operands,) = rest
            return (f"// two {operands} operand elements as one register, the lower-indexed in the low half\n"
                    f"uint {operands}_pair(float low, float high) {{ return {_PAIRS[operands]}; }}")
        warps, operands = rest
        name, mma_k = _OPERANDS[operands]
        scratch_a, scratch_b = f"mma_{operands}_a_{warps}w", f"mma_{operands}_b_{warps}w"
        if operands == "tf32":
            stores = [f"{scratch_a}[warp][{r}][{k}] = asfloat(a.{x});"
                      for x, (r, k) in zip("xyzw", [("g", "t"), ("g + 8", "t"), ("g", "t + 4"), ("g + 8", "t + 4")])]
            stores += [f"{scratch_b}[warp][{k}][g] = asfloat(b.{x});" for x, k in zip("xy", ["t", "t + 4"])]
        else:
            low, high = _UNPAIRED[operands]
            stores = [f"{scratch_a}[warp][{r}][{k}] = {low.format(r=f'a.{x}')}; "
                      f"{scratch_a}[warp][{r}][{k} + 1] = {high.format(r=f'a.{x}')};"
                      for x, (r, k) in zip("xyzw", [("g", "2 * t"), ("g + 8", "2 * t"), ("g", "2 * t + 8"),
                                                    ("g + 8", "2 * t + 8")])]
            stores += [f"{scratch_b}[warp][{k}][g] = {low.format(r=f'b.{x}')}; "
                       f"{scratch_b}[warp][{k} + 1][g] = {high.format(r=f'b.{x}')};"
                       for x, k in zip("xy", ["2 * t", "2 * t + 8"])]
        stored = "\n        ".join(stores)
        return f"""// D = A B + C over a 16x8x{mma_k} block of {name} operands, a warp's lanes each holding its
// fragments (lowering.kernels.tensor_tiles): the mma.sync instruction on CUDA; elsewhere the
// same sums through groupshared memory, a block per warp of a {warps}-warp workgroup
groupshared float {scratch_a}[{warps}][{MMA_ROWS}][{mma_k}];
groupshared float {scratch_b}[{warps}][{mma_k}][{MMA_COLS}];
float4 mma_{operands}_{warps}w(uint4 a, uint2 b, float4 c, int warp, int lane)
{{
    __target_switch
    {{
    case cuda:
        __requirePrelude(R"({_CUDA})");
        __intrinsic_asm "symdiff_mma_{operands}($0, $1, $2)";
    default:
        int g = lane / 4, t = lane % 4;
        {stored}
        GroupMemoryBarrierWithGroupSync();
        float4 d = c;
        for (int k = 0; k < {mma_k}; k++)
        {{
            d.x += {scratch_a}[warp][g][k] * {scratch_b}[warp][k][2 * t];
            d.y += {scratch_a}[warp][g][k] * {scratch_b}[warp][k][2 * t + 1];
            d.z += {scratch_a}[warp][g + 8][k] * {scratch_b}[warp][k][2 * t];
            d.w += {scratch_a}[warp][g + 8][k] * {scratch_b}[warp][k][2 * t + 1];
        }}
        GroupMemoryBarrierWithGroupSync();  // read before the next block overwrites it
        return d;
    }}
}}"""


FORM = TensorTiles()
