"""Slang module generation: one module per planned program, one entry point per kernel.

The kernels' own text comes from ``lowering.kernels`` (each form of kernel a
module, chosen per kernel in the priority order of ``kernels.registry``);
this module assembles them into a module: fill kernels, the functions and
entry points of the kernels (their code shared between kernels of the same
text, ``lowering.shared_code``), what stands for a product the host computes,
the helpers the kernels need (those of a kernel form are the form's own
``declaration``s, collected here), and on a sequential target the program
entry running them all in one dispatch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from symdiff.ir.graph import DataflowGraph
from symdiff.ir.index_analysis import extent

from .bounds_check import FLAG, IndexCheck, IndexGuards, helper
from . import blas_calls, compiler_cache, host_blas, targets
from .host_products import Gemms, HostProduct
from .kernels import registry
from .kernels.writer import (FUNCTION, GROUPSHARED, STORAGE_TYPES, Declarations, buffer_name, buffer_parameter,
                             element_type, identifier)
from .plan_types import HostKernel, Plan
from .printer import SLANG_TYPES, SlangPrinter, prelude
from .shared_code import SHARED_BY, KernelCode, kernel_code, lift, share
from .threads import Threads, parallel_kernel, worker_cap


PROGRAM = "run_program"  # the CPU device's only entry point


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
    # or by the program entry, through numpy's OpenBLAS (lowering.blas_calls): the product and its GEMMs
    gemm: tuple[HostProduct, Gemms] | None = None

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



def _params(buffers: dict[str, str], g: DataflowGraph) -> list[str]:
    return [buffer_parameter(n, _storage(g, a)) for n, a in sorted(buffers.items())]


def _storage(g: DataflowGraph, access: str) -> str:
    """Slang element type of a parameter's buffer (the bounds flag holds ints)."""
    return "int" if access == FLAG else STORAGE_TYPES[g.containers[g.node(access).container].dtype]




def _host_entry(plan: Plan, kernel: HostKernel, target: targets.Target) -> KernelEntry:
    """The launch of a product the host computes, its operands' buffers bound at
    its place in the call (so their lifetimes span it), and whether it adds
    into its output (another writer shares the version) or overwrites it: on a
    sequential target where numpy's OpenBLAS is found and its views are
    matrices BLAS reads as they are, GEMM calls in the program entry
    (``lowering.blas_calls``), else no Slang but a launch of its own."""
    (write,) = kernel.steps[0].writes
    product = kernel.product.placed(plan.buffer_of, write.mode != "store")
    buffers = {buffer_name(a): a for a in product.accesses}
    gemms = product.gemms() if target.sequential and host_blas.library() is not None else None
    if gemms is not None:
        return KernelEntry(identifier(kernel.name), 0, 1, buffers, gemm=(product, gemms))
    return KernelEntry(identifier(kernel.name), 0, 0, buffers, host=product)


def _host_comment(kernel: HostKernel, product: HostProduct, in_program: bool) -> str:
    """What stands in the module for a product the host computes (``in_program``:
    by GEMM calls in the program entry)."""
    (step,) = kernel.steps
    t = step.tasklet
    def element(o) -> str:
        return f"{buffer_name(o.access)}[{o.index}]"
    extents = ", ".join(f"{s} < {e - b}" for s, b, e in product.ranges)
    how = ("by OpenBLAS GEMM in the program entry (lowering.blas_calls)" if in_program else
           "numpy.matmul (BLAS) between launches (lowering.host_products)")
    return (f"// kernel {identifier(kernel.name)}: computed on the host, {how}\n//   {t.name}" + (f" ({t.source})" if t.source else "")
            + f": {element(product.out)} {'+' if product.accumulate else ''}= sum over {product.k} of "
            f"{element(product.a)} * {element(product.b)}" + (f" * {product.coeff:g}" if product.coeff != 1 else "")
            + f", {extents}")


def _kernel_text(target: targets.Target, name: str, comment: str, params: list[str], body: str, entry: bool = True,
                 constants: list[str] = ()) -> str:
    """A kernel as a function of the thread id, plus (``entry``) its own entry
    point, in workgroups of the target's ``group_size``; ``constants``: int
    parameters after the buffers (lowering.shared_code)."""
    args = [p.split()[-1] for p in params] + list(constants)
    typed = "".join(", " + p for p in params)
    function = (f"{comment}\nvoid {name}(uint3 tid{typed}{''.join(f', int {c}' for c in constants)})"
                f"\n{{\n{body}\n}}")
    if not entry:
        return function
    return (f"{function}\n\n"
            f"[shader(\"compute\")]\n[numthreads({target.tuning.group_size}, 1, 1)]\n"
            f"void {name}_main(uint3 tid: SV_DispatchThreadID{typed}{''.join(f', uniform int {c}' for c in constants)})\n"
            f"{{\n    {name}(tid{''.join(', ' + a for a in args)});\n}}")


def _fill_kernel(plan: Plan, access: str, identity: float, target: targets.Target) -> tuple[str, KernelEntry]:
    """A kernel setting a version to its accumulation's identity (zeros are
    cleared by the runtime without a kernel)."""
    g = plan.graph
    dtype = g.containers[g.node(access).container].dtype
    count = math.prod(int(d) for d in g.containers[g.node(access).container].shape)
    value = SlangPrinter(SLANG_TYPES[dtype] if dtype != "int32" else "int").literal(
        identity if dtype != "int32" or math.isfinite(identity) else (-2**31 if identity < 0 else 2**31 - 1))
    buf = buffer_name(access)
    mapping = Threads.for_device(count, target)
    lines = mapping.open("i") + [("    " if mapping.close() else "") + f"{buf}[i] = {value};"] + mapping.close()
    body = "\n".join("    " + line for line in lines)
    name = f"fill_{buf}"
    text = _kernel_text(target, name, f"// fill {buf} with the identity of its accumulation",
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
        if e.gemm is not None:
            statement = blas_calls.statement(*e.gemm).replace("\n", "\n        ")
            calls.append(f"    if (dispatched({e.index}, first, last))  // a product, OpenBLAS GEMM\n        {statement}")
            continue
        x, y, _ = e.thread_count
        cap = worker_cap(e.work, x * y, target.tuning) if e.independent and target.worker_threads else 1
        args = e.arguments()
        typed = _params(e.buffers, g) + [f"int {c}" for c in e.constants]  # its function's parameters
        if cap > 1:  # wrappers per function and dispatched shape: kernels sharing code may differ in shape
            shapes = wrapped.setdefault(e.function, [])
            if (x, y) not in shapes:
                shapes.append((x, y))
            prefix = e.function if shapes.index((x, y)) == 0 else f"{e.function}_{x}x{y}"
            parts[prefix], loop = parallel_kernel(e.function, typed, (x, y), cap, args, prefix)
        else:
            runner = f"{e.function}{compiler_cache.RUNNER_INFIX}{x}x{y}"
            if runner not in runners:
                runners[runner] = _threads_runner(e.function, typed, (x, y), runner)
            loop = f"{runner}({', '.join(args)});"
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


def _threads_runner(function: str, params: list[str], dispatched: tuple[int, int], runner: str) -> str:
    """``runner(...)``: kernel function ``function`` over every thread of its
    ``dispatched`` width x height, x fastest, as a GPU runs its thread ids.  The
    counts are constants, one runner per function and shape: g++ keeps runners out
    of the entry (``compiler_cache._entry_light``) and still sees them."""
    x, y = dispatched
    args = "".join(", " + p.split()[-1] for p in params)
    return (f"void {runner}({', '.join(params)})\n{{\n"
            f"    for (int y = 0; y < {y}; y++)\n"
            f"        for (int x = 0; x < {x}; x++)\n"
            f"            {function}(uint3(x, y, 0){args});\n}}")


def generate(plan: Plan, device: "str | targets.Target" = "vulkan") -> Module:
    """The Slang module for a plan on one device kind (a ``lowering.targets``
    name or ``Target``; the kind decides matmul tiles, point loops, the form
    of colliding updates and the maths helpers, and no device is needed): a
    function and entry point per kernel (fill kernels first, in dispatch
    order) and, for a sequential target, the program entry running them all."""
    g = plan.graph
    target = targets.of(device)
    declared = Declarations()  # the module-level code the kernels' forms need
    guards = IndexGuards(g)
    parts, entries = [], []
    for access, identity in plan.fills.items():
        if identity != 0:
            text, entry = _fill_kernel(plan, access, identity, target)
            parts.append(text)
            entries.append(entry)
    written: dict[str, tuple[int, str, dict[str, str], str]] = {}  # kernel -> (place in parts, comment, buffers, body)
    names, codes = [], []
    for kernel in plan.kernels:
        if isinstance(kernel, HostKernel):
            entry = _host_entry(plan, kernel, target)
            parts.append(_host_comment(kernel, entry.host or entry.gemm[0], entry.gemm is not None))
            entries.append(entry)
            continue
        if kernel.finish is not None:  # a function the last workgroup of ``kernel`` calls
            finish = registry.writer(plan, kernel.finish, target, guards, declared)
            text = finish.write()
            parts.append(_kernel_text(target, identifier(kernel.finish.name), finish.comment("finish"),
                                      _params(finish.buffers, g), text, entry=False))
        w = registry.writer(plan, kernel, target, guards, declared)
        body = w.write()
        if w.forms.finish is not None:
            body += "\n" + w.forms.finish.tail(w, identifier(kernel.finish.name), finish.buffers, kernel.counter)
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
                                     tuple(element_type(n, _storage(g, a)) for n, a in w.buffers.items()),
                                     entries[-1].work,
                                     target.tuning.lift_max_work))
        written[name] = (len(parts), w.comment("kernel"), dict(w.buffers), body)
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
        parts[place] = _kernel_text(target, function, comment, _params(buffers, g), lift(body, positions),
                                    constants=list(positions.values()))
    parts = [part for part in parts if part]
    for n, entry in enumerate(entries):
        entry.index = n
    buffers: dict[str, str] = {}
    if target.sequential:
        program, buffers = _program(entries, g, target)
        parts.append(program)
    header = [f"// symdiff: program {g.name!r}, {len(plan.kernels)} kernel(s)", prelude(target)]
    header += registry.declarations(declared, FUNCTION, target) + ([helper(target)] if guards.checks else [])
    header += registry.declarations(declared, GROUPSHARED, target)
    gemm_dtypes = {e.gemm[0].dtype for e in entries if e.gemm is not None}
    if gemm_dtypes:
        header += blas_calls.declarations(host_blas.library(), gemm_dtypes)
    return Module("\n\n".join(header + parts) + "\n", entries, buffers, guards.checks)
