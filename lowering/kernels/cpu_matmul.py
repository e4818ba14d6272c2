"""The CPU device's matmul micro-kernel (``lowering.matmul.CPU_MICRO``):
register tiles whose sums run in blocks.  Per block of k's, the outer
operand's slice of the tile is packed k-major into a local array (and the
inner one's, if ``tl.packed_inner``); then each rows x cols block of the tile
sums in registers over the block's k's, a row of ``cols`` of the inner
operand read along memory per k, so g++ makes every k ``rows`` vector FMAs
and no load or store of a sum.  Applies where ``matmul.tiling`` chose a
micro-kernel (a sequential target, a large product)."""
from __future__ import annotations

from symdiff.ir.index_analysis import extent

from ..matmul import Tiling
from .register_tiles import RegisterTiles
from .writer import KernelShape, KernelWriter, identifier


class CpuMicroKernel(RegisterTiles):
    name = "cpu_matmul"

    def applies(self, shape: KernelShape) -> bool:
        return shape.target.sequential and shape.tiling is not None and shape.tiling.micro is not None

    def sums(self, w: KernelWriter, tl: Tiling) -> None:
        step = tl.step
        p = identifier(step.tasklet.name)
        rows, cols = tl.micro
        n_o, n_i = tl.along(tl.outer), tl.along(tl.inner)
        length, q = extent(step.loop[0]), tl.k_block
        count = f"{q}" if length % q == 0 else f"min({q}, {length} - kb)"
        outer_read, inner_read = self.operands(tl)
        outer_var, inner_var = f"{p}_{identifier(outer_read.connector)}", f"{p}_{identifier(inner_read.connector)}"
        acc_type = self.sum_type(w, tl)
        w.emit(f"{w.kept}for (int kb = 0; kb < {length}; kb += {q})", 1)
        w.emit("{", 1)
        self.pack(w, tl, outer_read, f"{outer_var}_pack", "mm_u", n_o, count)
        if tl.packed_inner:
            self.pack(w, tl, inner_read, f"{inner_var}_pack", "mm_v", n_i, count)
            inner_load = f"{inner_var}_pack[kq][bv + mm_v]"
        else:  # the tiles cover the inner axis exactly (lowering.matmul._cpu_tiles): no clamp
            start = self.point(tl, tl.axis(tl.inner))
            names = self.names(tl, "kb + kq", f"{start} + bv")
            inner_load = w.element(inner_read, w.flat_index(inner_read.memlet, names))
        w.emit(f"{w.kept}for (int bu = 0; bu < {n_o}; bu += {rows})", 2)
        w.emit(f"{w.kept}for (int bv = 0; bv < {n_i}; bv += {cols})", 2)
        w.emit("{", 2)
        block = f"[ForceUnroll] for (int mm_u = 0; mm_u < {rows}; mm_u++) " \
                f"[ForceUnroll] for (int mm_v = 0; mm_v < {cols}; mm_v++) "
        w.emit(f"{acc_type} {p}_sum[{rows}][{cols}];", 3)
        w.emit(f"{block}{p}_sum[mm_u][mm_v] = {p}_acc[bu + mm_u][bv + mm_v];", 3)
        w.emit(f"for (int kq = 0; kq < {count}; kq++)", 3)
        w.emit("{", 3)
        w.emit(f"{w.operand_type(inner_read)} {inner_var}[{cols}];", 4)
        w.emit(f"[ForceUnroll] for (int mm_v = 0; mm_v < {cols}; mm_v++) {inner_var}[mm_v] = {inner_load};", 4)
        w.emit(f"[ForceUnroll] for (int mm_u = 0; mm_u < {rows}; mm_u++)", 4)
        w.emit("{", 4)
        w.emit(f"{w.operand_type(outer_read)} {outer_var} = {outer_var}_pack[kq][bu + mm_u];", 5)
        w.emit(f"[ForceUnroll] for (int mm_v = 0; mm_v < {cols}; mm_v++) "
               f"{p}_sum[mm_u][mm_v] += {outer_var} * {inner_var}[mm_v];", 5)
        w.emit("}", 4)
        w.emit("}", 3)
        w.emit(f"{block}{p}_acc[bu + mm_u][bv + mm_v] = {p}_sum[mm_u][mm_v];", 3)
        w.emit("}", 2)
        w.emit("}", 1)

    def pack(self, w: KernelWriter, tl: Tiling, read, var: str, along: str, n: int, count: str) -> None:
        """``var[q][x]``: the operand of ``read`` at k ``kb + q`` and output ``x``
        (``along``: ``mm_u`` or ``mm_v``) of the tile, clamped to the box, read along memory."""
        k = tl.step.loop[0][0]
        load = f"{var}[kq][{along}] = {w.element(read, w.flat_index(read.memlet, self.names(tl, 'kb + kq')))};"
        loops = [f"for (int kq = 0; kq < {count}; kq++)", f"for (int {along} = 0; {along} < {n}; {along}++)"]
        if read.memlet.index[-1] == k:
            loops.reverse()
        w.emit(f"{w.operand_type(read)} {var}[{tl.k_block}][{n}];", 2)
        w.emit(f"{w.kept}{loops[0]}", 2)
        w.emit(f"    {loops[1]} {load}", 2)


FORM = CpuMicroKernel()
