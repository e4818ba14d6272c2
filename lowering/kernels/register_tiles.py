"""Matmul register tiles (``lowering.matmul``): a thread owns a tile of a
matmul-shaped step's outputs and keeps their sums in registers, each operand
element loaded once per tile; the kernel's other steps (the epilogue: bias,
activation, gradient chains) then run once per output of the tile, the
matmul step taking its value from the tile's sums.  Applies where
``matmul.tiling`` found a tiling (every target; on a GPU, 8x4 tiles
summed over ``k`` one element at a time)."""
from __future__ import annotations

import sympy

from symdiff.ir.index_analysis import extent

from ..matmul import Tiling
from ..plan_types import Step
from ..printer import SlangPrinter
from .writer import BodyForm, KernelShape, KernelWriter, identifier, tasklet_comment, wide_type


class RegisterTiles(BodyForm):
    name = "register_tiles"

    def applies(self, shape: KernelShape) -> bool:
        return shape.tiling is not None

    def write(self, w: KernelWriter) -> None:
        tl = w.tiling

        def body() -> None:
            self.accumulate(w, tl)
            self.per_output(w, tl)
        w.frame(tl.grid, "g", body)  # a tiled kernel's thread coordinates count tiles

    def accumulate(self, w: KernelWriter, tl: Tiling) -> None:
        """The matmul step's sums for a whole tile, kept in registers.  Rows past
        the box's edge read a clamped (valid) element and are never stored."""
        step = tl.step
        t = step.tasklet
        p = identifier(t.name)
        n_o, n_i = tl.along(tl.outer), tl.along(tl.inner)
        k, _, _ = step.loop[0]
        acc_type = self.sum_type(w, tl)
        tile = f"a row of {n_i} outputs along {tl.inner}" if tl.outer is None else \
            f"a {n_o}x{n_i} tile of outputs over ({tl.outer}, {tl.inner})"
        how = f"{tl.micro[0]}x{tl.micro[1]} blocks of it summed over blocks of {tl.k_block} {k}'s in registers" \
            if tl.micro else f"summed over {k} in registers"
        w.emit(tasklet_comment(t) + f": {tile} per thread, {how}", 1)
        w.emit(f"{acc_type} {p}_acc[{n_o}][{n_i}];", 1)
        w.emit(f"for (int mm_u = 0; mm_u < {n_o}; mm_u++) for (int mm_v = 0; mm_v < {n_i}; mm_v++) "
               f"{p}_acc[mm_u][mm_v] = {SlangPrinter(acc_type).literal(0)};", 1)
        self.sums(w, tl)

    def sums(self, w: KernelWriter, tl: Tiling) -> None:
        """The loop over ``k`` adding each product into the tile's sums: per
        ``k``, the outer operand's slice of the tile into registers, then
        each element of the inner one's against it."""
        step = tl.step
        p = identifier(step.tasklet.name)
        n_o, n_i = tl.along(tl.outer), tl.along(tl.inner)
        names = self.names(tl)
        outer_read, inner_read = self.operands(tl)
        outer_var, inner_var = f"{p}_{identifier(outer_read.connector)}", f"{p}_{identifier(inner_read.connector)}"
        # a long inner loop is left to the vectoriser
        unroll = "[ForceUnroll] " if n_i <= w.target.tuning.unrolled_tile_row else ""
        w.emit(f"{w.kept}for (int mm_r = 0; mm_r < {extent(step.loop[0])}; mm_r++)", 1)
        w.emit("{", 1)
        w.emit(f"{w.operand_type(outer_read)} {outer_var}[{n_o}];", 2)
        w.emit(f"[ForceUnroll] for (int mm_u = 0; mm_u < {n_o}; mm_u++) {outer_var}[mm_u] = "
               f"{w.element(outer_read, w.flat_index(outer_read.memlet, names))};", 2)
        w.emit(f"{unroll}for (int mm_v = 0; mm_v < {n_i}; mm_v++)", 2)
        w.emit("{", 2)
        w.emit(f"{w.operand_type(inner_read)} {inner_var} = "
               f"{w.element(inner_read, w.flat_index(inner_read.memlet, names))};", 3)
        w.emit(f"[ForceUnroll] for (int mm_u = 0; mm_u < {n_o}; mm_u++) "
               f"{p}_acc[mm_u][mm_v] += {outer_var}[mm_u] * {inner_var};", 3)
        w.emit("}", 2)
        w.emit("}", 1)

    @staticmethod
    def point(tl: Tiling, a: int) -> str:
        """Box coordinate along axis ``a`` of the current output of a tile."""
        o, i = tl.axis(tl.outer), tl.axis(tl.inner)
        start = f"g{a} * {tl.tile[a]}" if tl.tile[a] > 1 else f"g{a}"
        return f"{start} + mm_u" if a == o else f"{start} + mm_v" if a == i else start

    def names(self, tl: Tiling, k: str = "mm_r", inner: str | None = None) -> dict[sympy.Symbol, str]:
        """Slang names of the matmul step's symbols at output (``mm_u``, ``mm_v``)
        of the tile and reduction index ``k`` (offsets added), coordinates past
        the box clamped to its edge; ``inner``: the inner axis's position, as given."""
        o, i = tl.axis(tl.outer), tl.axis(tl.inner)
        names: dict[sympy.Symbol, str] = {}
        for a, (s, b, _) in enumerate(tl.step.parallel):
            pos = self.point(tl, a)
            if a == i and inner is not None:
                pos = inner
            elif a in (o, i) and tl.box[a] % tl.tile[a]:
                pos = f"min({pos}, {tl.box[a] - 1})"
            names[s] = f"({pos} + {int(b)})" if int(b) else f"({pos})"
        s, b, _ = tl.step.loop[0]
        names[s] = f"({k} + {int(b)})" if int(b) else f"({k})" if " " in k else k
        return names

    @staticmethod
    def operands(tl: Tiling) -> tuple:
        """The matmul step's (outer, inner) reads: the inner one runs along the tile's inner axis."""
        by_conn = {r.connector: r for r in tl.step.reads}
        a, b = by_conn[tl.shape.a], by_conn[tl.shape.b]
        return (a, b) if tl.outer == tl.shape.row else (b, a)

    @staticmethod
    def sum_type(w: KernelWriter, tl: Tiling) -> str:
        """A tile's sums: a matmul's in its output type, as BLAS sums; a
        vector-matrix product's (memory-bound, one row of sums) wide, as every
        other in-thread sum (``writer.WIDE_ACCUMULATORS``)."""
        t = tl.step.tasklet
        own = w.out_type(t, next(iter(t.body)))
        return wide_type("sum", own) if tl.outer is None else own

    def per_output(self, w: KernelWriter, tl: Tiling) -> None:
        """Every step of the kernel for each output of the tile, the matmul step
        taking its value from the tile's sums."""
        o, i = tl.axis(tl.outer), tl.axis(tl.inner)
        w.emit("// the rest of the kernel, once per output of the tile", 1)
        w.emit(f"{w.kept}for (int mm_u = 0; mm_u < {tl.along(tl.outer)}; mm_u++)", 1)
        w.emit(f"{w.kept}for (int mm_v = 0; mm_v < {tl.along(tl.inner)}; mm_v++)", 1)
        w.emit("{", 1)
        self.before_output(w, tl)
        for a in range(len(tl.box)):
            w.emit(f"int t{a} = {self.point(tl, a)};", 2)
        past = [f"t{a} >= {tl.box[a]}" for a, s in ((o, tl.outer), (i, tl.inner)) if tl.ragged(s)]
        if past:
            w.emit(f"if ({' || '.join(past)}) continue;", 2)
        w.indent += 1
        for step in w.kernel.steps:
            if step is tl.step:
                self.tiled_output(w, tl, step)
            else:
                w.step(step)
        w.indent -= 1
        w.emit("}", 1)

    def before_output(self, w: KernelWriter, tl: Tiling) -> None:
        """What every thread runs at the top of each output's turn, before its
        point is known (a cooperative-matrix tile stores a fragment's sums
        there: ``coop_tiles``): nothing."""

    @staticmethod
    def sum_at(p: str) -> str:
        """The thread's sum for output (``mm_u``, ``mm_v``) of its tile."""
        return f"{p}_acc[mm_u][mm_v]"

    def tiled_output(self, w: KernelWriter, tl: Tiling, step: Step) -> None:
        """The matmul step at one output of the tile: its sum, scaled, stored."""
        t = step.tasklet
        p = identifier(t.name)
        names = w.names(step, {s: f"{p}_{identifier(s.name)}" for s, _, _ in step.parallel})
        w.emit(tasklet_comment(t), 1)
        w.parallel_names(step, names, 1)
        (c, var), coeff = w.outputs(t).popitem(), tl.shape.coeff
        out_type = w.out_type(t, c)
        scale = "" if coeff == 1 else f"{SlangPrinter(out_type).doprint(coeff)} * "
        acc = self.sum_at(p)
        if self.sum_type(w, tl) != out_type:
            acc = f"{out_type}({acc})"
        w.emit(f"{out_type} {var} = {scale}{acc};", 1)
        w.stores(step, {c: var}, names, 1)


FORM = RegisterTiles()
