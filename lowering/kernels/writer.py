"""What every kernel form shares: the kernel's shape, and the writer that
emits its Slang.

``KernelShape`` is what a form's predicate looks at (the plan's kernel, the
target's capabilities, the matmul tiling and workgroup layout found for it,
how its points map to threads); ``KernelWriter`` adds the text being
written and what every form emits through it: Slang names of graph names,
loads (hoisted where they are the same at every point), the steps' bodies
after ``sympy.cse``, stores, accumulators and comments.  The forms
(``lowering.kernels.registry``) decide the code's structure and call back
into the writer for these; the writer asks its chosen forms (``Forms``) at
the few places where a form changes a shared piece: a reduction's loop, the
thread's entry, a store's conditions, a colliding update.

The text is meant to be read by a person debugging a program: each kernel
opens with a comment naming its tasklets and their source lines, each
tasklet keeps its own block with locals prefixed by the tasklet name (fused
tasklets share one scope, so a produced value can be passed on in a
register).  Buffers are flat ``RWStructuredBuffer``s, one per stored
version; strides are compile-time constants because a module is generated
per size binding.
"""
from __future__ import annotations

import functools
import math
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable, Hashable, Sequence

import sympy

from symdiff.ir.graph import STORAGE_FLOATS, DataflowGraph, Memlet, Tasklet
from symdiff.ir import tasklet_notes as notes
from symdiff.ir.index_analysis import extent

from ..bounds_check import FLAG, IndexGuards
from .. import targets
from ..matmul import tiling
from ..plan_types import Kernel, LoweringError, Plan, Step, Write
from ..printer import SLANG_TYPES, SlangPrinter, is_index_valued, print_flat_index
from ..threads import Threads
from ..workgroups import layout


# Slang type of a buffer element: bools travel as ints (structured buffers of
# bool are not portable), 16-bit floats as their bits (``ir.storage``).
STORAGE_TYPES = {"float32": "float", "float64": "double", "int32": "int", "bool": "int", "float16": "uint16_t",
                 "bfloat16": "uint16_t"}
# How an element read becomes a value (``SLANG_TYPES``), and a value the element stored.
LOADED = {"bool": "({} != 0)", "float16": "f16_value({})", "bfloat16": "bf16_value({})"}
STORED = {"bool": "({} ? 1 : 0)", "float16": "f16_bits({})", "bfloat16": "bf16_bits({})"}
# (a folded producer makes b an expression: a product needs it parenthesised;
# maximum/minimum are the printer's NaN-propagating helpers, as np.maximum)
COMBINE = {"sum": "{a} + {b}", "prod": "{a} * ({b})", "max": "maximum({a}, {b})", "min": "minimum({a}, {b})"}
# float32 sums accumulate in double and round once at the end (the summation
# order, and why, in docs/design.md "Summation and accuracy"): a float32
# accumulator loses ~sqrt(n) ulps over a loop of n points, and a gradient such
# as log-sum-exp's w.r.t. the max (1 - sum(softmax)) needs the sums correctly
# rounded to cancel as they do in JAX.  Every target adds doubles exactly
# (Kahan's compensation in float32 is folded away on Vulkan: measured on lavapipe).
WIDE_ACCUMULATORS = {("sum", "float"): "double"}


def wide_type(op: str, own: str) -> str:
    """The type an in-thread ``op`` reduction of ``own`` values accumulates in (``WIDE_ACCUMULATORS``)."""
    return WIDE_ACCUMULATORS.get((op, own), own)


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


# A second parameter over the same buffer, read four elements (16 bytes of float32) at a
# time (``KernelWriter.quad_buffer``); buffer names end in ``_v<version>``, never in this.
QUADS = "_x4"


def element_type(name: str, storage: str) -> str:
    """The elements of parameter ``name`` over a buffer of ``storage`` (a ``QUADS`` view: 4-vectors of them)."""
    return f"{storage}4" if name.endswith(QUADS) else storage


def buffer_parameter(name: str, storage: str) -> str:
    """A kernel's parameter declaration for buffer ``name`` of ``storage`` elements."""
    return f"RWStructuredBuffer<{element_type(name, storage)}> {name}"


def precision_of(graph: DataflowGraph, tasklet: Tasklet) -> str:
    """double when the tasklet touches any float64 container, else float."""
    touched = [m.container for _, m in graph.reads(tasklet.name) + graph.writes(tasklet.name)]
    return "double" if any(graph.containers[c].dtype == "float64" for c in touched) else "float"


def tasklet_comment(t: Tasklet) -> str:
    """The comment opening a tasklet's block: its name and source line."""
    return f"// tasklet {t.name}" + (f" ({t.source})" if t.source else "")


def digit(var: str, stride: int, n: int, outermost: bool) -> str:
    """One coordinate of a row-major linear index (the outermost needs no modulo)."""
    quotient = f"{var} / {stride}" if stride > 1 else var
    return quotient if outermost else f"({quotient}) % {n}" if stride > 1 else f"{var} % {n}"


class KernelShape:
    """What decides a kernel's form: the planned kernel, the target, the
    register tiling of a matmul step (``lowering.matmul``), the workgroup
    layout of its loops (``lowering.workgroups``) and the thread mapping of
    its points (``lowering.threads``); and the graph's facts about each
    step's outputs.  Found once per kernel."""

    def __init__(self, plan: Plan, kernel: Kernel, target: targets.Target):
        self.g = plan.graph
        self.plan = plan
        self.kernel = kernel
        self.target = target
        self.tiling = tiling(plan.graph, kernel, target)
        self.threads = self.tiling.threads if self.tiling else kernel.threads
        # lanes of a workgroup sharing each point's loops (lowering.workgroups), or None
        self.layout = layout(plan.graph, kernel, target, self.tiling is not None)
        self.mapping = Threads.for_device(self.layout.threads(self.threads) if self.layout else self.threads,
                                          target)

    def outputs(self, t: Tasklet) -> dict[str, str]:
        """The local holding each output connector's value."""
        return {c: f"{identifier(t.name)}_{identifier(c)}" for c in t.body}

    def out_type(self, t: Tasklet, conn: str) -> str:
        m = next((m for _, m in self.g.writes(t.name) if m.connector == conn), None)
        return SLANG_TYPES[self.g.containers[m.container].dtype] if m else precision_of(self.g, t)

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


# A form's place in a kernel: which part of the code it writes (``Forms``).
BODY, LOOP, FINISH, UPDATE = "body", "loop", "finish", "update"
# What a form's module-level code is (``KernelForm.declares``): helper functions, or
# groupshared variables.  A module holds the functions first, then the bounds check's
# helper, then the variables (``codegen.generate``).
FUNCTION, GROUPSHARED = "function", "groupshared"


class KernelForm(ABC):
    """One form of kernel code, a module of ``lowering.kernels``: its
    ``name``, the part of a kernel it writes (``part``), and where it
    applies (``applies``).  ``registry.FORMS`` lists the forms in priority
    order; a kernel takes, for each part, the first form that applies."""

    name: str = ""
    part: str = ""
    declares: str = ""  # FUNCTION or GROUPSHARED where the form has module-level code (``declaration``)

    @abstractmethod
    def applies(self, shape: KernelShape) -> bool:
        """Whether this form can write its part of a kernel of this shape on its target."""

    def declaration(self, key: Hashable, target: targets.Target) -> str:
        """The module-level code (a helper function, a groupshared array) that
        ``key`` stands for: a kernel written in this form asked for it with
        ``KernelWriter.declare(self, key)``, and the module holds it once, outside
        its kernels, whatever the number of kernels asking (``Declarations``).  A
        form that declares something says what kind of code it is (``declares``)."""
        raise NotImplementedError(f"kernel form {self.name!r} declares no module-level code")


class BodyForm(KernelForm):
    """How the kernel's threads cover its box and run its steps."""

    part = BODY

    @abstractmethod
    def write(self, w: "KernelWriter") -> None:
        """The kernel's code, through ``w``."""


class LoopForm(KernelForm):
    """How the points of a reduction's loop are shared out: who runs them
    and how partial results are combined."""

    part = LOOP
    thread = "lin"  # the variable ``Threads.open`` gives the thread's point (or its global thread) in

    def enter(self, w: "KernelWriter") -> None:
        """Lines after the thread's point is known: the thread's own coordinates in the form."""

    @abstractmethod
    def loop(self, w: "KernelWriter", reducing: list[Step], length: int,
             point: Callable[[int, str | None], None], storing: bool) -> None:
        """A loop over ``length`` points, ``r`` the point, in which the
        ``reducing`` steps accumulate (``point(depth, lane)`` emits one
        point's code, adding into element ``lane`` of the accumulators'
        lanes if given); ``storing``: other steps of the loop store values."""

    def store_conditions(self, w: "KernelWriter") -> list[str]:
        """Conditions a thread's store needs besides the index's range."""
        return []


class FinishForm(KernelForm):
    """What runs after the kernel's own steps, in the same dispatch."""

    part = FINISH

    @abstractmethod
    def tail(self, w: "KernelWriter", finish: str, buffers: dict[str, str], counter: str) -> str:
        """The lines ending the kernel: ``finish`` (the function of the
        kernel's ``finish``, over ``buffers``) run once, ``counter`` the
        access node of a one-element int buffer the runtime clears."""


class UpdateForm(KernelForm):
    """How a write whose elements several points update (mode ``"atomic"``) is emitted."""

    part = UPDATE

    @abstractmethod
    def update(self, w: "KernelWriter", step: Step, write: Write, buf: str, idx: str, value: str,
               depth: int) -> None:
        """``buf[idx] = buf[idx] <op> value`` for ``write``, safe where points collide."""


class Declarations:
    """The module-level code a module's kernels asked their forms for
    (``KernelWriter.declare``), each once: the keys each form was given."""

    def __init__(self) -> None:
        self.keys: dict[KernelForm, set] = {}

    def add(self, form: KernelForm, key: Hashable) -> None:
        self.keys.setdefault(form, set()).add(key)

    def texts(self, forms: Sequence[KernelForm], kind: str, target: targets.Target) -> list[str]:
        """The declarations of ``kind`` (``FUNCTION``, ``GROUPSHARED``) asked for,
        form by form in the order of ``forms``, each form's in the order of its keys."""
        return [form.declaration(key, target) for form in forms if form.declares == kind
                for key in sorted(self.keys.get(form, ()))]


@dataclass(frozen=True)
class Forms:
    """The forms a kernel is written in, one per part (none for an absent finish or update)."""

    body: BodyForm
    loop: LoopForm
    finish: FinishForm | None = None
    update: UpdateForm | None = None


class KernelWriter(KernelShape):
    """The text of one kernel, written in the forms ``choose`` picks for its shape."""

    def __init__(self, plan: Plan, kernel: Kernel, target: targets.Target, choose: Callable[[KernelShape], Forms],
                 guards: IndexGuards, declared: Declarations):
        super().__init__(plan, kernel, target)
        self.forms = choose(self)
        self.guards = guards
        self.declared = declared  # the module-level code the module's kernels need (``declare``)
        self.lines: list[str] = []
        self.buffers: dict[str, str] = {}
        # loads of one fixed element (a seed, a scalar parameter): load text -> local
        self.invariant_loads: dict[tuple[str, str], str] = {}
        # loads the same at every point of the loop being written: load text -> local
        self.loop_invariant: dict[str, str] = {}
        self.loop_invariant_count = 0  # locals named so far in this kernel
        self.written = {w.memlet.container for step in kernel.steps for w in step.writes}
        self.per_lane = False  # emitting a loop body whose points are the current lane's own
        self.kept = "[loop] " if target.keep_loops else ""  # prefix of the long loops (targets.keep_loops)
        self.indent = 0  # extra depth of the point loop and of the per-output loop of a tiled kernel
        self.colliding = False  # some point updates an element other points update too (atomic_<op>)

    def write(self) -> str:
        """The kernel's body: its forms' code, after the loads hoisted to its top."""
        self.forms.body.write(self)
        return self.text()

    def declare(self, form: KernelForm, key: Hashable) -> None:
        """This kernel needs ``form``'s module-level code for ``key`` (``KernelForm.declaration``)."""
        self.declared.add(form, key)

    def emit(self, line: str, depth: int) -> None:
        self.lines.append("    " * (depth + self.indent) + line)

    def buffer(self, access: str) -> str:
        held = self.plan.buffer_of(access)  # an in-place version: its older version's buffer
        name = buffer_name(held)
        self.buffers[name] = held
        return name

    def quad_buffer(self, access: str) -> str:
        """A parameter bound to ``access``'s buffer whose element ``q`` is the
        4-vector of its elements ``4q .. 4q+3``: one 16-byte load where the
        caller knows ``4q`` is the start of four elements it wants."""
        name = self.buffer(access) + QUADS
        self.buffers[name] = self.plan.buffer_of(access)
        return name

    def flat_index(self, memlet: Memlet, names: dict) -> str:
        shape = self.g.containers[memlet.container].shape
        if not shape:
            return "0"
        strides = [math.prod(int(d) for d in shape[k + 1:]) for k in range(len(shape))]
        return print_flat_index(memlet.index, strides, names)

    def text(self) -> str:
        """The kernel's lines, after the loads hoisted to its top (``invariant_load``)."""
        hoisted = [f"    {stype} {name} = {load};" for (stype, load), name in self.invariant_loads.items()]
        return "\n".join(hoisted + self.lines)

    def frame(self, grid: tuple, coord: str, body: Callable[[], None]) -> None:
        """The thread's points (``lowering.threads``), each one's coordinates
        ``<coord>0``, ``<coord>1``... over ``grid``, and ``body`` for each."""
        strides = [math.prod(grid[a + 1:]) for a in range(len(grid))]
        per = self.mapping.per_thread
        several = not self.layout and len(grid) > 1 and per > 1  # a CPU thread's points: g++ vectorises their loop
        if several and grid[-1] % per and grid[-1] >= self.target.tuning.cpu_row_loop_min:
            # points crossing rows: every coordinate but the last once a row, the last the counter of
            # a plain inner loop (Threads.open_rows), so that indices are affine in the loop
            leading = [f"int {coord}{a} = {digit('row', stride // grid[-1], n, a == 0)};"
                       for a, (n, stride) in enumerate(zip(grid[:-1], strides))]
            for line in self.mapping.open_rows(grid[-1], "row", f"{coord}{len(grid) - 1}", leading):
                self.emit(line, 1)
            self.indent += 2
            body()
            self.indent -= 2
            for line in self.mapping.close_rows():
                self.emit(line, 1)
            return
        for line in self.mapping.open(self.forms.loop.thread):
            self.emit(line, 1)
        self.forms.loop.enter(self)  # whole workgroups return together above: barriers stay uniform
        self.indent += len(self.mapping.close())
        # A thread's points within one row of the box (its point count divides the row): every
        # coordinate but the last is the thread's own, the last runs with the point, so g++ sees
        # contiguous accesses and vectorises (lin / n and lin % n per point it did not: an outer
        # product's 2048x2048 elementwise kernel, mvt's gradient of A, 3-5 -> 0.8 ms CPU time);
        # g++ compiled the elman RNN's kernels so in 0.7 s, as rows in 1.1
        in_row = several and grid[-1] % per == 0
        for a, (n, stride) in enumerate(zip(grid, strides)):
            if in_row:
                place = digit("first", stride, n, a == 0) if stride > 1 else f"first % {n} + (lin - first)"
            else:
                place = digit("lin", stride, n, a == 0)
            self.emit(f"int {coord}{a} = {place};", 1)
        body()
        self.indent -= len(self.mapping.close())
        for line in self.mapping.close():
            self.emit(line, 1)

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

    def step(self, step: Step) -> None:
        """One step at the thread's point: its point's code, or its
        reduction's loop (in the kernel's loop form) and stores."""
        t = step.tasklet
        p = identifier(t.name)
        names = self.names(step, {s: f"{p}_{identifier(s.name)}" for s, _, _ in step.parallel})
        self.emit(tasklet_comment(t), 1)
        self.parallel_names(step, names, 1)
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

    def lane_loops(self, reducing: list[Step], length: int, point: Callable[[int, str | None], None],
                   storing: bool = False) -> None:
        """A loop over ``length`` points in the kernel's loop form (``LoopForm.loop``)."""
        self.forms.loop.loop(self, reducing, length, point, storing)

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
            place = digit("r", stride, extent((s, b, e)), s == wide[0][0])
            self.emit(f"int {names[s]} = {f'{int(b)} + ' if int(b) else ''}{place};", depth)

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
        if notes.scatter(t) is not None:  # an owner-computes loop checks the indices of the scatter it replaces
            self.guards.guard(self, t, notes.scatter(t), names, inner, write=True)
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
                    value = LOADED.get(dtype, "{}").format(self.load(step.tasklet, r, names, depth))
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

    def operand_type(self, read) -> str:
        """The type a product's operand is computed in (``SLANG_TYPES``: float for 16-bit floats)."""
        return SLANG_TYPES[self.g.containers[read.memlet.container].dtype]

    def element(self, read, flat: str) -> str:
        """Element ``flat`` of ``read``'s buffer as the value it holds (``LOADED``), unguarded:
        the loads of the product forms, whose indices stay in their boxes."""
        return LOADED.get(self.g.containers[read.memlet.container].dtype, "{}").format(
            f"{self.buffer(read.access)}[{flat}]")

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
            if dtype in STORAGE_FLOATS and w.mode != "store":  # ir.storage writes them by plain copies only
                raise LoweringError(f"tasklet {step.tasklet.name!r} updates 16-bit {w.memlet.container!r} in place "
                                    f"({w.mode}): 16-bit arrays are computed on in float32 (ir.storage)")
            value = STORED.get(dtype, "{}").format(outputs[w.memlet.connector])
            buf = self.buffer(w.access)
            idx = self.flat_index(w.memlet, names)
            ok = self.guards.guard(self, step.tasklet, w.memlet, names, depth, write=True)
            # a data-dependent index out of range drops the write (lowering.bounds_check);
            # the loop form may keep other threads from storing (a workgroup's lanes)
            conditions = [c for c in (ok, *self.forms.loop.store_conditions(self)) if c]
            if conditions:
                self.emit(f"if ({' && '.join(conditions)})", depth)
            d = depth + bool(conditions)
            if w.mode == "store":
                self.emit(f"{buf}[{idx}] = {value};", d)
            elif w.mode == "combine":
                self.emit(f"{buf}[{idx}] = {COMBINE[w.memlet.accumulate].format(a=f'{buf}[{idx}]', b=value)};", d)
            else:
                self.forms.update.update(self, step, w, buf, idx, value, d)

    def comment(self, kind: str) -> str:
        """The comment opening a kernel's text: its tasklets, points and thread layout
        (a finish: the one-point kernel its dispatch's last workgroup runs)."""
        kernel = self.kernel
        described = ", ".join(s.tasklet.name + (f" ({s.tasklet.source})" if s.tasklet.source else "")
                              + (f" summing also {', '.join(notes.siblings(s.tasklet))}"
                                 if notes.siblings(s.tasklet) else "")  # lowering.sibling_reductions
                              for s in kernel.steps)
        then = (f"\n//   then, in the last workgroup to finish, {identifier(kernel.finish.name)}'s "
                f"{len(kernel.finish.steps)} tasklet(s) (lowering.last_workgroup)" if kernel.finish else "")
        return (f"// {kind} {identifier(kernel.name)}: {len(kernel.steps)} tasklet(s), {self.threads} "
                + (f"point(s), {self.layout.points} a workgroup of {self.layout.size} threads, {self.layout.lanes} "
                   "sharing each point's loops" if self.layout else "thread(s)")
                + f" over {list(kernel.box)}" + (f" in tiles of {list(self.tiling.tile)}" if self.tiling else "")
                + f"\n//   {described}{then}")


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
