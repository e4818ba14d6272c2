"""The public front door: ``@differentiable_program`` and what it returns.

A ``DifferentiableProgram`` owns a *graph builder* (tracing a Python
function, or differentiating another program's graph) and caches, per
argument specs, the forward graph, each backward graph and each compiled
executable.  Everything user-visible (values, gradients, graphs, Slang) is
derived from those caches, so a second call with the same shapes traces,
differentiates and compiles nothing.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import sympy

from symdiff import ir
import symdiff.ir.view
from symdiff import lowering
from symdiff.ir.batch_products import batch_products
from symdiff.ir.library import has_library_nodes
from symdiff.ir.specs import ArraySpec, spec_of
from symdiff.ir.tracer.trace import array_annotations, array_parameters, clear_cache as clear_trace_cache
from symdiff.lowering import disk_cache
from symdiff.lowering.collector import fewer_collections
from symdiff.lowering.kernels import precision
from symdiff.lowering.devices import requested as requested_device
from symdiff.lowering.runtime import host_argument
from symdiff.lowering.source_view import SlangSource, kernel_headers, kernels_first, tasklet_lines

from . import loop_runtime, loops
from .derivatives import tasklet_partials
from .errors import DifferentiationError
from .explain import Explanation, explain
from .memory_budget import MemoryBudgetError, MemoryPlan, fit
from .gradcheck import check_graph_gradients

GraphBuilder = Callable[[tuple[ArraySpec, ...]], ir.DataflowGraph]


@dataclass(frozen=True)
class _Prepared:
    """What a call runs for given argument specs, shapes and options, found
    once (graphs, their notes, shapes solved by sympy, the executable) and
    kept per program (``DifferentiableProgram._prepare``): finding it again
    on every call cost ~45 us, more than a small program's kernels."""

    specs: tuple[ArraySpec, ...]
    dtypes: tuple[str, ...]  # each argument's graph dtype, what its value is converted to
    exe: Any
    results: tuple[str, ...]  # the forward graph's result containers, in output order
    seeds: tuple[tuple[str, tuple[int, ...], str], ...] = ()  # per output: seed container, its shape and dtype
    gradients: tuple[tuple[str, str], ...] = ()  # (wrt argument, gradient container), in wrt order
    ones: tuple[np.ndarray, ...] = ()  # value_and_grad's seeds: all ones, copied per call


# Derived graphs and executables are kept in ``graph.derived`` of the (tracer-cached)
# graph they come from: a second program object of the same function differentiates
# and plans nothing again, and all of it goes with the function.  (A weak-key table
# would never let go: each value refers to its key.)


class ProgramError(ValueError):
    """A call the program cannot serve; the message says what to do instead."""


class DifferentiableProgram:
    """A traced array program with forward, gradient and inspection methods."""

    def __init__(self, builder: GraphBuilder, arg_names: Sequence[str],
                 annotations: Mapping[str, ArraySpec], name: str, device: str | None = None,
                 deterministic: bool = False, check_bounds: bool = True, stencil_gathers: bool = True):
        self._builder = builder
        self.arg_names = list(arg_names)
        self._annotations = dict(annotations)
        self.name = name
        self.device = device
        self.deterministic = deterministic
        self.check_bounds = check_bounds is not False  # None (the former default) also checks
        self.stencil_gathers = stencil_gathers
        self._graphs: dict[tuple, ir.DataflowGraph] = {}
        self._backward: dict[tuple, ir.DataflowGraph] = {}
        self._memory_plans: dict[tuple, tuple[ir.DataflowGraph, MemoryPlan]] = {}  # (specs, wrt, ..., budget)
        self.memory_budget: int | None = None  # bytes (symdiff.memory_budget); a call may pass its own
        self.matmul_precision: str | None = None  # None: the global one (lowering.kernels.precision)
        self._executables: dict[tuple, Any] = {}
        self._shapes: dict[tuple, list[tuple[int, ...]]] = {}
        self._prepared: dict[tuple, _Prepared] = {}  # call kind, argument keys and options -> _Prepared
        self._last_specs: tuple[ArraySpec, ...] | None = None

    # -- specs and graphs ---------------------------------------------------------
    def _bind(self, args: Sequence, kwargs: Mapping) -> dict[str, Any]:
        if len(args) > len(self.arg_names):
            raise ProgramError(f"{self.name}() takes {len(self.arg_names)} arguments "
                               f"({', '.join(self.arg_names)}), got {len(args)}")
        bound = dict(zip(self.arg_names, args))
        for k, v in kwargs.items():
            if k not in self.arg_names:
                raise ProgramError(f"{self.name}() has no argument {k!r}; its arguments are {self.arg_names}")
            if k in bound:
                raise ProgramError(f"{self.name}() got argument {k!r} twice")
            bound[k] = v
        missing = [n for n in self.arg_names if n not in bound]
        if missing:
            raise ProgramError(f"{self.name}() is missing arguments {missing}")
        return bound

    def _specs_for(self, values: Mapping[str, Any] | None) -> tuple[ArraySpec, ...]:
        specs = []
        for n in self.arg_names:
            if n in self._annotations:
                specs.append(self._annotations[n])
            elif values is not None:
                v = values[n]
                specs.append(ArraySpec(v.dtype)[v.shape] if isinstance(v, lowering.DeviceArray) else spec_of(v))
            elif self._last_specs is not None:
                return self._last_specs
            else:
                raise ProgramError(f"argument {n!r} of {self.name} has no annotation: call the program once "
                                   f"(or annotate it, e.g. `{n}: sd.f32[16]`) before asking for its graph")
        return tuple(specs)

    def _forward_graph(self, specs: tuple[ArraySpec, ...]) -> ir.DataflowGraph:
        if specs not in self._graphs:
            with fewer_collections():
                self._graphs[specs] = self._builder(specs)
            loops.hint_unrolled(self._graphs[specs])  # many copies of one line: sd.fori_loop compiles faster
            batch_products(self._graphs[specs])  # the copies an unrolled loop makes of one product, as one
        self._last_specs = specs
        return self._graphs[specs]

    def _float_args(self, graph: ir.DataflowGraph) -> list[str]:
        return [a for a in self.arg_names if graph.containers[a].dtype in ir.FLOAT_DTYPES]

    def _resolve_wrt(self, graph: ir.DataflowGraph, wrt: Sequence[str] | str | None) -> tuple[str, ...]:
        if wrt is None:
            return tuple(self._float_args(graph))
        wrt = (wrt,) if isinstance(wrt, str) else tuple(wrt)
        for w in wrt:
            if w not in self.arg_names:
                raise ProgramError(f"wrt={w!r} is not an argument of {self.name}; its arguments are "
                                   f"{self.arg_names}")
        return wrt

    def _backward_graph(self, specs: tuple[ArraySpec, ...], wrt: tuple[str, ...],
                        accumulate: Mapping[str, str] | None = None) -> ir.DataflowGraph:
        pushed = tuple(sorted((k, v) for k, v in (accumulate or {}).items() if v != "sum"))
        key = (specs, wrt, pushed)
        if key not in self._backward:
            forward = self._forward_graph(specs)
            derived = forward.derived.setdefault("backward_graphs", {})
            options = (wrt, self.stencil_gathers, pushed)
            if options not in derived:
                def differentiate() -> ir.DataflowGraph:
                    graph = forward.copy()
                    ir.GraphNotes(graph).gradients = loop_runtime.add_backward_pass(  # sd.fori_loop: its loops too
                        graph, inputs=list(wrt), outputs=graph.results, stencil_gathers=self.stencil_gathers,
                        accumulate=dict(pushed))
                    return graph
                # another process may have differentiated this graph already (lowering.disk_cache)
                with fewer_collections():
                    derived[options] = disk_cache.cached("backward", (disk_cache.graph_key(forward), repr(options)),
                                                         differentiate)
            self._backward[key] = derived[options]
        return self._backward[key]

    def _executable(self, graph: ir.DataflowGraph, device: str | None):
        device = requested_device(device or self.device)  # SYMDIFF_DEVICE, else "auto"
        graph = precision.with_precision(graph, self.matmul_precision or precision.current())
        key = (id(graph), device)
        if key not in self._executables:
            compiled = graph.derived.setdefault("executables", {})
            if (device, self.deterministic) not in compiled:
                with fewer_collections():
                    compiled[device, self.deterministic] = loop_runtime.compile(graph, device=device,
                                                                                deterministic=self.deterministic)
            self._executables[key] = compiled[device, self.deterministic]
        return self._executables[key]

    # -- public: inspection -------------------------------------------------------
    @property
    def graph(self) -> ir.DataflowGraph:
        """The forward graph (for the annotated specs, or the last call's)."""
        return self._forward_graph(self._specs_for(None))

    def backward_graph(self, wrt: Sequence[str] | str | None = None) -> ir.DataflowGraph:
        """Forward + backward graph; its notes (``ir.GraphNotes``) map inputs to ``gradients``, outputs to ``seeds``."""
        specs = self._specs_for(None)
        return self._backward_graph(specs, self._resolve_wrt(self._forward_graph(specs), wrt))

    def slang_source(self, wrt: Sequence[str] | str | None = None, device: str | None = None,
                     forward_only: bool = False, helpers: bool = True) -> str:
        """The generated Slang for the forward + backward program, kernels
        first: the maths and index helpers every module defines before its
        kernels come after them (``helpers=False`` leaves them out), so the
        program's own code is what a reader meets first.  The text compiled is
        the module in its own order (``export_slang`` writes a standalone one)."""
        graph = self.graph if forward_only else self.backward_graph(wrt)
        exe = self._executable(graph, device)
        if lowering.backends.of(exe.device).interprets:
            raise ProgramError(f"device {exe.device!r} runs the IR interpreter and generates no Slang; "
                               "pass device='cpu' or 'vulkan'")
        if exe.source is None:
            raise ProgramError(f"{self.name}'s shapes use size symbols, which are bound (and the Slang "
                               "generated) at the first call: call the program once, then ask again")
        return SlangSource(kernels_first(exe.source, helpers))

    def export_slang(self, wrt: Sequence[str] | str | None = None, path: str | None = None,
                     target: str = "vulkan", forward_only: bool = False,
                     sizes: Mapping[str, int] | None = None) -> "lowering.export.ExportedModule":
        """A readable, standalone Slang module of the forward + backward program
        (``forward_only``: the forward alone) for ``target`` (``"cpu"``,
        ``"vulkan"``, ``"cuda"``), to call from your own slangpy or Slang code.
        Its header comment documents the buffer interface (parameter names,
        types, shapes, roles: arguments, seeds, gradients, results, scratch)
        and the order in which to dispatch its entry points; the returned
        ``ExportedModule`` has the ``source`` and the same facts as a JSON-able
        ``manifest``.  ``path``: also write the module there and the manifest
        beside it (``.json``).  ``sizes`` binds size symbols
        (``lowering.export``; ``examples/export_slang.py`` runs one)."""
        from symdiff.lowering.export import export
        graph = self.graph if forward_only else self.backward_graph(wrt)
        if has_library_nodes(graph):
            raise ProgramError(f"{self.name} uses library nodes (np.linalg), which run on the host between "
                               "compiled pieces (lowering.host_steps): it has no standalone Slang module to export")
        exported = export(graph, sizes, target, name=self.name)
        if path is not None:
            exported.write(path)
        return exported

    def explain(self, wrt: Sequence[str] | str | None = None, device: str | None = None,
                memory_budget: int | None = None) -> Explanation:
        """Per forward tasklet in execution order: the user's line, the
        expression, its partials, the backward tasklets derived from it and
        the kernel each was fused into; under a memory budget (this one or
        the program's), each value stored or recomputed and what it saved.
        Prints as text, renders as HTML in Jupyter.  Compiles for ``device``
        so the kernels are the real ones."""
        specs = self._specs_for(None)
        forward = self._forward_graph(specs)
        names = self._resolve_wrt(forward, wrt)
        budget = self.memory_budget if memory_budget is None else memory_budget
        placeholders = {}
        if budget is not None:
            if not all(isinstance(d, (int, sympy.Integer)) for s in specs for d in s.shape):
                raise ProgramError(f"{self.name}'s shapes use size symbols: call it once with memory_budget=..., "
                                   "then ask explain() again")
            placeholders = {n: np.broadcast_to(np.zeros((), ir.DTYPES[s.dtype]), tuple(map(int, s.shape)))
                            for n, s in zip(self.arg_names, specs)}
        backward, plan = self._gradient_graph(specs, forward, placeholders, names, None, device, budget)
        exe = self._executable(backward, device)
        fn = getattr(self, "function", None)
        out = explain(forward, backward, exe.kernels(), program=self.name,
                      device=exe.device, wrt=names, source_file=fn.__code__.co_filename if fn else None)
        out.memory = str(plan) if plan else None
        if isinstance(exe, loop_runtime.LoopProgram):  # each loop's states stored for its reverse pass
            out.memory = "\n".join(filter(None, [out.memory, exe.checkpointing()]))
        return out

    def view(self, wrt: Sequence[str] | str | None = None, device: str | None = None,
             collapse: bool | None = None) -> "ir.view.GraphView":
        """The backward graph as an interactive view (``ir.view``) that also
        knows the compiled program: a "by kernel" grouping, and per tasklet its
        partial derivatives, kernel and generated Slang lines.  Compiles for
        ``device`` so the kernels are the real ones."""
        specs = self._specs_for(None)
        names = self._resolve_wrt(self._forward_graph(specs), wrt)
        graph = self._backward_graph(specs, names)
        exe = self._executable(graph, device)
        # a program with sd.fori_loop runs as several executables: no one kernel plan to show
        kernels = exe.kernels() if hasattr(exe, "kernels") else {}
        source = None if lowering.backends.of(exe.device).interprets else getattr(exe, "source", None)
        slang = tasklet_lines(source) if source is not None else {}
        details: dict[str, list[tuple[str, str]]] = {}
        for t in graph.tasklets():
            rows = details.setdefault(t.name, [])
            if not t.backward:
                try:
                    partials = tasklet_partials(t.body, t.inputs)
                    rows += [("partial", f"d{o}/d{c} = {d}") for (o, c), d in partials.items()]
                except DifferentiationError as err:
                    rows.append(("partial", f"cannot differentiate: {err}"))
            rows += [("kernel", k) for k, members in kernels.items() if t.name in members]
            rows += [("slang", line) for line in slang.get(t.name, [])]
        for kernel, lines in (kernel_headers(source) if source is not None else {}).items():
            details[kernel] = [("slang", line) for line in lines]   # shown on the kernel's group
        fn = getattr(self, "function", None)
        return ir.view.GraphView(graph, kernels=kernels, details=details, collapse=collapse,
                                 source_file=fn.__code__.co_filename if fn else None)

    def stats(self) -> dict[str, dict]:
        """Kernel, dispatch, byte and compile-time counts of every compiled executable."""
        return {f"{exe.device}:{id(exe):x}": {"device": exe.device, **exe.stats()}
                for exe in self._executables.values()}

    def _concrete_shapes(self, forward: ir.DataflowGraph, inputs: Mapping[str, Any], graph: ir.DataflowGraph,
                         names: Sequence[str]) -> list[tuple[int, ...]]:
        """Shapes of ``graph``'s containers ``names`` for the sizes the arguments bind
        in ``forward``, remembered per argument shapes: solving sizes runs sympy,
        which costs more than a small call's kernels."""
        key = (id(graph), tuple(names), tuple(np.shape(inputs[n]) for n in self.arg_names))
        shapes = self._shapes.get(key)
        if shapes is None:
            sizes = ir.bind_sizes(forward, inputs)
            shapes = self._shapes[key] = [graph.containers[n].concrete_shape(sizes) for n in names]
        return shapes

    # -- public: running ----------------------------------------------------------
    def _arg_dtypes(self, graph: ir.DataflowGraph) -> tuple[str, ...]:
        """Each argument's dtype in ``graph``: what its value is converted to."""
        return tuple(graph.containers[n].dtype for n in self.arg_names)

    def _inputs(self, graph: ir.DataflowGraph, values: Mapping[str, Any]) -> dict[str, Any]:
        return self._convert(self._arg_dtypes(graph), values)

    def _convert(self, dtypes: Sequence[str], values: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments as a graph takes them: device arrays as they are,
        others converted (and checked) to ``dtypes`` by ``host_argument``."""
        return {n: v if isinstance(v, lowering.DeviceArray) else host_argument(n, v, dtype)
                for n, v, dtype in zip(self.arg_names, (values[n] for n in self.arg_names), dtypes)}

    def _run(self, graph: ir.DataflowGraph, inputs: Mapping[str, Any], device: str | None,
             device_arrays: bool) -> dict[str, Any]:
        exe = self._executable(graph, device)
        return exe(dict(inputs), return_device_arrays=device_arrays, check_bounds=self.check_bounds)

    @staticmethod
    def _present(value: Any) -> Any:
        """0-d results come back as numpy scalars, others as arrays."""
        if isinstance(value, np.ndarray) and value.ndim == 0:
            return value[()]
        return value

    def _outputs(self, names: Sequence[str], results: Mapping[str, Any]) -> Any:
        """The results named ``names`` (a graph's result containers, in output order) as a call returns them."""
        outs = [self._present(results[r]) for r in names]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _prepare(self, values: Mapping[str, Any], options: tuple,
                 find: Callable[[], _Prepared]) -> _Prepared:
        """``find()``, kept for the next call with arguments of the same kinds,
        shapes and dtypes and the same ``options`` (with what a call reads
        from settings that may change between calls: the device
        ``$SYMDIFF_DEVICE`` names, the matmul precision, the memory budget).
        Values of other types (lists, other libraries' arrays) find it again
        each call."""
        key = []
        for n in self.arg_names:
            v = values[n]
            if isinstance(v, np.ndarray):
                key.append((v.dtype.char, v.shape))
            elif isinstance(v, lowering.DeviceArray):
                key.append((v.dtype, v.shape, v.device))
            elif type(v) in (float, int, bool):
                key.append(type(v))
            else:
                return find()
        key = (tuple(key), options, self.matmul_precision or precision.current(), self.memory_budget)
        prepared = self._prepared.get(key)
        if prepared is None:
            prepared = self._prepared[key] = find()
        self._last_specs = prepared.specs
        return prepared

    def __call__(self, *args, device: str | None = None, device_arrays: bool = False, **kwargs) -> Any:
        values = self._bind(args, kwargs)

        def find() -> _Prepared:
            specs = self._specs_for(values)
            graph = self._forward_graph(specs)
            return _Prepared(specs, self._arg_dtypes(graph),
                             self._executable(graph, device), tuple(ir.GraphNotes(graph).result_names))
        prepared = self._prepare(values, ("call", requested_device(device or self.device)), find)
        exe = prepared.exe
        return self._outputs(prepared.results, exe(self._convert(prepared.dtypes, values),
                                                   return_device_arrays=device_arrays,
                                                   check_bounds=self.check_bounds))

    def vjp(self, *args, cotangent: Any, wrt: Sequence[str] | str | None = None,
            device: str | None = None, device_arrays: bool = False,
            accumulate: Mapping[str, str] | None = None, memory_budget: int | None = None,
            **kwargs) -> tuple[Any, dict[str, Any]]:
        """``(value, {input: cotangent @ d value / d input})`` for any output shape.

        ``cotangent``: one array for a single output, a tuple for several.
        ``accumulate={"w": "push"}``: per-sample gradients of an input
        broadcast against a batch, shaped ``batch + w.shape`` (``symdiff.push``).
        ``memory_budget``: bytes the call's buffers may take (``symdiff.memory_budget``;
        overrides the program's)."""
        values = self._bind(args, kwargs)
        prepared = self._prepare_gradient(values, wrt, device, accumulate, memory_budget, scalar=False)
        cts = (cotangent,) if len(prepared.seeds) == 1 else tuple(cotangent)
        if len(cts) != len(prepared.seeds):
            raise ProgramError(f"{self.name} has {len(prepared.seeds)} outputs; pass a tuple of "
                               f"{len(prepared.seeds)} cotangents")
        inputs = self._convert(prepared.dtypes, values)
        for out, (seed, expected, dtype), ct in zip(prepared.results, prepared.seeds, cts):
            if isinstance(ct, lowering.DeviceArray):
                inputs[seed] = ct
                continue
            ct = np.asarray(ct, dtype=ir.DTYPES[dtype])
            if ct.shape != expected:
                try:
                    ct = np.broadcast_to(ct, expected)
                except ValueError:
                    raise ProgramError(f"cotangent for output {out!r} has shape {ct.shape}, "
                                       f"the output has shape {expected}") from None
            inputs[seed] = np.array(ct, order="C")
        return self._gradients(prepared, inputs, device_arrays)

    def _gradient_graph(self, specs: tuple[ArraySpec, ...], forward: ir.DataflowGraph, inputs: Mapping[str, Any],
                        wrt: tuple[str, ...], accumulate: Mapping[str, str] | None, device: str | None,
                        budget: int | None) -> tuple[ir.DataflowGraph, MemoryPlan | None]:
        """The backward graph a call runs: as differentiated, or, under a
        memory budget, with the values ``fit`` chose for the device and the
        sizes the inputs bind recomputed where they are read (and the plan
        of those choices)."""
        if budget is None:
            return self._backward_graph(specs, wrt, accumulate), None
        kind = lowering.backends.resolve(requested_device(device or self.device))
        if lowering.backends.of(kind).interprets:
            raise ProgramError(f"memory_budget plans the buffers of the Slang devices; the {kind} device "
                               "interprets the graph without them: pass device='cpu' (or a GPU device)")
        sizes = ir.bind_sizes(forward, inputs)
        key = (specs, wrt, tuple(sorted((accumulate or {}).items())), kind, tuple(sorted(sizes.items())), budget)
        if key not in self._memory_plans:
            try:
                graph, plan = fit(
                    self._backward_graph(specs, wrt, accumulate), sizes, budget,
                    planned_peak=lambda graph: lowering.planned_buffers(graph, kind, sizes).peak_bytes)
            except MemoryBudgetError as exc:
                raise MemoryBudgetError(f"{self.name}: {exc}") from None
            if loops.loops_of(graph):  # sd.fori_loop: the rest of the budget holds its reverse pass's states
                graph = graph.copy()
                ir.GraphNotes(graph).loop_state_bytes = budget - plan.peak_bytes
            self._memory_plans[key] = graph, plan
        return self._memory_plans[key]

    def memory_plan(self) -> MemoryPlan | None:
        """The choices of the latest call made under a memory budget: each
        forward value stored or recomputed, the bytes it saved and the
        operations it costs (None before such a call)."""
        return next(reversed(self._memory_plans.values()))[1] if self._memory_plans else None

    def _prepare_gradient(self, values: Mapping[str, Any], wrt: Sequence[str] | str | None, device: str | None,
                          accumulate: Mapping[str, str] | None, memory_budget: int | None,
                          scalar: bool) -> _Prepared:
        """The backward graph's executable, seeds and gradients for these
        arguments and options (``_prepare``); ``scalar``: refuse a program
        whose output is not one scalar (``value_and_grad``), and keep its
        all-ones seed."""
        def find() -> _Prepared:
            specs = self._specs_for(values)
            forward = self._forward_graph(specs)
            inputs = self._inputs(forward, values)
            outputs = ir.GraphNotes(forward).result_names
            if scalar:
                shapes = self._concrete_shapes(forward, inputs, forward, outputs)
                if len(outputs) != 1 or int(np.prod(shapes[0])) != 1:
                    raise ProgramError(f"value_and_grad needs one scalar output; {self.name} returns "
                                       f"{len(outputs)} output(s) of shape(s) {shapes}. "
                                       "Use .vjp(..., cotangent=...) for non-scalar outputs.")
            names = self._resolve_wrt(forward, wrt)
            budget = self.memory_budget if memory_budget is None else memory_budget
            graph, _ = self._gradient_graph(specs, forward, inputs, names, accumulate, device, budget)
            notes = ir.GraphNotes(graph)
            seeds = [notes.seeds[o] for o in outputs]
            seeds = tuple((seed, tuple(shape), graph.containers[seed].dtype)
                          for seed, shape in zip(seeds, self._concrete_shapes(forward, inputs, graph, seeds)))
            return _Prepared(specs, self._arg_dtypes(forward),
                             self._executable(graph, device), tuple(outputs), seeds,
                             tuple((w, notes.gradients[w]) for w in names),
                             tuple(np.ones(shape, ir.DTYPES[dtype]) for _, shape, dtype in seeds) if scalar else ())
        options = ("gradient", scalar, wrt if wrt is None or isinstance(wrt, str) else tuple(wrt),
                   requested_device(device or self.device), tuple(sorted((accumulate or {}).items())), memory_budget)
        return self._prepare(values, options, find)

    def _gradients(self, prepared: _Prepared, inputs: dict[str, Any], device_arrays: bool) -> tuple[Any, dict[str, Any]]:
        """Run a prepared backward graph: ``(value, {input: gradient})``."""
        results = prepared.exe(inputs, return_device_arrays=device_arrays, check_bounds=self.check_bounds)
        return self._outputs(prepared.results, results), {w: self._present(results[g]) for w, g in prepared.gradients}

    def value_and_grad(self, *args, wrt: Sequence[str] | str | None = None, device: str | None = None,
                       device_arrays: bool = False, accumulate: Mapping[str, str] | None = None,
                       memory_budget: int | None = None, **kwargs) -> tuple[Any, dict[str, Any]]:
        """``(value, {input: gradient})`` of a program with one scalar output.

        ``accumulate={"w": "push"}``: for an input broadcast against a batch,
        one gradient per batch element (shape ``batch + w.shape``, summing to
        the default gradient), without materialising the broadcast."""
        values = self._bind(args, kwargs)
        prepared = self._prepare_gradient(values, wrt, device, accumulate, memory_budget, scalar=True)
        inputs = self._convert(prepared.dtypes, values)
        for (seed, _, _), ones in zip(prepared.seeds, prepared.ones):
            inputs[seed] = ones.copy()  # a fresh array per call, as a cotangent passed to vjp is
        return self._gradients(prepared, inputs, device_arrays)

    def grad(self, *args, wrt: Sequence[str] | str | None = None, device: str | None = None,
             accumulate: Mapping[str, str] | None = None, memory_budget: int | None = None,
             **kwargs) -> dict[str, Any]:
        """``{input: gradient}`` of a program with one scalar output."""
        return self.value_and_grad(*args, wrt=wrt, device=device, accumulate=accumulate,
                                   memory_budget=memory_budget, **kwargs)[1]

    def grad_program(self, wrt: Sequence[str] | str | None = None) -> "DifferentiableProgram":
        """A new program with the same arguments whose outputs are the gradients
        (in ``wrt`` order), so it can be run, differentiated or vjp'd again:
        Hessian-vector products are ``grad_program().vjp(x, cotangent=v)``."""
        parent = self

        def build(specs: tuple[ArraySpec, ...]) -> ir.DataflowGraph:
            forward = parent._forward_graph(specs)
            names = parent._resolve_wrt(forward, wrt)
            outputs = ir.GraphNotes(forward).result_names
            if len(outputs) != 1:
                raise ProgramError(f"grad_program needs one scalar output; {parent.name} has {outputs}")
            graph = parent._backward_graph(specs, names).copy()
            return seal_gradients(graph, outputs[0], names)

        derived = DifferentiableProgram(build, self.arg_names, self._annotations, f"grad({self.name})", self.device,
                                        self.deterministic, self.check_bounds, self.stencil_gathers)
        derived.matmul_precision = self.matmul_precision
        return derived

    # -- public: forward mode -----------------------------------------------------
    def _tangent_graph(self, specs: tuple[ArraySpec, ...], names: tuple[str, ...],
                       tangent_names: tuple[str, ...] | None = None) -> ir.DataflowGraph:
        """Forward graph + tangent pass along ``names`` (cached process-wide
        like the backward graphs); tangents of the float outputs only."""
        forward = self._forward_graph(specs)
        derived = forward.derived.setdefault("tangent_graphs", {})
        key = (names, tangent_names)
        if key not in derived:
            graph = forward.copy()
            outputs = [o for o in ir.GraphNotes(forward).result_names
                       if graph.containers[o].dtype in ir.FLOAT_DTYPES]
            loop_runtime.add_tangent_pass(graph, list(names), outputs,  # sd.fori_loop: a loop of tangents
                             dict(zip(names, tangent_names)) if tangent_names else None)
            derived[key] = graph
        return derived[key]

    def _tangent_of(self, forward: ir.DataflowGraph, names: Sequence[str]) -> tuple[str, ...]:
        """Validated tangent inputs, in argument order: float arguments only."""
        for n in names:
            if n not in self.arg_names:
                raise ProgramError(f"tangent for {n!r}: {self.name} has no such argument; its arguments are "
                                   f"{self.arg_names}")
            dtype = forward.containers[n].dtype
            if dtype not in ir.FLOAT_DTYPES:
                raise ProgramError(f"tangent for {n!r}: argument {n!r} of {self.name} has dtype {dtype}, and "
                                   f"only float arguments ({', '.join(ir.FLOAT_DTYPES)}) have tangents; "
                                   "leave it out of tangents=")
        return tuple(a for a in self.arg_names if a in names)

    def jvp(self, *args, tangents: Mapping[str, Any], device: str | None = None, device_arrays: bool = False,
            **kwargs) -> tuple[Any, Any]:
        """``(value, tangent_out)``: the outputs and their Jacobian-vector product
        along ``tangents`` (``{argument: array shaped like it}``; arguments left
        out have tangent zero and cost nothing), as ``jax.jvp``.  The tangent
        tasklets are fused with the forward pass into the same kernels.
        ``tangent_out`` is one array for a single output, a tuple for several
        (``None`` for an integer or bool output)."""
        values = self._bind(args, kwargs)
        specs = self._specs_for(values)
        forward = self._forward_graph(specs)
        names = self._tangent_of(forward, list(tangents))
        graph = self._tangent_graph(specs, names)
        inputs = self._inputs(forward, values)
        targets = [ir.GraphNotes(graph).tangent_inputs[n] for n in names]
        for n, target, shape in zip(names, targets, self._concrete_shapes(forward, inputs, graph, targets)):
            tangent = tangents[n]
            if not isinstance(tangent, lowering.DeviceArray):
                tangent = np.asarray(tangent, dtype=ir.DTYPES[graph.containers[target].dtype])
            if tuple(tangent.shape) != shape:
                raise ProgramError(f"tangent for {n!r} has shape {tuple(tangent.shape)}, the argument has shape "
                                   f"{shape}; pass an array of the argument's shape")
            inputs[target] = tangent if isinstance(tangent, lowering.DeviceArray) else np.array(tangent, order="C")
        results = self._run(graph, inputs, device, device_arrays)
        outputs = ir.GraphNotes(forward).result_names
        made = ir.GraphNotes(graph).tangents
        outs = [self._present(results[made[o]]) if o in made else None for o in outputs]
        return self._outputs(outputs, results), (outs[0] if len(outs) == 1 else tuple(outs))

    def jvp_program(self, tangent_of: Sequence[str] | str | None = None) -> "DifferentiableProgram":
        """A new program whose arguments are this one's followed by a tangent per
        argument in ``tangent_of`` (default: every float argument), named
        ``t_<argument>``, and whose outputs are the output tangents (in output
        order, float outputs only).  It can be run, differentiated or vjp'd
        again: reverse-over-forward Hessian-vector products are
        ``jvp_program().grad(x, t_x=v)``, forward-over-reverse ones
        ``grad_program().jvp(x, tangents={"x": v})``."""
        parent = self
        chosen = None if tangent_of is None else ((tangent_of,) if isinstance(tangent_of, str) else tuple(tangent_of))
        if chosen is not None:
            for n in chosen:
                if n not in self.arg_names:
                    raise ProgramError(f"tangent_of={n!r} is not an argument of {self.name}; its arguments are "
                                       f"{self.arg_names}")
        else:
            try:
                chosen = tuple(self._float_args(self._forward_graph(self._specs_for(None))))
            except ProgramError:
                raise ProgramError(f"jvp_program of {self.name}: which arguments are floats is not known before "
                                   "a call or annotations; pass tangent_of=[...]") from None
        names = [a for a in self.arg_names if a in chosen]
        tangent_args = []
        for n in names:
            t = f"t_{n}"
            while t in self.arg_names or t in tangent_args:
                t += "_"
            tangent_args.append(t)
        count = len(self.arg_names)

        def build(all_specs: tuple[ArraySpec, ...]) -> ir.DataflowGraph:
            specs = all_specs[:count]
            forward = parent._forward_graph(specs)
            names_ = parent._tangent_of(forward, names)
            for n, t, spec in zip(names, tangent_args, all_specs[count:]):
                own = specs[parent.arg_names.index(n)]
                if spec != own:
                    raise ProgramError(f"tangent {t!r} has spec {spec}, argument {n!r} has {own}; "
                                       "a tangent has its argument's shape and dtype")
            graph = parent._tangent_graph(specs, names_, tuple(tangent_args)).copy()
            return seal_tangents(graph)

        annotations = dict(self._annotations)
        annotations.update({t: self._annotations[n] for n, t in zip(names, tangent_args) if n in self._annotations})
        derived = DifferentiableProgram(build, self.arg_names + tangent_args, annotations, f"jvp({self.name})",
                                        self.device, self.deterministic, self.check_bounds, self.stencil_gathers)
        derived.matmul_precision = self.matmul_precision
        return derived

    def __repr__(self) -> str:
        return f"<differentiable_program {self.name}({', '.join(self.arg_names)})>"


def seal_gradients(graph: ir.DataflowGraph, output: str, wrt: Sequence[str]) -> ir.DataflowGraph:
    """Turn a backward graph into a program returning only gradients: the seed
    becomes a constant 1 written by a tasklet, forward results become
    transients, and the gradient containers are the results in ``wrt`` order."""
    seed = ir.GraphNotes(graph).seeds[output]
    seed_c = graph.containers[seed]
    seed_c.role = "transient"
    graph.add_tasklet(f"seed_{output}_one", [], {"one": 1.0}, {},
                      {"one": (graph.access(seed, 0), tuple(0 for _ in seed_c.shape))})
    return gradients_as_results(graph, wrt)


def gradients_as_results(graph: ir.DataflowGraph, wrt: Sequence[str]) -> ir.DataflowGraph:
    """Make the gradients of ``wrt`` a backward graph's only results, in
    ``wrt`` order; forward results become transients.  With its seeds left
    as arguments, a backward graph so sealed is a vector-Jacobian-product
    program (``symdiff.interop.vjp``), which can be differentiated again."""
    for r in graph.results:
        graph.containers[r].role = "transient"
    notes = ir.GraphNotes(graph)
    grads = notes.gradients
    # results must be listed in wrt order: rebuild the container table order
    for w in wrt:
        c = graph.containers.pop(grads[w])
        c.role = "result"
        graph.containers[c.name] = c
    notes.result_names = [grads[w] for w in wrt]
    del notes.seeds, notes.gradients
    return graph


def seal_tangents(graph: ir.DataflowGraph) -> ir.DataflowGraph:
    """Turn a tangent graph into a program returning only the output tangents:
    forward results become transients, the tangent containers the results,
    in output order."""
    notes = ir.GraphNotes(graph)
    tangents = notes.tangents
    outputs = [o for o in notes.result_names if o in tangents]
    for r in graph.results:
        graph.containers[r].role = "transient"
    for o in outputs:  # results are listed in container order: move them to the end, in order
        c = graph.containers.pop(tangents[o])
        c.role = "result"
        graph.containers[c.name] = c
    notes.result_names = [tangents[o] for o in outputs]
    notes.arg_names = graph.arguments
    del notes.tangents, notes.tangent_inputs
    return graph


def clear_caches() -> int:
    """Give back the memory symdiff keeps for later calls: every executable's
    buffers (but those of calls running now), compiled kernels and traced
    graphs; returns the buffer bytes given back.  Programs still work: their
    next call plans and allocates again.  Without it, buffers kept between
    calls are bounded by ``sd.cache_limit()`` (``sd.set_cache_limit``), and a
    dropped program's memory goes with it."""
    clear_trace_cache()
    return lowering.clear_caches()


def differentiable_program(fn: Callable | None = None, *, device: str | None = None, deterministic: bool = False,
                           check_bounds: bool = True, stencil_gathers: bool = True,
                           strict_broadcasting: bool = False, memory_budget: int | None = None,
                           matmul_precision: str | None = None):
    """Decorate a numpy-style function (or index-level code with ``sd.map``).

    Arguments annotated with ``sd.f32[...]``-style specs fix their dtype and
    shape; unannotated ones take them from the first call's values.
    ``fn`` is traced once per argument specs: globals, closure variables and
    defaults it reads are captured then, as constants (as under ``jax.jit``);
    changing them later does not change calls with the same specs.  Pass
    values that change as arguments.
    Trailing parameters with defaults and no spec annotation (``xp=np``, a
    flag) are not arguments: they keep their defaults, as in ``ir.trace``.
    ``deterministic=True``: no float atomics, bitwise reproducible results
    (slower scatters).  Kernels check every data-dependent index (gathers,
    scatters, computed indices) and a call with one out of range raises
    ``sd.IndexOutOfRange``; ``check_bounds=False`` skips that report (an
    out-of-range read then gives 0 and a write is dropped: memory outside an
    array is never touched).  Index (int32) arguments must hold integers in
    int32's range (``lowering.ArgumentError`` otherwise).
    ``stencil_gathers=False`` keeps stencil reverse passes as scatter-adds
    (atomics), to measure what the gathers save.
    ``strict_broadcasting=True``: an elementwise op between arrays of different
    ranks is a trace error unless the broadcast is written (``x[None, :]``,
    ``np.broadcast_to``); scalars still broadcast.
    ``memory_budget``: bytes the buffers of a gradient call may take on a
    Slang device (intermediates and results, not the arguments): expensive
    forward values are recomputed in the reverse pass instead of stored until
    the plan fits, and a call that cannot fit raises ``sd.MemoryBudgetError``
    (``symdiff.memory_budget``; ``program.memory_plan()`` shows the choices).
    ``matmul_precision``: ``"highest"`` (exact float32) or ``"tf32"`` (tensor
    cores allowed) for this program's float32 products; None follows
    ``sd.set_matmul_precision`` / ``sd.default_matmul_precision``, as JAX's
    setting (``lowering.kernels.precision``).
    """
    if matmul_precision is not None:
        precision.check(matmul_precision, "sd.differentiable_program")
    if fn is None:
        return lambda f: differentiable_program(f, device=device, deterministic=deterministic,
                                                check_bounds=check_bounds, stencil_gathers=stencil_gathers,
                                                strict_broadcasting=strict_broadcasting,
                                                memory_budget=memory_budget, matmul_precision=matmul_precision)
    params = array_parameters(fn)
    hints = {k: v for k, v in array_annotations(fn).items() if k in params}

    def build(specs: tuple[ArraySpec, ...]) -> ir.DataflowGraph:
        return ir.trace(fn, *specs, strict_broadcasting=strict_broadcasting)

    program = DifferentiableProgram(build, params, hints, fn.__name__, device, deterministic, check_bounds,
                                    stencil_gathers)
    program.function = fn
    program.memory_budget = memory_budget
    program.matmul_precision = matmul_precision
    return program


def gradcheck(fn: Callable | DifferentiableProgram, *args, wrt: Sequence[str] | None = None,
              eps: float = 1e-6, atol: float = 1e-5, rtol: float = 1e-4) -> dict[str, np.ndarray]:
    """Check a program's gradients against float64 central differences.

    Traces ``fn`` for ``args`` (a plain function takes its specs from the
    values), differentiates it and compares on the interpreter.  Returns the
    verified float64 gradients; raises ``GradientCheckError`` naming the input,
    the element, both values and the tasklet whose partial disagrees.
    """
    program = fn if isinstance(fn, DifferentiableProgram) else differentiable_program(fn)
    values = program._bind(args, {})
    graph = program._forward_graph(program._specs_for(values))
    inputs = program._inputs(graph, values)
    scalar = {o: np.ones(()) for o in graph.results if int(np.prod(
        graph.containers[o].concrete_shape(ir.bind_sizes(graph, inputs)))) == 1}
    return check_graph_gradients(graph, inputs, wrt=list(program._resolve_wrt(graph, wrt)),
                                 eps=eps, atol=atol, rtol=rtol,
                                 cotangents=scalar if len(scalar) == len(graph.results) else None, fast=True)
