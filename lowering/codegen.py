"""Slang module generation: one module per planned program, one entry point per kernel.

The text is meant to be read by a person debugging a program: each kernel
opens with a comment naming its tasklets and their source lines, each tasklet
keeps its own block with locals prefixed by the tasklet name (fused tasklets
share one scope, so a produced value can be passed on in a register).
Buffers are flat ``RWStructuredBuffer``s, one per stored version; strides are
compile-time constants because a module is generated per size binding.
"""
from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field
from typing import Callable

import sympy

from symdiff.ir.graph import DataflowGraph, Memlet, Tasklet
from symdiff.ir.index_analysis import extent, uses_connectors

from .bounds_check import FLAG, IndexCheck, IndexGuards, helper
from . import targets
from .host_products import HostProduct
from .matmul import Tiling, tiling
from .plan_types import HostKernel, Kernel, LoweringError, Plan, Step
from .printer import SLANG_TYPES, SlangPrinter, is_index_valued, prelude, print_flat_index
from .rowfusion import LoopGroup, RowKernel, reduces
from .shared_code import SHARED_BY, KernelCode, kernel_code, lift, share
from .threads import GROUP_SIZE, Threads, parallel_kernel, worker_cap
from .workgroups import WORKGROUP, layout


# Slang type of a buffer element: bools travel as ints (structured buffers of
# bool are not portable).
STORAGE_TYPES = {"float32": "float", "float64": "double", "int32": "int", "bool": "int"}
# (a folded producer makes b an expression: a product needs it parenthesised;
# maximum/minimum are the printer's NaN-propagating helpers, as np.maximum)
COMBINE = {"sum": "{a} + {b}", "prod": "{a} * ({b})", "max": "maximum({a}, {b})", "min": "minimum({a}, {b})"}
# Independent partial results of an in-thread reduction on the CPU device: g++
# may not reorder float additions, so one accumulator makes a loop-carried
# dependency it cannot vectorise; lanes combined in a fixed order at the end
# keep the result deterministic.  (lavapipe vectorises across threads instead.)
CPU_REDUCTION_LANES = 8
CPU_STORING_LANES = 16  # lanes of a loop that also stores elementwise values (lane_loops)
COLUMN_POINTS = 8  # fewest points of a thread for its reductions to run rows outer (columns_interchanged)
# float32 sums accumulate in double and round once at the end (the summation
# order, and why, in docs/design.md "Summation and accuracy"): a float32
# accumulator loses ~sqrt(n) ulps over a loop of n points, and a gradient such
# as log-sum-exp's w.r.t. the max (1 - sum(softmax)) needs the sums correctly
# rounded to cancel as they do in JAX.  Every target adds doubles exactly
# (Kahan's compensation in float32 is folded away on Vulkan: measured on lavapipe).
WIDE_ACCUMULATORS = {("sum", "float"): "double"}


PROGRAM = "run_program"  # the CPU device's only entry point
LAST = "workgroup_last"  # groupshared flag: this workgroup is the last of its dispatch to finish


@dataclass
class KernelEntry:
    """What the runtime needs to dispatch one kernel: its entry point is
    ``<name>_main``, or (CPU device) number ``index`` of the program entry."""

    name: str
    index: int
    threads: int  # points of the kernel's box (or of its tiles)
    buffers: dict[str, str]  # parameter of its function (and entry point) -> access node id
    per_thread: int = 1  # consecutive points one dispatched thread runs
    workgroup_threads: int = 0  # threads dispatched where workgroups share points' loops (lowering.workgroups)
    # points never update one element together and set no bounds flag: on the CPU
    # device its threads may be split over workers (lowering.threads)
    independent: bool = False
    work: int = 0  # points times their loop lengths: what splitting it over workers must pay for
    # the Slang function (and ``<function>_main`` entry point) it runs: its own, or
    # that of an earlier kernel of the same code (lowering.shared_code)
    function: str = ""
    constants: dict[str, int] = field(default_factory=dict)  # the function's lifted literals: this kernel's values
    host: HostProduct | None = None  # computed by the host between launches instead (lowering.host_products)

    def __post_init__(self) -> None:
        self.function = self.function or self.name

    def arguments(self) -> list[str]:
        """What a call of its function passes after the thread id: its buffers in
        the order of the function's parameters, then its values of the lifted literals."""
        return [buffer_name(self.buffers[p]) for p in sorted(self.buffers)] + [str(v) for v in self.constants.values()]

    @property
    def thread_count(self) -> list[int]:
        return Threads(self.workgroup_threads or self.threads, self.per_thread).thread_count


@dataclass
class Module:
    source: str
    kernels: list[KernelEntry]  # in dispatch order
    buffers: dict[str, str]  # program entry parameter -> access node id (CPU device; else empty)
    checks: list[IndexCheck] = field(default_factory=list)  # codes of the bounds flag (lowering.bounds_check)

    def entry_points(self, sequential: bool) -> list[str]:
        """The entry points to compile: the program entry on a sequential target,
        else one per function a kernel runs (kernels of the same code share one)."""
        return [PROGRAM] if sequential else list(dict.fromkeys(f"{k.function}_main" for k in self.kernels))


def identifier(text: str) -> str:
    """A Slang identifier for a graph name (names may hold '#', '.', '-')."""
    ident = re.sub(r"\W", "_", text)
    return ident if re.match(r"[A-Za-z_]", ident) else f"_{ident}"


def buffer_name(access: str) -> str:
    """The parameter naming an access node's buffer (the bounds flag is a buffer of its own)."""
    if access == FLAG:
        return FLAG
    container, version = access.rsplit("#", 1)
    return f"{identifier(container)}_v{version}"


def precision_of(graph: DataflowGraph, tasklet: Tasklet) -> str:
    """double when the tasklet touches any float64 container, else float."""
    touched = [m.container for _, m in graph.reads(tasklet.name) + graph.writes(tasklet.name)]
    return "double" if any(graph.containers[c].dtype == "float64" for c in touched) else "float"


class _KernelWriter:
    def __init__(self, plan: Plan, kernel: Kernel, atomics: set, device: str, guards: IndexGuards,
                 shared: set):
        self.g = plan.graph
        self.guards = guards
        self.plan = plan
        self.kernel = kernel
        self.atomics = atomics
        self.lines: list[str] = []
        self.buffers: dict[str, str] = {}
        # loads of one fixed element (a seed, a scalar parameter): load text -> local
        self.invariant_loads: dict[tuple[str, str], str] = {}
        # loads the same at every point of the loop being written: load text -> local
        self.loop_invariant: dict[str, str] = {}
        self.loop_invariant_count = 0  # locals named so far in this kernel
        self.written = {w.memlet.container for step in kernel.steps for w in step.writes}
        self.target = targets.of(device)
        self.tiling = tiling(plan.graph, kernel, self.target)
        self.threads = self.tiling.threads if self.tiling else kernel.threads
        # lanes of a workgroup sharing each point's loops (lowering.workgroups), or None
        self.layout = layout(plan.graph, kernel, self.target, self.tiling is not None)
        self.shared = shared  # element types of the groupshared scratch arrays the module needs
        self.per_lane = False  # emitting a loop body whose points are the current lane's own
        self.mapping = Threads.for_device(self.layout.threads(self.threads) if self.layout else self.threads,
                                          self.target)
        self.lanes = CPU_REDUCTION_LANES if self.target.sequential else 1
        self.kept = "[loop] " if self.target.keep_loops else ""  # prefix of the long loops (targets.keep_loops)
        self.indent = 0  # extra depth of the point loop and of the per-output loop of a tiled kernel
        self.colliding = False  # some point updates an element other points update too (atomic_<op>)

    def emit(self, line: str, depth: int) -> None:
        self.lines.append("    " * (depth + self.indent) + line)

    def buffer(self, access: str) -> str:
        held = self.plan.buffer_of(access)  # an in-place version: its older version's buffer
        name = buffer_name(held)
        self.buffers[name] = held
        return name

    def flat_index(self, memlet: Memlet, names: dict) -> str:
        shape = self.g.containers[memlet.container].shape
        if not shape:
            return "0"
        strides = [math.prod(int(d) for d in shape[k + 1:]) for k in range(len(shape))]
        return print_flat_index(memlet.index, strides, names)

    def write(self) -> str:
        k, tl = self.kernel, self.tiling
        grid = tl.grid if tl else k.box
        if tl is None and self.columns_interchanged(grid):
            return self.write_columns(grid)
        coord = "g" if tl else "t"  # a tiled kernel's thread coordinates count tiles
        for line in self.mapping.open("global_thread" if self.layout else "lin"):
            self.emit(line, 1)
        if self.layout:  # whole workgroups return together above: barriers stay uniform
            self.cooperative_point()
        self.indent += len(self.mapping.close())
        strides = [math.prod(grid[a + 1:]) for a in range(len(grid))]
        # A thread's points within one row of the box (its point count divides the row): every
        # coordinate but the last is the thread's own, the last runs with the point, so g++ sees
        # contiguous accesses and vectorises (lin / n and lin % n per point it did not: an outer
        # product's 2048x2048 elementwise kernel, mvt's gradient of A, 3-5 -> 0.8 ms CPU time)
        per = self.mapping.per_thread
        in_row = not self.layout and len(grid) > 1 and per > 1 and grid[-1] % per == 0
        for a, (n, stride) in enumerate(zip(grid, strides)):
            if in_row:
                digit = _digit("first", stride, n, a == 0) if stride > 1 else f"first % {n} + (lin - first)"
            else:
                digit = _digit("lin", stride, n, a == 0)
            self.emit(f"int {coord}{a} = {digit};", 1)
        if tl is None:
            self.steps()
        else:
            self.accumulate(tl)
            self.per_output(tl)
        self.indent -= len(self.mapping.close())
        for line in self.mapping.close():
            self.emit(line, 1)
        return self.text()

    def columns_interchanged(self, grid: tuple) -> bool:
        """Whether the CPU device runs this kernel's reductions rows outer,
        the thread's points inner (``write_columns``): each step reduces over
        a loop, its points are neighbours along the box's last axis (a
        thread's points lie in one row), and some read runs along memory with
        the point while the loop strides (a column sum: layer norm's gradient
        of its scale over 4096 rows walked each column 1024 floats a step,
        14.2 of the call's 28.9 ms).  Only plain reads and unconditional
        reductions into the point's outputs, none read by another step."""
        k, per = self.kernel, self.mapping.per_thread
        if not self.target.sequential or self.layout or per < COLUMN_POINTS or len(grid) < 1 or grid[-1] % per:
            return False
        last = k.steps[0].parallel[-1][0] if k.steps and k.steps[0].parallel else None
        for step in k.steps:
            t = step.tasklet
            if (not step.loop or t.condition is not sympy.true or "scatter" in t.meta or not step.parallel
                    or step.parallel[-1][0] != last or any(r.producer is not None for r in step.reads)
                    or any(uses_connectors(r.memlet.index, t) for r in step.reads)
                    or not all(w.memlet.accumulate for w in step.writes)
                    or any(self.accumulator(step, c)[1] == "bool" for c in self.outputs(t))):
                return False
        loops = {s for step in k.steps for s, _, _ in step.loop}
        return any(r.memlet.index and sympy.sympify(r.memlet.index[-1]) == last
                   and any(sympy.sympify(e).free_symbols & loops for e in r.memlet.index[:-1])
                   for step in k.steps for r in step.reads)

    def write_columns(self, grid: tuple) -> str:
        """The kernel with each reduction's loop outside the thread's points:
        one accumulator a point (``{acc}_lanes[p]``), the loads of a row along
        memory, which g++ vectorises across the points."""
        per = self.mapping.per_thread
        self.emit(self.mapping.open("lin")[0], 1)  # first: the thread's first point
        strides = [math.prod(grid[a + 1:]) for a in range(len(grid))]
        def coordinates(depth: int) -> None:
            for a, (n, stride) in enumerate(zip(grid, strides)):
                digit = _digit("first", stride, n, a == 0) if stride > 1 else f"first % {n} + p"
                self.emit(f"int t{a} = {digit};", depth)
        for step in self.kernel.steps:
            t = step.tasklet
            pre = identifier(t.name)
            names = self.names(step, {s: f"{pre}_{identifier(s.name)}" for s, _, _ in step.parallel})
            self.emit(f"// tasklet {t.name}" + (f" ({t.source})" if t.source else "") + ", rows outer", 1)
            accs = [(c, *self.accumulator(step, c)) for c in self.outputs(t)]
            for c, var, acc_type in accs:
                self.emit(f"{acc_type} {var}_lanes[{per}];", 1)
                self.emit(f"for (int p = 0; p < {per}; p++) {var}_lanes[p] = {self.identity(step, c)};", 1)
            self.emit(f"{self.kept}for (int r = 0; r < {math.prod(extent(rng) for rng in step.loop)}; r++)", 1)
            self.emit("{", 1)
            self.loop_coordinates(step, names, 2)
            self.emit(f"for (int p = 0; p < {per}; p++)", 2)
            self.emit("{", 2)
            coordinates(3)
            self.parallel_names(step, names, 3)
            self.point(step, names, 3, reducing=True, lane="p")
            self.emit("}", 2)
            self.emit("}", 1)
            self.emit(f"for (int p = 0; p < {per}; p++)", 1)
            self.emit("{", 1)
            coordinates(2)
            self.parallel_names(step, names, 2)
            outputs = self.outputs(t)
            for c, var, acc_type in accs:
                out_type = self.out_type(t, c)
                value = f"{var}_lanes[p]" if acc_type == out_type else f"{out_type}({var}_lanes[p])"
                self.emit(f"{out_type} {outputs[c]} = {value};", 2)
            self.stores(step, outputs, names, 2)
            self.emit("}", 1)
        return self.text()

    def text(self) -> str:
        """The kernel's lines, after the loads hoisted to its top (``invariant_load``)."""
        hoisted = [f"    {stype} {name} = {load};" for (stype, load), name in self.invariant_loads.items()]
        return "\n".join(hoisted + self.lines)

    def parallel_names(self, step: Step, names: dict, depth: int) -> None:
        for a, (s, b, _) in enumerate(step.parallel):
            self.emit(f"int {names[s]} = t{a} + {int(b)};" if int(b) else f"int {names[s]} = t{a};", depth)

    def invariant_load(self, stype: str, value: str, memlet: Memlet) -> str:
        """``value`` read once at the top of the kernel when its element is the same
        for every point and the kernel never writes it.  In the CPU device's point
        loop (lowering.threads) g++ must otherwise assume any store may change it
        and reload it per point, and those extra alias checks (past its limit of
        10) stop it vectorising the loop, transcendental helpers
        (lowering.cpu_math) and all; elsewhere it costs nothing."""
        shape = self.g.containers[memlet.container].shape
        index = [sympy.sympify(e) for e in memlet.index]
        in_bounds = all(e.is_Integer and 0 <= int(e) < int(n) for e, n in zip(index, shape))
        if not in_bounds or memlet.container in self.written:
            return self.loop_invariant.get(value, value)
        return self.invariant_loads.setdefault((stype, value), f"invariant{len(self.invariant_loads)}")

    def steps(self) -> None:
        for step in self.kernel.steps:
            self.step(step)

    def tile_point(self, tl: Tiling, a: int) -> str:
        """Box coordinate along axis ``a`` of the current output of a tile."""
        o, i = tl.axis(tl.outer), tl.axis(tl.inner)
        start = f"g{a} * {tl.tile[a]}" if tl.tile[a] > 1 else f"g{a}"
        return f"{start} + mm_u" if a == o else f"{start} + mm_v" if a == i else start

    def accumulate(self, tl: Tiling) -> None:
        """The matmul step's sums for a whole tile, kept in registers.  Rows past
        the box's edge read a clamped (valid) element and are never stored."""
        step = tl.step
        t = step.tasklet
        p = identifier(t.name)
        n_o, n_i = tl.along(tl.outer), tl.along(tl.inner)
        k, _, _ = step.loop[0]
        acc_type = self.tile_sum_type(tl)
        tile = f"a row of {n_i} outputs along {tl.inner}" if tl.outer is None else \
            f"a {n_o}x{n_i} tile of outputs over ({tl.outer}, {tl.inner})"
        how = f"{tl.micro[0]}x{tl.micro[1]} blocks of it summed over blocks of {tl.k_block} {k}'s in registers" \
            if tl.micro else f"summed over {k} in registers"
        self.emit(f"// tasklet {t.name}" + (f" ({t.source})" if t.source else "") + f": {tile} per thread, {how}", 1)
        self.emit(f"{acc_type} {p}_acc[{n_o}][{n_i}];", 1)
        self.emit(f"for (int mm_u = 0; mm_u < {n_o}; mm_u++) for (int mm_v = 0; mm_v < {n_i}; mm_v++) "
                  f"{p}_acc[mm_u][mm_v] = {SlangPrinter(acc_type).literal(0)};", 1)
        if tl.micro:
            self.micro_kernel(tl)
            return
        names = self.tile_names(tl)
        outer_read, inner_read = self.tile_operands(tl)
        outer_var, inner_var = f"{p}_{identifier(outer_read.connector)}", f"{p}_{identifier(inner_read.connector)}"
        unroll = "[ForceUnroll] " if n_i <= 8 else ""  # a long inner loop is left to the vectoriser
        self.emit(f"{self.kept}for (int mm_r = 0; mm_r < {extent(step.loop[0])}; mm_r++)", 1)
        self.emit("{", 1)
        self.emit(f"{self.operand_type(outer_read)} {outer_var}[{n_o}];", 2)
        self.emit(f"[ForceUnroll] for (int mm_u = 0; mm_u < {n_o}; mm_u++) {outer_var}[mm_u] = "
                  f"{self.buffer(outer_read.access)}[{self.flat_index(outer_read.memlet, names)}];", 2)
        self.emit(f"{unroll}for (int mm_v = 0; mm_v < {n_i}; mm_v++)", 2)
        self.emit("{", 2)
        self.emit(f"{self.operand_type(inner_read)} {inner_var} = "
                  f"{self.buffer(inner_read.access)}[{self.flat_index(inner_read.memlet, names)}];", 3)
        self.emit(f"[ForceUnroll] for (int mm_u = 0; mm_u < {n_o}; mm_u++) "
                  f"{p}_acc[mm_u][mm_v] += {outer_var}[mm_u] * {inner_var};", 3)
        self.emit("}", 2)
        self.emit("}", 1)

    def tile_names(self, tl: Tiling, k: str = "mm_r", inner: str | None = None) -> dict[sympy.Symbol, str]:
        """Slang names of the matmul step's symbols at output (``mm_u``, ``mm_v``)
        of the tile and reduction index ``k`` (offsets added), coordinates past
        the box clamped to its edge; ``inner``: the inner axis's position, as given."""
        o, i = tl.axis(tl.outer), tl.axis(tl.inner)
        names: dict[sympy.Symbol, str] = {}
        for a, (s, b, _) in enumerate(tl.step.parallel):
            pos = self.tile_point(tl, a)
            if a == i and inner is not None:
                pos = inner
            elif a in (o, i) and tl.box[a] % tl.tile[a]:
                pos = f"min({pos}, {tl.box[a] - 1})"
            names[s] = f"({pos} + {int(b)})" if int(b) else f"({pos})"
        s, b, _ = tl.step.loop[0]
        names[s] = f"({k} + {int(b)})" if int(b) else f"({k})" if " " in k else k
        return names

    def tile_operands(self, tl: Tiling) -> tuple:
        """The matmul step's (outer, inner) reads: the inner one runs along the tile's inner axis."""
        by_conn = {r.connector: r for r in tl.step.reads}
        a, b = by_conn[tl.shape.a], by_conn[tl.shape.b]
        return (a, b) if tl.outer == tl.shape.row else (b, a)

    def operand_type(self, read) -> str:
        return STORAGE_TYPES[self.g.containers[read.memlet.container].dtype]

    def micro_kernel(self, tl: Tiling) -> None:
        """CPU device (``lowering.matmul.CPU_MICRO``): per block of k's, the outer
        operand's slice of the tile is packed k-major into a local array (and the
        inner one's, if ``tl.packed_inner``); then each rows x cols block of the
        tile sums in registers over the block's k's, a row of ``cols`` of the inner
        operand read along memory per k, so g++ makes every k ``rows`` vector FMAs
        and no load or store of a sum."""
        step = tl.step
        p = identifier(step.tasklet.name)
        rows, cols = tl.micro
        n_o, n_i = tl.along(tl.outer), tl.along(tl.inner)
        length, q = extent(step.loop[0]), tl.k_block
        count = f"{q}" if length % q == 0 else f"min({q}, {length} - kb)"
        outer_read, inner_read = self.tile_operands(tl)
        outer_var, inner_var = f"{p}_{identifier(outer_read.connector)}", f"{p}_{identifier(inner_read.connector)}"
        acc_type = self.tile_sum_type(tl)
        self.emit(f"{self.kept}for (int kb = 0; kb < {length}; kb += {q})", 1)
        self.emit("{", 1)
        self.pack(tl, outer_read, f"{outer_var}_pack", "mm_u", n_o, count)
        if tl.packed_inner:
            self.pack(tl, inner_read, f"{inner_var}_pack", "mm_v", n_i, count)
            inner_load = f"{inner_var}_pack[kq][bv + mm_v]"
        else:  # the tiles cover the inner axis exactly (lowering.matmul._cpu_tiles): no clamp
            start = self.tile_point(tl, tl.axis(tl.inner))
            names = self.tile_names(tl, "kb + kq", f"{start} + bv")
            inner_load = f"{self.buffer(inner_read.access)}[{self.flat_index(inner_read.memlet, names)}]"
        self.emit(f"{self.kept}for (int bu = 0; bu < {n_o}; bu += {rows})", 2)
        self.emit(f"{self.kept}for (int bv = 0; bv < {n_i}; bv += {cols})", 2)
        self.emit("{", 2)
        block = f"[ForceUnroll] for (int mm_u = 0; mm_u < {rows}; mm_u++) " \
                f"[ForceUnroll] for (int mm_v = 0; mm_v < {cols}; mm_v++) "
        self.emit(f"{acc_type} {p}_sum[{rows}][{cols}];", 3)
        self.emit(f"{block}{p}_sum[mm_u][mm_v] = {p}_acc[bu + mm_u][bv + mm_v];", 3)
        self.emit(f"for (int kq = 0; kq < {count}; kq++)", 3)
        self.emit("{", 3)
        self.emit(f"{self.operand_type(inner_read)} {inner_var}[{cols}];", 4)
        self.emit(f"[ForceUnroll] for (int mm_v = 0; mm_v < {cols}; mm_v++) {inner_var}[mm_v] = {inner_load};", 4)
        self.emit(f"[ForceUnroll] for (int mm_u = 0; mm_u < {rows}; mm_u++)", 4)
        self.emit("{", 4)
        self.emit(f"{self.operand_type(outer_read)} {outer_var} = {outer_var}_pack[kq][bu + mm_u];", 5)
        self.emit(f"[ForceUnroll] for (int mm_v = 0; mm_v < {cols}; mm_v++) "
                  f"{p}_sum[mm_u][mm_v] += {outer_var} * {inner_var}[mm_v];", 5)
        self.emit("}", 4)
        self.emit("}", 3)
        self.emit(f"{block}{p}_acc[bu + mm_u][bv + mm_v] = {p}_sum[mm_u][mm_v];", 3)
        self.emit("}", 2)
        self.emit("}", 1)

    def pack(self, tl: Tiling, read, var: str, along: str, n: int, count: str) -> None:
        """``var[q][x]``: the operand of ``read`` at k ``kb + q`` and output ``x``
        (``along``: ``mm_u`` or ``mm_v``) of the tile, clamped to the box, read along memory."""
        k = tl.step.loop[0][0]
        load = f"{var}[kq][{along}] = {self.buffer(read.access)}[" \
               f"{self.flat_index(read.memlet, self.tile_names(tl, 'kb + kq'))}];"
        loops = [f"for (int kq = 0; kq < {count}; kq++)", f"for (int {along} = 0; {along} < {n}; {along}++)"]
        if read.memlet.index[-1] == k:
            loops.reverse()
        self.emit(f"{self.operand_type(read)} {var}[{tl.k_block}][{n}];", 2)
        self.emit(f"{self.kept}{loops[0]}", 2)
        self.emit(f"    {loops[1]} {load}", 2)

    def tile_sum_type(self, tl: Tiling) -> str:
        """A tile's sums: a matmul's in its output type, as BLAS sums; a
        vector-matrix product's (memory-bound, one row of sums) wide, as every
        other in-thread sum (``WIDE_ACCUMULATORS``)."""
        t = tl.step.tasklet
        own = self.out_type(t, next(iter(t.body)))
        return WIDE_ACCUMULATORS.get(("sum", own), own) if tl.outer is None else own

    def per_output(self, tl: Tiling) -> None:
        """Every step of the kernel for each output of the tile, the matmul step
        taking its value from the tile's sums."""
        o, i = tl.axis(tl.outer), tl.axis(tl.inner)
        self.emit("// the rest of the kernel, once per output of the tile", 1)
        self.emit(f"{self.kept}for (int mm_u = 0; mm_u < {tl.along(tl.outer)}; mm_u++)", 1)
        self.emit(f"{self.kept}for (int mm_v = 0; mm_v < {tl.along(tl.inner)}; mm_v++)", 1)
        self.emit("{", 1)
        for a in range(len(tl.box)):
            self.emit(f"int t{a} = {self.tile_point(tl, a)};", 2)
        past = [f"t{a} >= {tl.box[a]}" for a, s in ((o, tl.outer), (i, tl.inner)) if tl.ragged(s)]
        if past:
            self.emit(f"if ({' || '.join(past)}) continue;", 2)
        self.indent += 1
        for step in self.kernel.steps:
            self.step(step)
        self.indent -= 1
        self.emit("}", 1)

    def step(self, step: Step) -> None:
        t = step.tasklet
        p = identifier(t.name)
        names = self.names(step, {s: f"{p}_{identifier(s.name)}" for s, _, _ in step.parallel})
        self.emit(f"// tasklet {t.name}" + (f" ({t.source})" if t.source else ""), 1)
        self.parallel_names(step, names, 1)
        if self.tiling is not None and step is self.tiling.step:
            (c, var), coeff = self.outputs(t).popitem(), self.tiling.shape.coeff
            out_type = self.out_type(t, c)
            scale = "" if coeff == 1 else f"{SlangPrinter(out_type).doprint(coeff)} * "
            acc = f"{p}_acc[mm_u][mm_v]"
            if self.tile_sum_type(self.tiling) != out_type:
                acc = f"{out_type}({acc})"
            self.emit(f"{out_type} {var} = {scale}{acc};", 1)
            self.stores(step, {c: var}, names, 1)
            return
        if not step.loop:
            self.point(step, names, 1, reducing=False)
            return
        self.accumulators(step)
        self.reduction_loop(step, names)
        self.finish_accumulators(step, 1)
        self.stores(step, self.outputs(t), names, 1)

    def reduction_loop(self, step: Step, names: dict) -> None:
        """The loop of an in-thread reduction (see ``lane_loops``)."""
        def point(depth: int, lane: str | None) -> None:
            self.loop_coordinates(step, names, depth)
            self.point(step, names, depth, reducing=True, lane=lane)
        self.hoist_loop_invariant_reads([(step, names)])
        self.lane_loops([step], math.prod(extent(r) for r in step.loop), point)
        self.loop_invariant.clear()

    def hoist_loop_invariant_reads(self, steps: list[tuple[Step, dict]]) -> None:
        """Loads the same at every point of the loop about to be written (an
        index without loop symbols, from a container the loop does not write,
        by an unconditional step: a condition may guard the index), read once
        before it (``loop_invariant``, until cleared).  g++ must otherwise
        assume a store in the loop may change them and reload them per point,
        and with a double accumulator in the loop (g++ 12) then does not
        vectorise it at all: a row log-sum-exp's value_and_grad took 2.3x as
        long on the CPU device."""
        written = {w.memlet.container for step, _ in steps for w in step.writes}
        for step, names in steps:
            varying = {s for s, _, _ in step.loop} | set(step.tasklet.inputs.values())
            for r in step.reads if step.tasklet.condition is sympy.true else ():
                used = set().union(*(sympy.sympify(e).free_symbols for e in r.memlet.index))
                if r.producer is not None or used & varying or r.memlet.container in written:
                    continue
                storage = STORAGE_TYPES[self.g.containers[r.memlet.container].dtype]
                value = f"{self.buffer(r.access)}[{self.flat_index(r.memlet, names)}]"
                if value not in self.loop_invariant and self.invariant_load(storage, value, r.memlet) == value:
                    self.loop_invariant[value] = f"loop_invariant{self.loop_invariant_count}"
                    self.loop_invariant_count += 1
                    self.emit(f"{storage} {self.loop_invariant[value]} = {value};", 1)

    def lane_loops(self, reducing: list[Step], length: int, point: Callable[[int, str | None], None],
                   storing: bool = False) -> None:
        """A loop over ``length`` points, ``r`` the point, in which the
        ``reducing`` steps accumulate (``point(depth, lane)`` emits one point's
        code).  With several lanes (``CPU_REDUCTION_LANES``), point ``k`` of
        each block of consecutive points adds into lane ``k`` of each
        accumulator, the lanes are combined in lane order after the last whole
        block, and the points past it add into the combined accumulators."""
        if self.layout:
            self.shared_loop(reducing, length, point)
            return
        accs = [(step, c, *self.accumulator(step, c)) for step in reducing for c in self.outputs(step.tasklet)]
        boolean = any(acc_type == "bool" for *_, acc_type in accs)
        # a loop that also computes elementwise values (a row kernel's group over a first stage's
        # chunk, reduce_fusion.chunk_producers) on the CPU device: as many lanes as a vector holds
        # floats, the lane loop left to g++'s loop vectoriser (unrolled, it vectorised at half width
        # or not at all)
        wide = storing and self.target.sequential
        width = CPU_STORING_LANES if wide else self.lanes
        lanes = width if accs and length >= 2 * width and not boolean else 1
        start = length - length % lanes if lanes > 1 else 0  # where the single-accumulator loop begins
        if lanes > 1:
            for *_, var, acc_type in accs:
                self.emit(f"{acc_type} {var}_lanes[{lanes}];", 1)
                self.emit(f"[ForceUnroll] for (int lane = 0; lane < {lanes}; lane++) {var}_lanes[lane] = {var};", 1)
            self.emit(f"{self.kept}for (int block = 0; block < {start}; block += {lanes})", 1)
            self.emit("{", 1)
            self.emit(("" if wide else "[ForceUnroll] ") + f"for (int lane = 0; lane < {lanes}; lane++)", 2)
            self.emit("{", 2)
            self.emit("int r = block + lane;", 3)
            point(3, "lane")
            self.emit("}", 2)
            self.emit("}", 1)
            for step, c, var, _ in accs:
                combined = COMBINE[self.accumulation(step, c)].format(a=var, b=f"{var}_lanes[lane]")
                self.emit(f"[ForceUnroll] for (int lane = 0; lane < {lanes}; lane++) {var} = {combined};", 1)
        if start == length:
            return
        self.emit(f"{self.kept}for (int r = {start}; r < {length}; r++)", 1)
        self.emit("{", 1)
        point(2, None)
        self.emit("}", 1)

    def cooperative_point(self) -> None:
        """``lin`` (this thread's point) and ``lane`` (its share of the point's
        loops) from its place in the workgroup: ``layout.points`` neighbouring
        points, ``layout.lanes`` lanes each.  Threads of a last, partial
        workgroup past the final point redo it but store nothing (``spare``):
        they must still reach every barrier."""
        per = self.layout.points
        self.emit(f"int group_thread = global_thread % {WORKGROUP};", 1)
        if per == 1:
            self.emit(f"int lin = global_thread / {WORKGROUP};", 1)
            self.emit("int lane = group_thread;", 1)
            return
        self.emit(f"int point = global_thread / {WORKGROUP} * {per} + group_thread % {per};", 1)
        self.emit(f"int lin = min(point, {self.threads - 1});", 1)
        self.emit(f"int lane = group_thread / {per};", 1)

    def spare(self) -> str | None:
        """The condition that this thread's point is its own (see ``cooperative_point``)."""
        return f"point < {self.threads}" if self.layout and self.layout.points > 1 and \
            self.threads % self.layout.points else None

    def shared_loop(self, reducing: list[Step], length: int, point: Callable[[int, str | None], None]) -> None:
        """``lane_loops`` in a workgroup: lane ``l`` runs points ``l``,
        ``l + WORKGROUP``, ... and each reducing step's accumulators are then
        combined over the lanes (``combine_lanes``)."""
        self.emit(f"{self.kept}for (int r = lane; r < {length}; r += {self.layout.lanes})", 1)
        self.emit("{", 1)
        self.per_lane = True
        point(2, None)
        self.per_lane = False
        self.emit("}", 1)
        for step in reducing:
            for c in self.outputs(step.tasklet):
                self.combine_lanes(*self.accumulator(step, c), self.accumulation(step, c))

    def combine_lanes(self, acc: str, acc_type: str, op: str) -> None:
        """Every lane's ``acc`` combined in a fixed binary tree in groupshared
        memory (lane l with lane l + width, halving width), the result in every
        lane's ``acc``.  The last barrier lets the next tree reuse the scratch.
        With wave operations the steps narrower than a wave are ``wave_tree``'s."""
        scratch = f"workgroup_{acc_type}"
        per = self.layout.points  # a point's lanes sit ``per`` apart in the workgroup
        # a point's lanes are neighbouring threads, so the tree's last steps stay within a wave
        waves = self.target.wave_operations and per == 1
        self.shared.add(acc_type)
        self.emit(f"// {acc}: the lanes' partial results combined in a fixed tree", 1)
        self.emit(f"{scratch}[group_thread] = {acc};", 1)
        self.emit("GroupMemoryBarrierWithGroupSync();", 1)
        if waves:
            self.emit(f"int {acc}_wave = min(int(WaveGetLaneCount()), {self.layout.lanes});", 1)
        last = f"{acc}_wave" if waves else "1"
        self.emit(f"for (int width = {self.layout.lanes // 2}; width >= {last}; width /= 2)", 1)
        self.emit("{", 1)
        partner = f"{scratch}[group_thread + width{f' * {per}' if per > 1 else ''}]"
        combined = COMBINE[op].format(a=f"{scratch}[group_thread]", b=partner)
        self.emit(f"if (lane < width) {scratch}[group_thread] = {combined};", 2)
        self.emit("GroupMemoryBarrierWithGroupSync();", 2)
        self.emit("}", 1)
        if waves:
            self.wave_tree(acc, scratch, op)
        else:
            self.emit(f"{acc} = {scratch}[{f'group_thread % {per}' if per > 1 else '0'}];", 1)
        self.emit("GroupMemoryBarrierWithGroupSync();", 1)

    def wave_tree(self, acc: str, scratch: str, op: str) -> None:
        """The tree's steps narrower than a wave (``combine_lanes``), in
        registers: every wave loads the tree's first ``<acc>_wave`` partial
        results, and wave lane ``j`` combines with lane ``j ^ width``, the lower
        lane's value first: lane ``j < width`` then computes exactly what the
        tree's lane ``j`` does, and its partner the same bits, so every lane of
        every wave ends with the tree's result, bit for bit, whatever the wave
        size (no broadcast needed; the order is the groupshared tree's)."""
        self.emit(f"int {acc}_lane = int(WaveGetLaneIndex()) % {acc}_wave;", 1)
        self.emit(f"{acc} = {scratch}[{acc}_lane];", 1)
        self.emit(f"for (int width = {acc}_wave / 2; width > 0; width /= 2)", 1)
        self.emit("{", 1)
        self.emit(f"let partner = WaveReadLaneAt({acc}, int(WaveGetLaneIndex()) ^ width);", 2)
        lower_first = COMBINE[op].format(a=acc, b="partner")
        upper = COMBINE[op].format(a="partner", b=acc)
        self.emit(f"{acc} = ({acc}_lane & width) != 0 ? {upper} : {lower_first};", 2)
        self.emit("}", 1)

    def names(self, step: Step, parallel: dict) -> dict[sympy.Symbol, str]:
        """Slang names of a step's symbols: ``parallel`` for its thread
        symbols, locals prefixed by the tasklet for loop symbols and connectors."""
        t = step.tasklet
        p = identifier(t.name)
        names: dict[sympy.Symbol, str] = dict(parallel)
        for s, _, _ in step.loop:
            names[s] = f"{p}_{identifier(s.name)}"
        for conn, sym in t.inputs.items():
            names[sym] = f"{p}_{identifier(conn)}"
        return names

    def outputs(self, t: Tasklet) -> dict[str, str]:
        """The local holding each output connector's value."""
        return {c: f"{identifier(t.name)}_{identifier(c)}" for c in t.body}

    def accumulation(self, step: Step, conn: str) -> str:
        """The accumulation (``"sum"``, ``"max"``, ...) of a reduction's output."""
        return next(w.memlet.accumulate for w in step.writes if w.memlet.connector == conn)

    def accumulator(self, step: Step, conn: str) -> tuple[str, str]:
        """The local a reduction's output accumulates in, and its type: the
        output's own, or a wider one (``WIDE_ACCUMULATORS``) rounded into the
        output by ``finish_accumulators``."""
        var, out_type = self.outputs(step.tasklet)[conn], self.out_type(step.tasklet, conn)
        wide = WIDE_ACCUMULATORS.get((self.accumulation(step, conn), out_type))
        return (f"{var}_acc", wide) if wide else (var, out_type)

    def accumulators(self, step: Step) -> None:
        """A reduction's accumulators, declared at the thread's scope, set to their identity."""
        for c in self.outputs(step.tasklet):
            var, acc_type = self.accumulator(step, c)
            self.emit(f"{acc_type} {var} = {self.identity(step, c)};", 1)

    def identity(self, step: Step, conn: str) -> str:
        """The literal a reduction's accumulator for output ``conn`` starts from."""
        acc_type = self.accumulator(step, conn)[1]
        return SlangPrinter(acc_type if acc_type != "bool" else precision_of(self.g, step.tasklet)).literal(
            {"sum": 0, "prod": 1, "max": -math.inf, "min": math.inf}[self.accumulation(step, conn)])

    def finish_accumulators(self, step: Step, depth: int) -> None:
        """After a reduction's loop: its outputs from wider accumulators, rounded once."""
        for c, var in self.outputs(step.tasklet).items():
            acc, _ = self.accumulator(step, c)
            if acc != var:
                out_type = self.out_type(step.tasklet, c)
                self.emit(f"{out_type} {var} = {out_type}({acc});", depth)

    def loop_coordinates(self, step: Step, names: dict, depth: int) -> None:
        """The step's loop symbols from the loop counter ``r`` (unit axes are constants)."""
        wide = [rng for rng in step.loop if extent(rng) != 1]
        stride = math.prod(extent(rng) for rng in wide)
        for s, b, e in step.loop:
            if extent((s, b, e)) == 1:
                self.emit(f"int {names[s]} = {int(b)};", depth)
                continue
            stride //= extent((s, b, e))
            digit = _digit("r", stride, extent((s, b, e)), s == wide[0][0])
            self.emit(f"int {names[s]} = {f'{int(b)} + ' if int(b) else ''}{digit};", depth)

    def point(self, step: Step, names: dict, depth: int, reducing: bool, lane: str | None = None) -> None:
        """One point of a step: its condition, reads and body; a reduction
        combines into its accumulators (element ``lane`` of their lanes if
        given), anything else declares its outputs and stores them."""
        t = step.tasklet
        precision = precision_of(self.g, t)
        outputs = self.outputs(t)
        out_types = {c: self.out_type(t, c) for c in t.body}
        conditional = t.condition is not sympy.true
        if conditional and not reducing:
            for c, var in outputs.items():
                self.emit(f"{out_types[c]} {var} = {SlangPrinter(precision).literal(0) if out_types[c] != 'bool' else 'false'};", depth)
        if conditional:
            self.emit(f"if ({SlangPrinter(precision, names).doprint(t.condition)})", depth)
            self.emit("{", depth)
        inner = depth + conditional
        self.reads(step, names, inner)
        if "scatter" in t.meta:  # an owner-computes loop checks the indices of the scatter it replaces
            self.guards.guard(self, t, t.meta["scatter"], names, inner, write=True)
        values = self.body(t, names, precision, out_types, inner)
        for c, var in outputs.items():
            if reducing:
                acc, acc_type = self.accumulator(step, c)
                target = f"{acc}_lanes[{lane}]" if lane else acc
                value = values[c] if acc_type == out_types[c] else f"{acc_type}({values[c]})"
                self.emit(f"{target} = {COMBINE[self.accumulation(step, c)].format(a=target, b=value)};", inner)
            elif conditional:
                self.emit(f"{var} = {values[c]};", inner)
            else:
                self.emit(f"{out_types[c]} {var} = {values[c]};", inner)
        if not reducing:
            self.stores(step, outputs, names, inner)
        if conditional:
            self.emit("}", depth)

    def out_type(self, t: Tasklet, conn: str) -> str:
        m = next((m for _, m in self.g.writes(t.name) if m.connector == conn), None)
        return SLANG_TYPES[self.g.containers[m.container].dtype] if m else precision_of(self.g, t)

    def reads(self, step: Step, names: dict, depth: int) -> None:
        pending = list(step.reads)
        conns = set(step.tasklet.inputs.values())
        done: set = set()
        while pending:
            for r in list(pending):
                needed = set().union(*[sympy.sympify(e).free_symbols for e in r.memlet.index]) & conns
                if not needed <= done:
                    continue
                var = names[step.tasklet.inputs[r.connector]]
                dtype = self.g.containers[r.memlet.container].dtype
                if r.producer is not None:
                    value = f"{identifier(r.producer)}_{identifier(self.producer_connector(r))}"
                else:
                    value = self.load(step.tasklet, r, names, depth)
                    if dtype == "bool":
                        value = f"({value} != 0)"
                self.emit(f"{SLANG_TYPES[dtype]} {var} = {value};", depth)
                done.add(step.tasklet.inputs[r.connector])
                pending.remove(r)

    def load(self, t: Tasklet, r, names: dict, depth: int) -> str:
        """A buffer read; one through a data-dependent index is guarded
        (``lowering.bounds_check``): out of range, it reads 0."""
        storage = STORAGE_TYPES[self.g.containers[r.memlet.container].dtype]
        buf, flat = self.buffer(r.access), self.flat_index(r.memlet, names)
        ok = self.guards.guard(self, t, r.memlet, names, depth, write=False)
        if ok is None:
            return self.invariant_load(storage, f"{buf}[{flat}]", r.memlet)
        return f"({ok} ? {buf}[{ok} ? {flat} : 0] : {storage}(0))"

    def producer_connector(self, r) -> str:
        return next(m.connector for _, m in self.g.writers(r.access))

    def body(self, t: Tasklet, names: dict, precision: str, out_types: dict, depth: int) -> dict[str, str]:
        conns = list(t.body)
        temps, exprs = _shared_terms(tuple(t.body[c] for c in conns))
        names = dict(names)
        for sym, expr in temps:
            kind = "bool" if isinstance(expr, sympy.logic.boolalg.Boolean) else \
                "int" if is_index_valued(expr) else precision
            names[sym] = f"{identifier(t.name)}_tmp{sym.name[len(SHARED_TERM):]}"
            printer_kind = precision if kind == "bool" else kind
            self.emit(f"{kind} {names[sym]} = {SlangPrinter(printer_kind, names, precision).doprint(expr)};", depth)
        values = {}
        for c, expr in zip(conns, exprs):
            kind = out_types[c]
            if kind == "int":
                text = SlangPrinter("int", names, precision).doprint(expr) if is_index_valued(expr) else \
                    f"int({SlangPrinter(precision, names).doprint(expr)})"
            elif kind == "bool":
                text = SlangPrinter(precision, names).doprint(expr)
                if not isinstance(expr, sympy.logic.boolalg.Boolean):
                    text = f"({text} != {SlangPrinter(precision).literal(0)})"
            else:
                text = SlangPrinter(kind, names).doprint(expr)
            values[c] = text
        return values

    def stores(self, step: Step, outputs: dict, names: dict, depth: int) -> None:
        for w in step.writes:
            if w.access not in self.plan.stored:
                continue
            dtype = self.g.containers[w.memlet.container].dtype
            value = outputs[w.memlet.connector]
            if dtype == "bool":
                value = f"({value} ? 1 : 0)"
            buf = self.buffer(w.access)
            idx = self.flat_index(w.memlet, names)
            ok = self.guards.guard(self, step.tasklet, w.memlet, names, depth, write=True)
            # a data-dependent index out of range drops the write (lowering.bounds_check);
            # a value every lane of a workgroup holds alike is stored by lane 0
            own = "lane == 0" if self.layout and not self.per_lane else None
            conditions = [c for c in (ok, own, self.spare()) if c]
            if conditions:
                self.emit(f"if ({' && '.join(conditions)})", depth)
            d = depth + bool(conditions)
            if w.mode == "store":
                self.emit(f"{buf}[{idx}] = {value};", d)
            elif w.mode == "combine":
                self.emit(f"{buf}[{idx}] = {COMBINE[w.memlet.accumulate].format(a=f'{buf}[{idx}]', b=value)};", d)
            else:
                _check_atomic(self.target, STORAGE_TYPES[dtype], w.memlet.accumulate, step.tasklet)
                self.colliding = True
                self.atomics.add((STORAGE_TYPES[dtype], w.memlet.accumulate))
                self.emit(f"atomic_{w.memlet.accumulate}({buf}, {idx}, {value});", d)


    def last_workgroup(self, finish: str, buffers: dict[str, str], counter: str) -> str:
        """The end of a reduction's first stage whose second runs in the same
        dispatch (``lowering.last_workgroup``): lane 0 fences the workgroup's
        stored partial results device-wide and counts the workgroup done; the
        workgroup counting ``workgroups - 1`` is the last, and calls ``finish``
        (the second stage's function) with its lanes as threads."""
        self.buffers.update(buffers)
        done = self.buffer(counter)
        args = "".join(f", {n}" for n in sorted(buffers))
        lines = [f"// the last of the {self.threads} workgroups to finish runs {finish} over every one's partial results",
                 "DeviceMemoryBarrierWithGroupSync();",
                 "if (group_thread == 0)",
                 "{",
                 "    int before;",
                 f"    InterlockedAdd({done}[0], 1, before);",
                 f"    {LAST} = before == {self.threads - 1} ? 1 : 0;",
                 "}",
                 "GroupMemoryBarrierWithGroupSync();",
                 f"if ({LAST} == 0) return;",
                 "DeviceMemoryBarrier();  // the other workgroups' partial results, fenced before they counted",
                 f"{finish}(uint3(group_thread, 0, 0){args});"]
        return "\n".join("    " + line for line in lines)


class _RowKernelWriter(_KernelWriter):
    """A row kernel (``lowering.rowfusion``): thread ``t`` owns one row of the
    box, and each loop group is one loop over the row running its steps point
    by point; reductions' sums and one-point steps' values stay in registers
    for the groups after them."""

    def steps(self) -> None:
        written: set[str] = set()
        for group in self.kernel.groups:
            if self.layout and any(r.producer is None and r.access in written
                                          for s in group.steps for r in s.reads):
                self.emit("// other lanes stored what this loop reads", 1)
                self.emit("AllMemoryBarrierWithGroupSync();", 1)
            self.group(group)
            written |= {w.access for s in group.steps for w in s.writes}

    def group(self, group: LoopGroup) -> None:
        where = f"one loop over {group.length} points of the row" if group.shape else "once per row"
        self.emit(f"// {', '.join(s.tasklet.name for s in group.steps)}: {where}", 1)
        names = {s.tasklet.name: self.names(s, {sym: f"t{a}" if not int(b) else f"(t{a} + {int(b)})"
                                                for a, (sym, b, _) in enumerate(s.parallel)})
                 for s in group.steps}
        reducing = [s for s in group.steps if reduces(s)]
        for step in reducing:
            self.accumulators(step)

        def point(depth: int, lane: str | None) -> None:
            for step in group.steps:
                t = step.tasklet
                self.emit(f"// tasklet {t.name}" + (f" ({t.source})" if t.source else ""), depth)
                self.loop_coordinates(step, names[t.name], depth)
                self.point(step, names[t.name], depth, reducing=step in reducing,
                           lane=lane if step in reducing else None)
        if group.shape:
            self.hoist_loop_invariant_reads([(s, names[s.tasklet.name]) for s in group.steps])
            self.lane_loops(reducing, group.length, point, storing=len(reducing) < len(group.steps))
            self.loop_invariant.clear()
        else:
            point(1, None)
        for step in reducing:
            self.finish_accumulators(step, 1)
            self.stores(step, self.outputs(step.tasklet), names[step.tasklet.name], 1)


# a shared term's symbol: SHARED_TERM<n>, printed as <tasklet>_tmp<n>
SHARED_TERM = "\x01shared"


@functools.lru_cache(maxsize=8192)
def _shared_terms(exprs: tuple) -> tuple[tuple, tuple]:
    """``sympy.cse`` of a tasklet's outputs, reciprocals left in place: a value
    recomputed where it is compared with a stored one (a max's gradient tests
    ``x / d == max``) must round as where it was stored, and ``x * (1 / d)``,
    with ``1 / d`` shared with the derivative's terms, differs from ``x / d`` in
    the last bit (fuzz seed 920071: the gradient of the maximum went to no
    element).  Cached: an unrolled loop's tasklets repeat a few bodies (their
    connectors, not their names, are the symbols), and cse rebuilds every node
    above a shared term, clamped indices and guarded terms slowly."""
    temps, exprs = sympy.cse(list(exprs), symbols=sympy.numbered_symbols(SHARED_TERM))
    back: dict = {}
    kept = []
    for sym, expr in temps:
        expr = expr.xreplace(back)
        if isinstance(expr, sympy.Pow) and expr.exp == -1:
            back[sym] = expr
        else:
            kept.append((sym, expr))
    return tuple(kept), tuple(sympy.sympify(e).xreplace(back) for e in exprs)


def _digit(var: str, stride: int, n: int, outermost: bool) -> str:
    """One coordinate of a row-major linear index (the outermost needs no modulo)."""
    quotient = f"{var} / {stride}" if stride > 1 else var
    return quotient if outermost else f"({quotient}) % {n}" if stride > 1 else f"{var} % {n}"


# a value's bits, to compare in a compare-and-swap loop (a NaN never equals itself)
_BITS = {"float": "asuint", "int": ""}


def _check_atomic(target: targets.Target, storage: str, op: str, t: Tasklet) -> None:
    """Refuse colliding updates ``target`` has no exact form for: a double max,
    min or product needs a 64-bit float compare-and-swap, which Slang lacks."""
    if target.concurrent_updates and storage == "double" and op != "sum":
        where = f" ({t.source})" if t.source else ""
        raise LoweringError(f"tasklet {t.name}{where}: several threads update one float64 element with "
                            f"{op} on {target.name}, which has no 64-bit float compare-and-swap; "
                            "use float32, or device='cpu'")


def _atomic_helper(storage: str, op: str, target: targets.Target) -> str:
    """``atomic_<op>(buf, i, v)``: ``buf[i] = buf[i] <op> v`` where threads may
    update one element together, in the one form ``target`` needs (decided
    here, never by the Slang compiler): a plain update where threads run one
    after another; the hardware atomic for sums (and integer max/min) where
    the target has one; else a compare-and-swap loop, which is also how float
    max/min get numpy's NaN propagation (hardware float atomic max/min drop
    NaNs, and CUDA has none).  Max and min return early when the element
    already wins: they only move one way, so a stale read decides that safely."""
    update = COMBINE[op].format(a="old", b="v")
    if target.sequential:
        body = [f"buf[i] = {COMBINE[op].format(a='buf[i]', b='v')};"]
    elif op == "sum" and (storage == "int" or target.float_atomic_add):
        body = ["InterlockedAdd(buf[i], v);"]
    elif op in ("max", "min") and storage == "int":
        body = [f"Interlocked{op.title()}(buf[i], v);"]
    else:
        bits = _BITS[storage]
        swap = "InterlockedCompareExchange" if storage == "int" else "InterlockedCompareExchangeFloatBitwise"
        body = [f"{storage} old = buf[i];", "for (;;)", "{", f"    {storage} updated = {update};"]
        if op in ("max", "min"):
            body.append(f"    if ({bits}(updated) == {bits}(old)) break;")
        body += [f"    {storage} seen;", f"    {swap}(buf[i], old, updated, seen);",
                 f"    if ({bits}(seen) == {bits}(old)) break;", "    old = seen;  // another thread came first", "}"]
    lines = "".join(f"    {line}\n" for line in body)
    return f"void atomic_{op}(RWStructuredBuffer<{storage}> buf, int i, {storage} v)\n{{\n{lines}}}"


def _params(buffers: dict[str, str], g: DataflowGraph) -> list[str]:
    return [f"RWStructuredBuffer<{_storage(g, a)}> {n}" for n, a in sorted(buffers.items())]


def _storage(g: DataflowGraph, access: str) -> str:
    """Slang element type of a parameter's buffer (the bounds flag holds ints)."""
    return "int" if access == FLAG else STORAGE_TYPES[g.containers[g.node(access).container].dtype]


def _comment(kernel: Kernel, w: "_KernelWriter", kind: str) -> str:
    """The comment opening a kernel's text: its tasklets, points and thread layout
    (a finish: the one-point kernel its dispatch's last workgroup runs)."""
    described = ", ".join(s.tasklet.name + (f" ({s.tasklet.source})" if s.tasklet.source else "")
                          + (f" summing also {', '.join(s.tasklet.meta['siblings'])}" if s.tasklet.meta.get("siblings")
                             else "")  # lowering.sibling_reductions
                          for s in kernel.steps)
    then = (f"\n//   then, in the last workgroup to finish, {identifier(kernel.finish.name)}'s "
            f"{len(kernel.finish.steps)} tasklet(s) (lowering.last_workgroup)" if kernel.finish else "")
    return (f"// {kind} {identifier(kernel.name)}: {len(kernel.steps)} tasklet(s), {w.threads} "
            + (f"point(s), {w.layout.points} a workgroup of {WORKGROUP} threads, {w.layout.lanes} sharing "
               "each point's loops" if w.layout else "thread(s)")
            + f" over {list(kernel.box)}" + (f" in tiles of {list(w.tiling.tile)}" if w.tiling else "")
            + f"\n//   {described}{then}")


def _host_entry(plan: Plan, kernel: HostKernel) -> KernelEntry:
    """The launch of a product the host computes: no Slang, its operands' buffers
    bound at its place in the call (so their lifetimes span it), and whether it
    adds into its output (another writer shares the version) or overwrites it."""
    (write,) = kernel.steps[0].writes
    product = kernel.product.placed(plan.buffer_of, write.mode != "store")
    accesses = product.accesses
    return KernelEntry(identifier(kernel.name), 0, 0, {buffer_name(a): a for a in accesses}, host=product)


def _host_comment(kernel: HostKernel, product: HostProduct) -> str:
    """What stands in the module for a product the host computes."""
    (step,) = kernel.steps
    t = step.tasklet
    def element(o) -> str:
        return f"{buffer_name(o.access)}[{o.index}]"
    extents = ", ".join(f"{s} < {e - b}" for s, b, e in product.ranges)
    return (f"// kernel {identifier(kernel.name)}: computed on the host, numpy.matmul (BLAS) between launches "
            f"(lowering.host_products)\n//   {t.name}" + (f" ({t.source})" if t.source else "")
            + f": {element(product.out)} {'+' if product.accumulate else ''}= sum over {product.k} of "
            f"{element(product.a)} * {element(product.b)}" + (f" * {product.coeff:g}" if product.coeff != 1 else "")
            + f", {extents}")


def _kernel_text(name: str, comment: str, params: list[str], body: str, entry: bool = True,
                 constants: list[str] = ()) -> str:
    """A kernel as a function of the thread id, plus (``entry``) its own entry
    point; ``constants``: int parameters after the buffers (lowering.shared_code)."""
    args = [p.split()[-1] for p in params] + list(constants)
    typed = "".join(", " + p for p in params)
    function = (f"{comment}\nvoid {name}(uint3 tid{typed}{''.join(f', int {c}' for c in constants)})"
                f"\n{{\n{body}\n}}")
    if not entry:
        return function
    return (f"{function}\n\n"
            f"[shader(\"compute\")]\n[numthreads({GROUP_SIZE}, 1, 1)]\n"
            f"void {name}_main(uint3 tid: SV_DispatchThreadID{typed}{''.join(f', uniform int {c}' for c in constants)})\n"
            f"{{\n    {name}(tid{''.join(', ' + a for a in args)});\n}}")


def _fill_kernel(plan: Plan, access: str, identity: float, device: str) -> tuple[str, KernelEntry]:
    """A kernel setting a version to its accumulation's identity (zeros are
    cleared by the runtime without a kernel)."""
    g = plan.graph
    dtype = g.containers[g.node(access).container].dtype
    count = math.prod(int(d) for d in g.containers[g.node(access).container].shape)
    value = SlangPrinter(SLANG_TYPES[dtype] if dtype != "int32" else "int").literal(
        identity if dtype != "int32" or math.isfinite(identity) else (-2**31 if identity < 0 else 2**31 - 1))
    buf = buffer_name(access)
    mapping = Threads.for_device(count, device)
    lines = mapping.open("i") + [("    " if mapping.close() else "") + f"{buf}[i] = {value};"] + mapping.close()
    body = "\n".join("    " + line for line in lines)
    name = f"fill_{buf}"
    text = _kernel_text(name, f"// fill {buf} with the identity of its accumulation",
                        _params({buf: access}, g), body)
    return text, KernelEntry(name, 0, count, {buf: access}, mapping.per_thread, independent=True, work=count)


def _program(entries: list[KernelEntry], g: DataflowGraph, target: targets.Target) -> tuple[str, dict[str, str]]:
    """The CPU device's one entry point: it runs kernels ``first`` to
    ``last - 1`` in dispatch order, each over all of its threads, in a single
    dispatch of one thread.  slangpy's CPU device runs a dispatch's threads on
    the calling thread, and binding a dispatch's buffers costs ~3 us each
    there, so one dispatch per call instead of one per kernel saves
    (kernels - 1) bindings of every buffer; one entry point also means one g++
    run per program.  A kernel whose points are independent and whose work is
    worth it is split over up to ``workers`` C++ threads (``lowering.threads``),
    the others run on the calling thread, through their function's runner."""
    buffers = {buffer_name(a): a for e in entries for a in e.buffers.values()}
    params = _params(buffers, g)
    parts, calls = {}, []
    wrapped: dict[str, list[tuple[int, int]]] = {}  # function -> dispatched shapes with worker wrappers
    runners: dict[str, str] = {}  # function -> its runner over a dispatch's threads
    for e in entries:
        if e.threads == 0:
            continue
        x, y, _ = e.thread_count
        cap = worker_cap(e.work, x * y) if e.independent and target.worker_threads else 1
        args = e.arguments()
        typed = _params(e.buffers, g) + [f"int {c}" for c in e.constants]  # its function's parameters
        if cap > 1:  # wrappers per function and dispatched shape: kernels sharing code may differ in shape
            shapes = wrapped.setdefault(e.function, [])
            if (x, y) not in shapes:
                shapes.append((x, y))
            prefix = e.function if shapes.index((x, y)) == 0 else f"{e.function}_{x}x{y}"
            parts[prefix], loop = parallel_kernel(e.function, typed, (x, y), cap, args, prefix)
        else:
            if e.function not in runners:
                runners[e.function] = _threads_runner(e.function, typed)
            loop = f"{e.function}_threads({x}, {y}{''.join(', ' + a for a in args)});"
        workers = f", on up to {cap} workers" if cap > 1 else ""
        calls.append(f"    if (dispatched({e.index}, first, last))  // {e.threads} point(s) in {x * y} "
                     f"thread(s){workers}\n        {loop}")
    text = (f"// Runs kernels first..last-1 of the program in order, each over all of its threads:\n"
            f"// dispatched once per call with a single thread on the CPU device.\n"
            f"[shader(\"compute\")]\n[numthreads(1, 1, 1)]\n"
            f"void {PROGRAM}(uniform int first, uniform int last, uniform int workers"
            f"{''.join(', ' + p for p in params)})\n{{\n" + "\n".join(calls) + "\n}")
    return "\n".join([DISPATCHED] + list(runners.values()) + list(parts.values()) + [text]), buffers


# Whether kernel k is in the program entry's range.  A function, and each kernel's thread
# loops in its function's runner (``_threads_runner``), not in the entry: Slang's front end
# took 0.45 s on ludcmp's 199 loops in one function, 0.12 s on calls (and g++ -O0 less).
DISPATCHED = "bool dispatched(int k, int first, int last)\n{\n    return first <= k && k < last;\n}"


def _threads_runner(function: str, params: list[str]) -> str:
    """``<function>_threads(width, height, ...)``: the function over every thread of
    a ``width`` x ``height`` dispatch, x fastest, as a GPU runs its thread ids."""
    args = "".join(", " + p.split()[-1] for p in params)
    return (f"void {function}_threads(int width, int height{''.join(', ' + p for p in params)})\n{{\n"
            f"    for (int y = 0; y < height; y++)\n"
            f"        for (int x = 0; x < width; x++)\n"
            f"            {function}(uint3(x, y, 0){args});\n}}")


def _scratch(acc_type: str) -> str:
    """The groupshared array a workgroup combines ``acc_type`` partial results in."""
    return f"groupshared {acc_type} workgroup_{acc_type}[{WORKGROUP}];"


def generate(plan: Plan, device: "str | targets.Target" = "vulkan") -> Module:
    """The Slang module for a plan on one device kind (a ``lowering.targets``
    name or ``Target``; the kind decides matmul tiles, point loops, the form
    of colliding updates and the maths helpers, and no device is needed): a
    function and entry point per kernel (fill kernels first, in dispatch
    order) and, for a sequential target, the program entry running them all."""
    g = plan.graph
    target = targets.of(device)
    atomics: set = set()
    shared: set = set()
    guards = IndexGuards(g)
    parts, entries = [], []
    for access, identity in plan.fills.items():
        if identity != 0:
            text, entry = _fill_kernel(plan, access, identity, device)
            parts.append(text)
            entries.append(entry)
    written: dict[str, tuple[int, str, dict[str, str], str]] = {}  # kernel -> (place in parts, comment, buffers, body)
    names, codes = [], []
    for kernel in plan.kernels:
        if isinstance(kernel, HostKernel):
            entry = _host_entry(plan, kernel)
            parts.append(_host_comment(kernel, entry.host))
            entries.append(entry)
            continue
        if kernel.finish is not None:  # a function the last workgroup of ``kernel`` calls
            finish = _KernelWriter(plan, kernel.finish, atomics, device, guards, shared)
            text = finish.write()
            parts.append(_kernel_text(identifier(kernel.finish.name), _comment(kernel.finish, finish, "finish"),
                                      _params(finish.buffers, g), text, entry=False))
        w = (_RowKernelWriter if isinstance(kernel, RowKernel) else _KernelWriter)(plan, kernel, atomics, device,
                                                                                   guards, shared)
        body = w.write()
        if kernel.finish is not None:
            body += "\n" + w.last_workgroup(identifier(kernel.finish.name), finish.buffers, kernel.counter)
        name = identifier(kernel.name)
        loops = max((math.prod(extent(r) for r in s.loop) for s in kernel.steps), default=1)
        entries.append(KernelEntry(name, 0, w.threads, dict(w.buffers), w.mapping.per_thread,
                                   w.layout.threads(w.threads) if w.layout else 0,
                                   independent=not w.colliding and FLAG not in w.buffers,
                                   work=kernel.threads * max(1, loops)))
        names.append(name)
        if kernel.finish is not None:  # its text names its finish: never shared
            codes.append(KernelCode((name,), [], list(w.buffers), False))
        else:
            codes.append(kernel_code(body, list(w.buffers), [identifier(s.tasklet.name) for s in kernel.steps],
                                     tuple(_storage(g, a) for a in w.buffers.values()), entries[-1].work))
        written[name] = (len(parts), _comment(kernel, w, "kernel"), dict(w.buffers), body)
        parts.append("")
    runs, lifted, also = share(names, codes)
    by_name = {e.name: e for e in entries}
    for name, run in zip(names, runs):  # a kernel runs its text's function with its own buffers and constants
        entry = by_name[name]
        entry.buffers = {param: entry.buffers[own] for param, own in run.bound.items()}
        entry.function, entry.constants = run.function, run.constants
    for function, positions in lifted.items():
        place, comment, buffers, body = written[function]
        if function in also:
            comment += f"\n{SHARED_BY}{', '.join(also[function])} (lowering.shared_code)"
        if positions:
            comment += (f"\n//   {', '.join(positions.values())}: constants that differ between them, "
                        "passed by each")
        parts[place] = _kernel_text(function, comment, _params(buffers, g), lift(body, positions),
                                    constants=list(positions.values()))
    parts = [part for part in parts if part]
    for n, entry in enumerate(entries):
        entry.index = n
    buffers: dict[str, str] = {}
    if target.sequential:
        program, buffers = _program(entries, g, target)
        parts.append(program)
    header = [f"// symdiff: program {g.name!r}, {len(plan.kernels)} kernel(s)", prelude(target)]
    header += [_atomic_helper(s, op, target) for s, op in sorted(atomics)] + ([helper(target)] if guards.checks else [])
    header += [_scratch(t) for t in sorted(shared)]
    if any(k.finish for k in plan.kernels):
        header.append(f"groupshared int {LAST};  // this workgroup finished last (lowering.last_workgroup)")
    return Module("\n\n".join(header + parts) + "\n", entries, buffers, guards.checks)
