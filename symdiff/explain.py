"""``program.explain()``: each line of the user's program followed through every stage.

A wrong or slow gradient is debugged one tasklet at a time: which line made
it, what it computes, what sympy says its partials are, which backward
tasklet(s) were derived from it (and whether they reread stored forward
results or recompute them), and which Slang kernel each ended up in.  The
graph rendering shows the same facts spatially; this view puts them in
execution order, keyed by the user's source line, as text and as HTML.

Only ``ir`` and the derivative rules are used here: the caller passes the
kernel plan in as ``{kernel: [tasklet, ...]}`` (``lowering.Executable.kernels``).
"""
from __future__ import annotations

import html
import linecache
import os
from dataclasses import dataclass, field
from typing import Mapping

import sympy

from symdiff.ir import tasklet_notes as notes
from symdiff.ir.graph import DataflowGraph, Memlet, Tasklet

from .derivatives import tasklet_partials
from .errors import DifferentiationError


@dataclass
class TaskletView:
    """One tasklet as the user reads it: every field is already display text."""

    name: str
    source: str | None  # "file.py:LINE"
    code: str | None  # the text of that line, when the file is readable
    domain: str
    reads: list[str]  # "a_1 = a[i - 1]"
    expressions: list[str]  # "y = a_1/4 + a_2/2  ->  out[i]"
    kernels: list[str]
    partials: list[str] = field(default_factory=list)  # forward tasklets: "dy/da_1 = 1/4"
    forward_values: str | None = None  # backward tasklets: "stored" | "recompute" | "none"
    backward: list["TaskletView"] = field(default_factory=list)
    custom_vjp: str | None = None  # forward tasklets of an sd.custom_vjp call: the call's id


@dataclass
class Explanation:
    """What ``program.explain()`` returns: text when printed, HTML in Jupyter."""

    program: str
    device: str
    wrt: tuple[str, ...]
    kernels: dict[str, list[str]]
    tasklets: list[TaskletView]  # forward tasklets in execution order
    memory: str | None = None  # under a memory budget: each value stored or recomputed (symdiff.memory_budget)

    def __str__(self) -> str:
        lines = [self._headline(), ""] + ([self.memory, ""] if self.memory else [])
        for n, t in enumerate(self.tasklets, 1):
            lines.append(f"[{n}] {t.name}" + (f"  {t.source}" if t.source else "")
                         + (f"  {t.code}" if t.code else ""))
            lines += [f"    {label:<10}{text}" for label, text in _forward_rows(t)]
            for b in t.backward:
                lines.append(f"    backward  {b.name}: forward values {b.forward_values}, "
                             f"kernel {_kernels_text(b)}")
                lines += [f"              {e}" for e in b.reads + b.expressions]
            lines.append("")
        return "\n".join(lines).rstrip() + "\n"

    __repr__ = __str__

    def _repr_html_(self) -> str:
        e = html.escape
        parts = [f"<div class=\"symdiff-explain\"><p><b>{e(self._headline())}</b></p>",
                 *([f"<pre>{e(self.memory)}</pre>"] if self.memory else []),
                 "<table style=\"border-collapse:collapse;text-align:left\">"]
        for n, t in enumerate(self.tasklets, 1):
            head = f"[{n}] {e(t.name)}" + (f" <small>{e(t.source)}</small>" if t.source else "")
            if t.code:
                head += f" <code>{e(t.code)}</code>"
            parts.append(f"<tr style=\"border-top:1px solid #999\"><th colspan=\"2\" "
                         f"style=\"text-align:left\">{head}</th></tr>")
            rows = _forward_rows(t)
            for b in t.backward:
                rows.append(("backward", f"{b.name}: forward values {b.forward_values}, "
                                         f"kernel {_kernels_text(b)}"))
                rows += [("", text) for text in b.reads + b.expressions]
            parts += [f"<tr><td style=\"padding-right:1em\">{e(label)}</td><td><code>{e(text)}</code></td></tr>"
                      for label, text in rows]
        parts.append("</table></div>")
        return "\n".join(parts)

    def _headline(self) -> str:
        wrt = ", ".join(self.wrt) or "nothing"
        kernels = (f"{len(self.kernels)} kernel(s)" if self.kernels else
                   "no kernels (the numpy device, or sizes not bound yet: call the program once)")
        return (f"{self.program}: {len(self.tasklets)} forward tasklet(s), gradients w.r.t. {wrt}, "
                f"device {self.device}, {kernels}")


def _kernels_text(t: TaskletView) -> str:
    return ", ".join(t.kernels) or "-"


def _forward_rows(t: TaskletView) -> list[tuple[str, str]]:
    rows = [("domain", t.domain)]
    rows += [("reads", r) for r in t.reads]
    rows += [("forward", x) for x in t.expressions]
    rows += [("partial", p) for p in t.partials] or [("partial", "none (no float input reaches a float output)")]
    rows.append(("kernel", _kernels_text(t)))
    if t.custom_vjp and not t.backward:
        rows.append(("backward", f"by the custom backward of {t.custom_vjp} (sd.custom_vjp), listed at the "
                                 "call's first tasklet"))
    elif not t.backward:
        rows.append(("backward", "none (not on a path from the inputs to the outputs)"))
    return rows


def explain(forward: DataflowGraph, backward: DataflowGraph, kernels: Mapping[str, list[str]], *,
            program: str, device: str, wrt: tuple[str, ...], source_file: str | None = None) -> Explanation:
    """Explain ``forward``'s tasklets using ``backward`` (``forward`` plus its
    reverse pass) and the kernel plan compiled from ``backward``.

    ``source_file``: the path of the user's program, so that its lines can be
    quoted (tasklets only record ``basename:line``)."""
    kernel_of: dict[str, list[str]] = {}
    for kernel, names in kernels.items():
        for name in names:
            kernel_of.setdefault(name, []).append(kernel)
    derived: dict[str, list[Tasklet]] = {}
    for node in backward.topological_order():
        t = backward.node(node)
        if isinstance(t, Tasklet) and t.name not in forward.nx:
            # a custom backward's tasklets are listed at the first forward tasklet of their call
            derived.setdefault(notes.custom_vjp_call(t) or notes.forward_tasklet(t), []).append(t)
    views = []
    for node in forward.topological_order():
        t = forward.node(node)
        if not isinstance(t, Tasklet):
            continue
        view = _view(forward, t, kernel_of, source_file)
        view.partials = _partials(t)
        view.custom_vjp = notes.custom_vjp_call(t)
        for b in derived.pop(view.custom_vjp, []) + derived.get(t.name, []):
            bview = _view(backward, b, kernel_of, source_file)
            bview.forward_values = notes.forward_values(b)
            view.backward.append(bview)
        views.append(view)
    return Explanation(program, device, tuple(wrt), dict(kernels), views)


def _view(graph: DataflowGraph, t: Tasklet, kernel_of: Mapping[str, list[str]],
          source_file: str | None) -> TaskletView:
    reads = [f"{m.connector} = {_memlet(m)}" for _, m in graph.reads(t.name)]
    targets = {m.connector: m for _, m in graph.writes(t.name)}
    expressions = []
    for conn, expr in t.body.items():
        m = targets.get(conn)
        target = f"  ->  {_memlet(m)}" if m else ""
        # a derived tasklet's write is a plain store or an accumulation; a forward one's plain store goes unsaid
        label = m and (m.accumulate or ("plain" if t.backward else None))
        mode = f" [{label}]" if label else ""
        expressions.append(f"{conn} = {expr}{target}{mode}")
    return TaskletView(t.name, t.source, _code_line(t.source, source_file), _domain(t), reads, expressions,
                       kernel_of.get(t.name, []))


def _partials(t: Tasklet) -> list[str]:
    try:
        partials = tasklet_partials(t.body, t.inputs)
    except DifferentiationError as err:
        return [f"cannot differentiate: {err}"]
    return [f"d{out}/d{conn} = {d}" for (out, conn), d in partials.items()]


def _memlet(m: Memlet) -> str:
    index = ", ".join(str(i) for i in m.index)
    return f"{m.container}[{index}]"


def _domain(t: Tasklet) -> str:
    ranges = ", ".join(f"{s} in [{b}, {e})" for s, b, e in t.domain) or "a single point"
    return ranges if t.condition is sympy.true else f"{ranges} where {t.condition}"


def _code_line(source: str | None, source_file: str | None) -> str | None:
    if not source or not source_file or ":" not in source:
        return None
    name, _, line = source.rpartition(":")
    if name != os.path.basename(source_file) or not line.isdigit():
        return None
    return linecache.getline(source_file, int(line)).strip() or None
