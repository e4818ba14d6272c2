"""Groupshared-tile products: a workgroup owns a tile of a matmul-shaped
step's outputs, stages the tiles of both operands it needs through
groupshared memory a block of ``k``'s at a time, and each of its threads sums
a block of the tile in registers from there.

The register tiles (``register_tiles``) load each operand element once per
thread tile, straight from memory; on a GPU that is 1/8 and 1/4 of the loads
of one thread per output, and the H100 ran the MLP and the 4096^3 gemm at
30-170x JAX's time (issue 36).  Here each element crosses memory once per
workgroup tile (``Tuning.group_tile``: 64x64 outputs), neighbouring threads
load neighbouring elements of the operand's memory (coalesced), and the
threads' sums read groupshared memory.  What a product's operands look like
does not matter: each element of a staged tile is read through the
operand's own index (``A[i, k]``, ``A[k, i]``, a batch's, a split product's
``A[c * L + r, i]``), so every transpose the reverse pass produces
(``A B``, ``A^T B``, ``A B^T``) and batched products take this form without
a transposed copy.  Elements past the box (ragged sizes) are read clamped to
its edge and never stored; ``k``'s past the contraction are staged as zeros.

Each output's sum runs over ``k`` in order, one product at a time, in the
output's type (as the register tiles and BLAS): the result is the same
whichever tile shape the target's ``Tuning`` gives.  The kernel's other steps
(the epilogue) then run once per output of the thread's block
(``RegisterTiles.per_output``).

Applies on targets whose workgroups run together (``workgroup_reductions``:
CUDA and GPU Vulkan; lavapipe runs it when a test asks, barriers and all) to
a kernel whose first qualifying step is a product of two float buffers
(``product``), with at least ``Tuning.min_tiled_outputs`` outputs.  The
tile's shape is ``tile_shapes.workgroup_tile``'s.  A float32 operand whose
rows start at multiples of 4 elements is staged 16 bytes a load (``quad_loads``:
CUDA's ``ld.global.v4.f32``), through a second parameter bound to its buffer
as 4-vectors (``KernelWriter.quad_buffer``); others one element a load.
With ``Tuning.group_prefetch`` each thread reads its share of the next k
tile into registers before the staged one is summed (register double
buffering), and stores it after the next barrier: the same sums, in the
same order."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import sympy

from symdiff.ir.graph import FLOAT_DTYPES, DataflowGraph
from symdiff.ir.index_analysis import extent

from ..matmul import MatmulShape, Tiling
from ..plan_types import Kernel, Step
from ..printer import SlangPrinter
from ..threads import Threads
from ..workgroups import Layout
from . import thread_loop, tile_shapes
from .register_tiles import RegisterTiles
from .writer import KernelShape, KernelWriter, identifier, tasklet_comment

# ``GroupTiles.stage``'s phases: read and store at once, or (prefetching) read into registers, then store
BOTH, LOAD, STORE = "both", "load", "store"


@dataclass
class GroupTiling(Tiling):
    """A workgroup's tile: ``tile[a]`` outputs along box axis ``a`` (the grid
    counts workgroups), ``k_tile`` ``k``'s staged at a time, ``per_thread``:
    each thread's (outer, inner) block of the tile, its outputs ``threads_along``
    apart (neighbouring threads hold neighbouring outputs: coalesced stores)."""

    k_tile: int = 0
    per_thread: tuple[int, int] = (1, 1)

    def along(self, symbol: sympy.Symbol | None) -> int:
        """Outputs of a thread's block along ``symbol``."""
        return self.per_thread[0] if symbol == self.outer else self.per_thread[1] if symbol == self.inner else 1

    def threads_along(self, symbol: sympy.Symbol) -> int:
        """Threads of the workgroup side by side along ``symbol``."""
        return self.tile[self.axis(symbol)] // self.along(symbol)

    def ragged(self, symbol: sympy.Symbol | None) -> bool:
        return symbol is not None and self.box[self.axis(symbol)] % self.tile[self.axis(symbol)] != 0


def product(graph: DataflowGraph, step: Step) -> MatmulShape | None:
    """``step`` as a sum over its one loop symbol ``k`` of ``coeff * a * b``,
    both read from float buffers, its output one element per point (every
    parallel symbol a lone component of the output's index), ``a`` reading a
    parallel symbol ``b`` does not (the row) and ``b`` one ``a`` does not (the
    column); other parallel symbols are batch axes.  An operand's index may be
    any expression in the parallel symbols and ``k`` (a split product's
    ``c * L + r``).  None if not so."""
    t = step.tasklet
    if len(step.loop) != 1 or len(step.writes) != 1 or len(step.reads) != 2 or t.condition is not sympy.true:
        return None
    (write,), (ra, rb) = step.writes, step.reads
    k = step.loop[0][0]
    parallel = [s for s, _, _ in step.parallel]
    if write.memlet.accumulate != "sum" or sorted(write.memlet.index, key=str) != sorted(parallel, key=str):
        return None
    if any(r.producer is not None or graph.containers[r.memlet.container].dtype not in FLOAT_DTYPES
           for r in (ra, rb)):  # (16-bit operands are widened as staged: ``KernelWriter.element``)
        return None
    used = [set().union(*(sympy.sympify(e).free_symbols for e in r.memlet.index)) for r in (ra, rb)]
    if any(not u <= set(parallel) | {k} or k not in u for u in used):
        return None
    sa, sb = t.inputs[ra.connector], t.inputs[rb.connector]
    coeff, rest = t.body[write.memlet.connector].as_coeff_Mul()
    if sa == sb or sorted(sympy.Mul.make_args(rest), key=str) != sorted((sa, sb), key=str):
        return None
    only_a = [s for s in write.memlet.index if s in used[0] - used[1]]
    only_b = [s for s in write.memlet.index if s in used[1] - used[0]]
    if not only_a or not only_b:
        return None
    return MatmulShape(only_a[-1], only_b[-1], k, ra.connector, rb.connector, coeff)


def quad_loads(graph: DataflowGraph, gt: GroupTiling, axis: sympy.Symbol, read, k_fastest: bool) -> bool:
    """Whether ``read``'s tiles (along ``axis`` and ``k``) can be staged four
    elements a load, 16-byte aligned: a float32 operand whose flat index is
    ``f + 4 * (anything)`` over the positions of the step's symbols, ``f``
    the staged tile's contiguous symbol (``k`` where ``k_fastest``, else
    ``axis``), whose extent in the box and in a tile are multiples of 4 (a
    quad then lies wholly in or out of the box, and a tile's quads start at
    multiples of 4).  Not so (an odd leading dimension, an offset view): one
    element a load."""
    if graph.containers[read.memlet.container].dtype != "float32":
        return False
    fast = gt.shape.k if k_fastest else axis
    extents = ((extent(gt.step.loop[0]), gt.k_tile) if k_fastest
               else (gt.box[gt.axis(axis)], gt.tile[gt.axis(axis)]))
    if any(e % 4 for e in extents):
        return False
    shape = graph.containers[read.memlet.container].shape
    strides = [math.prod(shape[d + 1:]) for d in range(len(shape))]
    flat = sum((sympy.sympify(e) * st for e, st in zip(read.memlet.index, strides)), sympy.Integer(0))
    symbols = [s for s, _, _ in gt.step.parallel] + [gt.step.loop[0][0]]
    positions = flat.subs({s: s + b for s, b, _ in (*gt.step.parallel, *gt.step.loop)}, simultaneous=True)
    try:
        poly = sympy.Poly(sympy.expand(positions), *symbols)
    except sympy.PolynomialError:
        return False
    if poly.total_degree() > 1 or not all(c.is_Integer for c in poly.coeffs()):
        return False
    rest = sympy.expand(positions - fast)
    return (poly.coeff_monomial(fast) == 1 and sympy.Poly(rest, *symbols).total_degree() <= 1
            and all(int(c) % 4 == 0 for c in sympy.Poly(rest, *symbols).coeffs()))


def group_tiling(shape: KernelShape) -> GroupTiling | None:
    """The workgroup tiling of ``shape``'s kernel on its target, or None
    (module docstring: where it applies)."""
    kernel, tuning = shape.kernel, shape.target.tuning
    if (not shape.target.workgroup_reductions or kernel.finish is not None
            or kernel.threads < tuning.min_tiled_outputs):
        return None
    for step in kernel.steps:
        found = product(shape.g, step)
        if found is not None and _rest_per_output(kernel, step):
            return _tiles(shape.g, kernel, step, found, shape.target.tuning)
    return None


def _rest_per_output(kernel: Kernel, step: Step) -> bool:
    """Whether ``kernel``'s other steps can run once per output after the sums
    (``RegisterTiles.per_output``): none loops, or each loop accumulates."""
    return all(not other.loop or all(w.memlet.accumulate for w in other.writes)
               for other in kernel.steps if other is not step)


def _tiles(graph: DataflowGraph, kernel: Kernel, step: Step, shape: MatmulShape, tuning) -> GroupTiling:
    """The inner axis (``inner``) is the output's last one where it is the row
    or column (its stores then run along memory), else the column."""
    tile_shapes.check(tuning)
    syms = [s for s, _, _ in step.parallel]
    out_last = step.writes[0].memlet.index[-1]
    inner = out_last if out_last in (shape.row, shape.col) else shape.col
    outer = shape.row if inner == shape.col else shape.col
    o, i = syms.index(outer), syms.index(inner)
    group, per_thread = tile_shapes.workgroup_tile(tuning, kernel.box[o], kernel.box[i])
    tile = [1] * len(kernel.box)
    tile[o], tile[i] = group
    return GroupTiling(step, shape, outer, inner, tuple(tile), kernel.box, k_tile=tuning.group_tile_k,
                       per_thread=per_thread)


class GroupTiles(RegisterTiles):
    name = "group_tiles"

    def applies(self, shape: KernelShape) -> bool:
        return group_tiling(shape) is not None

    def write(self, w: KernelWriter) -> None:
        gt = self.tiling(w)
        self.take_threads(w, gt)
        for line in w.mapping.open("global_thread"):
            w.emit(line, 1)
        group = w.layout.size
        w.emit(f"int group_thread = global_thread % {group};", 1)
        w.emit(f"int lin = global_thread / {group};  // this workgroup's tile", 1)
        strides = [1] * len(gt.grid)
        for a in range(len(gt.grid) - 2, -1, -1):
            strides[a] = strides[a + 1] * gt.grid[a + 1]
        for a, (n, stride) in enumerate(zip(gt.grid, strides)):
            quotient = f"lin / {stride}" if stride > 1 else "lin"
            w.emit(f"int g{a} = {quotient if a == 0 else f'({quotient}) % {n}'};", 1)
        self.thread_place(w, gt)
        self.accumulate(w, gt)
        self.per_output(w, gt)

    @staticmethod
    def tiling(shape: KernelShape) -> GroupTiling:
        """The tiling this form writes ``shape``'s kernel in."""
        return group_tiling(shape)

    @staticmethod
    def thread_place(w: KernelWriter, gt: GroupTiling) -> None:
        """The thread's place in its workgroup's tile (``point`` reads it)."""
        across = gt.threads_along(gt.inner)
        w.emit(f"int mm_tx = group_thread % {across};  // the thread's place along the tile's inner axis", 1)
        w.emit(f"int mm_ty = group_thread / {across};", 1)

    @staticmethod
    def take_threads(w: KernelWriter, gt: GroupTiling) -> None:
        """The kernel's points become its workgroup tiles, a workgroup each
        (along the loop: dispatched as ``Tuning.group_size`` threads a tile); its
        other steps' loops run in each output's own thread (``thread_loop``)."""
        w.tiling, w.threads, w.layout = gt, gt.threads, Layout(1, w.target.tuning.group_size)
        w.mapping = Threads.for_device(w.layout.threads(gt.threads), w.target)
        w.forms = replace(w.forms, loop=thread_loop.FORM)

    def accumulate(self, w: KernelWriter, gt: GroupTiling) -> None:
        step = gt.step
        p = identifier(step.tasklet.name)
        w.emit(tasklet_comment(step.tasklet) + ": " + self.described(gt), 1)
        self.zero_sums(w, gt, p)
        outer_read, inner_read = self.operands(gt)
        tiles = {gt.outer: f"{p}_outer_tile", gt.inner: f"{p}_inner_tile"}
        operands = ((gt.outer, outer_read), (gt.inner, inner_read))
        for axis, read in operands:
            w.emit(self.tile_declaration(w, gt, read, tiles[axis], axis), 1)
        length = extent(step.loop[0])
        prefetch = w.target.tuning.group_prefetch and length > gt.k_tile
        if prefetch:  # register double buffering: the next k's load while these are summed
            for axis, read in operands:
                self.held(w, gt, axis, read, tiles[axis])
            self.load_next(w, gt, operands, tiles, "0", 1)
        w.emit(f"{w.kept}for (int mm_k = 0; mm_k < {length}; mm_k += {gt.k_tile})", 1)
        w.emit("{", 1)
        for axis, read in operands:
            self.stage(w, gt, axis, read, tiles[axis], STORE if prefetch else BOTH)
        w.emit("GroupMemoryBarrierWithGroupSync();", 2)
        if prefetch:
            w.emit(f"if (mm_k + {gt.k_tile} < {length})", 2)
            self.load_next(w, gt, operands, tiles, f"mm_k + {gt.k_tile}", 2)
        self.tile_sums(w, gt, p, tiles[gt.outer], tiles[gt.inner])
        w.emit("GroupMemoryBarrierWithGroupSync();  // the tiles are read before the next ones overwrite them", 2)
        w.emit("}", 1)

    def load_next(self, w: KernelWriter, gt: GroupTiling, operands, tiles: dict, start: str, depth: int) -> None:
        """A block reading each operand's share of the k tile from ``start`` on into
        its registers (``stage``'s ``LOAD``), at ``depth``."""
        w.emit("{", depth)
        w.emit(f"int mm_k0 = {start};", depth + 1)
        w.indent += depth - 1  # ``stage`` writes its lines one and two deeper than a k loop's body
        for axis, read in operands:
            self.stage(w, gt, axis, read, tiles[axis], LOAD, "mm_k0")
        w.indent -= depth - 1
        w.emit("}", depth)

    @staticmethod
    def described(gt: GroupTiling) -> str:
        """The comment naming the tile and how its sums are kept."""
        (tm, tn), bm, bn = gt.per_thread, gt.tile[gt.axis(gt.outer)], gt.tile[gt.axis(gt.inner)]
        return (f"a {bm}x{bn} tile of outputs over ({gt.outer}, {gt.inner}) a workgroup, {gt.k_tile} "
                f"{gt.shape.k}'s at a time through groupshared memory, {tm}x{tn} a thread in registers")

    @staticmethod
    def padding(n: int) -> int:
        """Unused columns after a staged tile's ``n``: one, so that threads
        storing along ``k`` hit distinct banks."""
        return 1

    def row(self, gt: GroupTiling, axis: sympy.Symbol) -> int:
        """Elements a staged tile holds per ``k`` along ``axis``: the tile's outputs and their padding."""
        n = gt.tile[gt.axis(axis)]
        return n + self.padding(n)

    def tile_declaration(self, w: KernelWriter, gt: GroupTiling, read, tile: str, axis: sympy.Symbol) -> str:
        """The groupshared array ``tile`` staging ``k_tile`` k's of ``read`` along ``axis``: ``[k][at]``."""
        return f"static groupshared {w.operand_type(read)} {tile}[{gt.k_tile}][{self.row(gt, axis)}];"

    @staticmethod
    def slot(gt: GroupTiling, axis: sympy.Symbol, k: str, at: str) -> str:
        """The subscript of a staged tile's element at ``k``, position ``at`` along ``axis``."""
        return f"[{k}][{at}]"

    def zero_sums(self, w: KernelWriter, gt: GroupTiling, p: str) -> None:
        """The thread's sums, in registers, at zero."""
        tm, tn = gt.per_thread
        acc_type, unroll = self.sum_type(w, gt), self.unrolled(w)
        w.emit(f"{acc_type} {p}_acc[{tm}][{tn}];", 1)
        w.emit(f"{unroll}for (int mm_u = 0; mm_u < {tm}; mm_u++) {unroll}for (int mm_v = 0; "
               f"mm_v < {tn}; mm_v++) {p}_acc[mm_u][mm_v] = {SlangPrinter(acc_type).literal(0)};", 1)

    def tile_sums(self, w: KernelWriter, gt: GroupTiling, p: str, outer_tile: str, inner_tile: str) -> None:
        """The staged k's added into the thread's sums: per k, the thread's
        operands along both axes into registers, then every pair's product."""
        tm, tn = gt.per_thread
        unroll = self.unrolled(w)
        outer_read, inner_read = self.operands(gt)
        w.emit(f"{unroll}for (int mm_kk = 0; mm_kk < {gt.k_tile}; mm_kk++)", 2)
        w.emit("{", 2)
        regs = {}
        for axis, read, tile, count, var, thread in ((gt.outer, outer_read, outer_tile, tm, "mm_u", "mm_ty"),
                                                     (gt.inner, inner_read, inner_tile, tn, "mm_v", "mm_tx")):
            # the thread's outputs along an axis lie threads_along apart (``point``)
            regs[axis] = f"{p}_{identifier(read.connector)}"
            w.emit(f"{w.operand_type(read)} {regs[axis]}[{count}];", 3)
            w.emit(f"{unroll}for (int {var} = 0; {var} < {count}; {var}++) {regs[axis]}[{var}] = "
                   f"{tile}[mm_kk][{thread} + {gt.threads_along(axis)} * {var}];", 3)
        w.emit(f"{unroll}for (int mm_u = 0; mm_u < {tm}; mm_u++) {unroll}for (int mm_v = 0; "
               f"mm_v < {tn}; mm_v++) {p}_acc[mm_u][mm_v] += {regs[gt.outer]}[mm_u] * {regs[gt.inner]}[mm_v];", 3)
        w.emit("}", 2)

    @staticmethod
    def unrolled(w: KernelWriter) -> str:
        """The prefix of the loops over a thread's block and a k tile: unrolled
        (the block's sums stay in registers) by the backend compiler
        (``[unroll]``: nvcc's ``#pragma unroll``, SPIR-V's Unroll hint), not by
        Slang (``[ForceUnroll]``), which took 5.7 s to compile the MLP's
        256x16-tiled product to CUDA source, 0.27 s with ``[unroll]``, for the
        same PTX (256 FMAs a k tile, 48 registers, no spills); kept as loops
        where the target keeps loops (``keep_loops``: lavapipe, whose compiler
        took 500 s instead of 35 for a fuzz program of 13 small products
        unrolled, at load 20)."""
        return w.kept or "[unroll] "

    def stage(self, w: KernelWriter, gt: GroupTiling, axis: sympy.Symbol, read, tile: str,
              phase: str = BOTH, k0: str = "mm_k") -> None:
        """The workgroup's threads copy one operand's ``k_tile`` x (tile along
        ``axis``) elements, from ``k0`` on, into ``tile``: neighbouring threads
        take neighbouring elements along the operand's memory (its index's last
        component: ``k`` or ``axis``), out-of-box positions clamped, ``k``'s
        past the end zeros.  Where ``quad_loads`` allows, each thread takes four
        neighbours in one 16-byte load.  ``phase``: ``LOAD`` only reads the
        thread's elements into registers (``<tile>_next``), ``STORE`` only
        writes those into the tile (``Tuning.group_prefetch``), ``BOTH`` both."""
        n = gt.tile[gt.axis(axis)]
        length = extent(gt.step.loop[0])
        k_fastest, width, loads, kind = self.staging(w, gt, axis, read)
        group = w.layout.size
        rounds = -(-loads // group)
        held = f"{tile}_next"  # the thread's elements between a LOAD and its STORE
        if phase != STORE:
            w.emit(f"// {read.connector}: its {n}x{gt.k_tile} tile " + ("into groupshared memory" if phase == BOTH
                                                                      else "into registers, for the next k's")
                   + (", 16 bytes a load" if width > 1 else ""), 2)
        w.emit(f"{self.unrolled(w)}for (int mm_l = 0; mm_l < {rounds}; mm_l++)", 2)
        w.emit("{", 2)
        w.emit(f"int mm_e = min(group_thread + mm_l * {group}, {loads - 1});  // a last partial "
               "round copies its last element again", 3)
        along_k, along_axis = (gt.k_tile // width, n) if k_fastest else (gt.k_tile, n // width)
        kk, at = (f"mm_e % {along_k}", f"mm_e / {along_k}") if k_fastest else (f"mm_e / {along_axis}",
                                                                               f"mm_e % {along_axis}")
        if width > 1:
            kk, at = (f"({kk}) * {width}", at) if k_fastest else (kk, f"({at}) * {width}")
        w.emit(f"int mm_kk = {kk}, mm_at = {at};", 3)
        last_k = length - (width if k_fastest else 1)
        names = self.stage_names(gt, axis, "mm_at", f"{k0} + mm_kk" if length % gt.k_tile == 0
                                 else f"min({k0} + mm_kk, {last_k})", 1 if k_fastest else width)
        index = w.flat_index(read.memlet, names)
        value = w.element(read, index) if width == 1 else f"{w.quad_buffer(read.access)}[({index}) / 4]"
        if length % gt.k_tile:
            value = f"{k0} + mm_kk < {length} ? {value} : {kind}(0)"
        if phase == LOAD:
            w.emit(f"{held}[mm_l] = {value};", 3)
        else:
            source = f"{held}[mm_l]" if phase == STORE else value
            if width == 1:
                w.emit(f"{tile}{self.slot(gt, axis, 'mm_kk', 'mm_at')} = {self.staged(w, gt, source)};", 3)
            else:
                if phase == BOTH:
                    w.emit(f"{kind} mm_q = {value};", 3)
                    source = "mm_q"
                for c, part in enumerate("xyzw"):
                    place = (self.slot(gt, axis, f"mm_kk + {c}", "mm_at") if k_fastest
                             else self.slot(gt, axis, "mm_kk", f"mm_at + {c}"))
                    w.emit(f"{tile}{place} = {self.staged(w, gt, f'{source}.{part}')};", 3)
        w.emit("}", 2)

    def held(self, w: KernelWriter, gt: GroupTiling, axis: sympy.Symbol, read, tile: str) -> None:
        """The registers a prefetching thread holds its share of ``tile`` in (``stage``'s ``LOAD``)."""
        _, _, loads, kind = self.staging(w, gt, axis, read)
        w.emit(f"{kind} {tile}_next[{-(-loads // w.layout.size)}];", 1)

    @staticmethod
    def staging(w: KernelWriter, gt: GroupTiling, axis: sympy.Symbol, read) -> tuple[bool, int, int, str]:
        """How one operand's tile is staged: whether its memory runs along
        ``k``, elements a load (4 where ``quad_loads``), loads a tile, and the
        type a load reads."""
        k_fastest = gt.shape.k in sympy.sympify(read.memlet.index[-1]).free_symbols
        width = 4 if quad_loads(w.g, gt, axis, read, k_fastest) else 1
        kind = w.operand_type(read) + ("4" if width > 1 else "")
        return k_fastest, width, gt.tile[gt.axis(axis)] * gt.k_tile // width, kind

    def staged(self, w: KernelWriter, gt: GroupTiling, value: str) -> str:
        """What is stored in a tile for an operand element ``value``: itself."""
        return value

    @staticmethod
    def stage_names(gt: GroupTiling, axis: sympy.Symbol, at: str, k: str, width: int = 1) -> dict[sympy.Symbol, str]:
        """Slang names of the step's symbols at position ``at`` of the tile along
        ``axis`` (clamped to the box's last ``width`` positions) and contraction
        index ``k``; batch axes at the workgroup's own coordinate."""
        names: dict[sympy.Symbol, str] = {}
        for a, (s, b, _) in enumerate(gt.step.parallel):
            pos = f"g{a}"
            if s == axis:
                pos = f"g{a} * {gt.tile[a]} + {at}"
                if gt.ragged(s):
                    pos = f"min({pos}, {gt.box[a] - width})"
            names[s] = f"({pos} + {int(b)})" if int(b) else f"({pos})"
        s, b, _ = gt.step.loop[0]
        names[s] = f"({k} + {int(b)})" if int(b) else f"({k})"
        return names

    @staticmethod
    def point(tl: GroupTiling, a: int) -> str:
        """Box coordinate along axis ``a`` of output (``mm_u``, ``mm_v``) of the
        thread's block: its outputs lie ``threads_along`` apart."""
        s = [s for s, _, _ in tl.step.parallel][a]
        if s == tl.outer:
            return f"g{a} * {tl.tile[a]} + mm_ty + {tl.threads_along(s)} * mm_u"
        if s == tl.inner:
            return f"g{a} * {tl.tile[a]} + mm_tx + {tl.threads_along(s)} * mm_v"
        return f"g{a}"


FORM = GroupTiles()
