"""A standalone Slang module of a program, for users' own slangpy or Slang code.

``export(graph, sizes, target)`` plans and generates the same kernels the
runtime runs (``plan`` + ``codegen.generate``) and adds what the runtime does
around them, so the module needs nothing from symdiff at run time:

* a ``clear_<buffer>_main`` entry point per buffer that must read as zeros
  when a call starts (accumulated gradients, versions no kernel writes fully);
  the runtime clears these with ``clear_buffer`` instead;
* a header comment documenting every buffer (parameter name, element type,
  shape, role) and the dispatch order with each entry point's thread count;
* on a sequential (CPU) target, ``run_all``: one entry point running the whole
  order in a single dispatch of one thread (the CPU device runs threads one
  after another anyway, and each entry point is a g++ compile there).

The same facts come back as a JSON-able manifest (``ExportedModule.manifest``),
so calling code can bind buffers by name and dispatch in order.  Buffers are
flat ``RWStructuredBuffer``s in row-major (C) order; bools travel as ints,
float16 and bfloat16 as their 16 bits (``uint16_t``).
One buffer per stored version: the runtime's storage sharing
(``buffer_plan``) is left out, so every buffer can be read after a call.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from typing import Callable, Mapping

from symdiff.ir.graph import DataflowGraph
from symdiff.ir.graph_notes import GraphNotes
from symdiff.ir.storage import computed_in_float32

from . import targets
from .bounds_check import FLAG, FLAG_WORDS
from .codegen import STORAGE_TYPES, KernelEntry, _kernel_text, buffer_name, generate, identifier
from .plan import plan
from .threads import Threads

RUN_ALL = "run_all"  # a sequential target's single entry point


@dataclass
class ExportedModule:
    """An exported module: its Slang text and the manifest describing how to call it."""

    source: str
    manifest: dict

    def write(self, path: str) -> None:
        """Write the module to ``path`` and the manifest beside it (``.json``)."""
        with open(path, "w") as f:
            f.write(self.source)
        with open(_manifest_path(path), "w") as f:
            json.dump(self.manifest, f, indent=2)


def _manifest_path(path: str) -> str:
    return (path[:-len(".slang")] if path.endswith(".slang") else path) + ".json"


def _role(graph: DataflowGraph, access: str, gradients: Mapping[str, str], seeds: Mapping[str, str],
          buffer_of: Callable[[str], str]) -> str:
    """What a buffer holds for the caller; ``buffer_of``: a version -> the version whose buffer it is
    written into (``Plan.buffer_of``), so a result written in place names its chain's buffer."""
    node = graph.node(access)
    name = node.container
    if name in seeds.values():
        return "seed"
    if name in gradients.values():
        return "gradient"
    role = graph.containers[name].role
    if role == "argument":
        return "argument"
    if role == "result" and buffer_of(graph.latest(name)) == access:
        return "result"
    return "scratch"


def _phase(kernel) -> str:
    backward = {s.tasklet.backward for s in kernel.all_steps}
    return "backward" if backward == {True} else "forward" if backward == {False} else "forward+backward"


def _clear_kernel(name: str, access: str, storage: str, count: int,
                  target: targets.Target) -> tuple[str, KernelEntry]:
    """A kernel (function and entry point) setting ``count`` elements of buffer ``name`` (of ``access``) to zero."""
    threads = Threads.for_device(count, target)
    lines = threads.open("i") + [("    " if threads.close() else "") + f"{name}[i] = {storage}(0);"] + threads.close()
    text = _kernel_text(target, f"clear_{name}", f"// clear {name} ({count} element(s)) before every call",
                        [f"RWStructuredBuffer<{storage}> {name}"], "\n".join("    " + line for line in lines))
    return text + "\n", KernelEntry(f"clear_{name}", 0, count, {name: access}, threads.per_thread)


def _run_all(entries: list[KernelEntry], buffers: dict[str, str]) -> str:
    """For a sequential (CPU) target: one entry point running the clears and
    every kernel in order, each over all of its threads, dispatched once with
    one thread (threads of the CPU device run one after another anyway)."""
    params = [f"RWStructuredBuffer<{buffers[n]}> {n}" for n in sorted(buffers)]
    calls = []
    for e in entries:
        x, y, _ = e.thread_count
        call = f"{e.function}(uint3(x, {'y' if y > 1 else '0'}, 0){''.join(', ' + a for a in e.arguments())});"
        loop = f"for (int x = 0; x < {x}; x++) {call}"
        calls.append(f"    {f'for (int y = 0; y < {y}; y++) ' if y > 1 else ''}{loop}")
    return (f"// the whole call on a sequential (CPU) target: dispatch once, with one thread\n"
            f"[shader(\"compute\")]\n[numthreads(1, 1, 1)]\n"
            f"void {RUN_ALL}({', '.join(params)})\n{{\n" + "\n".join(calls) + "\n}\n")


def export(graph: DataflowGraph, sizes: Mapping[str, int] | None = None, target: str = "vulkan",
           name: str | None = None) -> ExportedModule:
    """The module and manifest of ``graph`` for ``target`` (``"cpu"``,
    ``"vulkan"`` or ``"cuda"``: the kind decides atomics, loops and maths
    helpers, as in ``lowering.compile``) with its size symbols bound by ``sizes``."""
    # the module runs in the user's own code: every product a Slang kernel, none on symdiff's host
    tgt = replace(targets.of(target), host_blas=False)
    p = plan(computed_in_float32(graph), dict(sizes or {}), tgt)
    module = generate(p, tgt)
    g = p.graph
    gradients = GraphNotes(graph).gradients or {}
    seeds = GraphNotes(graph).seeds or {}
    kernel_buffers = {buffer_name(a): a for e in module.kernels for a in e.buffers.values()}
    stored = {buffer_name(a): a for a in p.buffers} | kernel_buffers
    buffers = {}
    for param, access in sorted(stored.items()):
        if access == FLAG:
            buffers[param] = {"type": "int", "shape": [FLAG_WORDS], "role": "bounds_flag",
                              "note": "zero before a call; nonzero after it: a data-dependent index was out of "
                                      "range (that read gave 0, that write was dropped)"}
            continue
        c = g.containers[g.node(access).container]
        buffers[param] = {"type": STORAGE_TYPES[c.dtype], "shape": [int(d) for d in c.shape],
                          "role": _role(g, access, gradients, seeds, p.buffer_of), "container": c.name,
                          "version": g.node(access).version}
    clears, parts = [], []
    for param, access in sorted(stored.items()):
        info = buffers[param]
        if info["role"] in ("argument", "seed") or access in p.overwritten or p.fills.get(access, 0) != 0:
            continue   # caller data, fully overwritten every call, or filled by a kernel of the module
        text, entry = _clear_kernel(param, access, info["type"], math.prod(info["shape"]), tgt)
        parts.append(text)
        clears.append(entry)
    phases = {identifier(k.name): _phase(k) for k in p.kernels}
    entries = clears + [e for e in module.kernels if e.threads]
    dispatch = [{"entry": f"{e.function}_main", "thread_count": e.thread_count,
                 "buffers": {param: buffer_name(a) for param, a in sorted(e.buffers.items())},
                 "uniforms": dict(e.constants),
                 "phase": "clear" if e in clears else phases.get(e.name, "fill")} for e in entries]
    results = GraphNotes(graph).result_names
    manifest = {
        "program": name or graph.name, "target": tgt.name,
        "buffers": buffers,
        "arguments": {a: buffer_name(f"{a}#0") for a in graph.arguments
                      if f"{a}#0" in p.stored and a not in seeds.values()},
        "results": {r: buffer_name(p.buffer_of(g.latest(r))) for r in results if g.latest(r) in p.stored},
        "gradients": {x: buffer_name(p.buffer_of(g.latest(c))) for x, c in gradients.items()},
        "seeds": {o: buffer_name(f"{s}#0") for o, s in seeds.items()},
        "dispatch": dispatch,
    }
    run_all = ""
    if tgt.sequential:
        run_all = "\n" + _run_all(entries, {n: info["type"] for n, info in buffers.items()})
        manifest["run_all"] = {"entry": RUN_ALL, "thread_count": [1, 1, 1], "buffers": {b: b for b in sorted(buffers)},
                               "note": "runs every step of 'dispatch' in order, in one dispatch"}
    return ExportedModule(_header(manifest) + "\n".join(parts) + "\n" + module.source + run_all, manifest)


def _header(manifest: dict) -> str:
    """The buffer interface and dispatch order, as a comment a reader sees first."""
    lines = [f"// symdiff export of program {manifest['program']!r} for target {manifest['target']!r}.",
             "// Standalone: bind the buffers below by parameter name and dispatch the entry points in",
             "// order (each with its thread count; one submission is enough, dispatches are ordered).",
             "// Buffers are flat RWStructuredBuffers in row-major (C) order; bools travel as int, float16 "
             "and bfloat16 as their bits (uint16_t).",
             "//",
             "// buffers (parameter: element type [shape] role):"]
    for param, info in manifest["buffers"].items():
        extra = f" of {info['container']!r}" if "container" in info else ""
        lines.append(f"//   {param}: {info['type']} {info['shape']} {info['role']}{extra}")
    if manifest["seeds"]:
        lines.append("// seeds (cotangent of each output; 1 for the gradient of a scalar loss): "
                     + ", ".join(f"{o} -> {b}" for o, b in manifest["seeds"].items()))
    if manifest["gradients"]:
        lines.append("// gradients (read after the call): "
                     + ", ".join(f"{x} -> {b}" for x, b in manifest["gradients"].items()))
    lines.append("// results: " + ", ".join(f"{r} -> {b}" for r, b in manifest["results"].items()))
    lines.append("//")
    lines.append("// dispatch order (entry point, thread count, phase; a kernel running another's code binds")
    lines.append("// its own buffers and constants to that entry point's parameters, as listed):")
    for k, d in enumerate(manifest["dispatch"]):
        bound = ", ".join([f"{param} = {b}" for param, b in d["buffers"].items() if param != b]
                          + [f"{param} = {v}" for param, v in d["uniforms"].items()])
        lines.append(f"//   {k}. {d['entry']} {d['thread_count']} {d['phase']}" + (f", binding {bound}" if bound else ""))
    if "run_all" in manifest:
        lines.append(f"// on this sequential (CPU) target one dispatch of {RUN_ALL} with thread count [1, 1, 1]")
        lines.append("// (all buffers bound) runs all of these in order instead.")
    return "\n".join(lines) + "\n\n"
