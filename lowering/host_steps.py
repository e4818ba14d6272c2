"""Programs with library nodes on the Slang devices: compiled pieces with host steps between them.

A library node (``ir.library``: ``np.linalg.solve``, ``cholesky``, ``eigh``...)
has no Slang kernel yet; it runs on the host through numpy and LAPACK.  So a
graph that holds one is split where its library nodes are:

* every node gets a *level*, the number of library nodes on the longest path
  into it (a library node's results are one level past the node); all
  writers of one version share a level (the highest of them: a gradient
  accumulated from both sides of a library node is complete only after the
  later side), found by iterating to a fixed point;
* the tasklets of one level form a *piece*, an ordinary graph compiled by
  ``lowering.compile`` for the device (fused and planned as any program); in
  it each version the piece touches is its own container, an argument where
  an earlier step wrote it, a result where a later step or the caller reads
  it (versions never alias in meaning: ``ir.graph``);
* the library nodes of level k run after piece k and before piece k + 1:
  on the device where their op has a kernel for the bound shapes and the
  device's target (``lowering.library_kernels``), else on the host through
  the op's numpy implementation (a *host step*).

Values stay where they were made: pieces return device arrays, a device
kernel reads and writes device arrays, and only a host step's inputs (and
the caller's results, unless it asks for device arrays) are read back.  On
the CPU device a piece's buffers are host memory and a host step's copies
are memcpys; on Vulkan and CUDA each host step costs a read-back of its
inputs and an upload of its results.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from symdiff import ir
from symdiff.ir.graph import DTYPES, AccessNode, DataflowGraph
from symdiff.ir.index_analysis import uses_connectors
from symdiff.ir.library import LibraryNode, has_library_nodes, library_nodes, ordered_edges, run_node
from symdiff.ir.storage import computed_in_float32

from . import backends, devices, dlpack, library_kernels, runtime
from .library_kernels.launch import Launch
from .plan_types import LoweringError
from .rewrites import split_tasklet
from .source_view import SlangSource


def compile(graph: DataflowGraph, device: str | None = None, sizes: Mapping[str, int] | None = None,  # noqa: A001
            deterministic: bool = False, repeated: bool = False):
    """``lowering.compile``: ``runtime.compile``'s ``Executable``, or, for a
    graph with library nodes on a Slang device, ``HostSteps`` (its pieces each
    compiled by ``runtime.compile`` for the requested device); arguments and
    the rest as ``runtime.compile``."""
    if not has_library_nodes(graph) or backends.of(backends.resolve(device)).interprets:
        return runtime.compile(graph, device=device, sizes=sizes, deterministic=deterministic, repeated=repeated)
    runtime.validate(graph)
    # 16-bit arrays (``ir.storage``): the library nodes too compute on float32, between the pieces
    return HostSteps(computed_in_float32(graph), backends.resolve(device), devices.requested(device), sizes,
                     deterministic, repeated)


def levels(graph: DataflowGraph) -> dict[str, int]:
    """The level of every tasklet and library node (see the module docstring)."""
    order = graph.topological_order()
    deepest = len(library_nodes(graph))  # no path passes more library nodes than there are
    floor: dict[str, int] = {}
    while True:
        level: dict[str, int] = {}
        for n in order:
            node = graph.node(n)
            if isinstance(node, AccessNode):
                level[n] = max((level[w] + isinstance(graph.node(w), LibraryNode) for w, _ in graph.writers(n)),
                               default=0)
            else:
                level[n] = max([level[a] for a, _ in graph.reads(n)] + [floor.get(n, 0)])
        changed = False
        for n in order:
            if isinstance(graph.node(n), AccessNode):
                writers = [w for w, _ in graph.writers(n) if not isinstance(graph.node(w), LibraryNode)]
                top = max((level[w] for w in writers), default=0)
                for w in writers:
                    if level[w] < top:
                        floor[w], changed = top, True
        if not changed:
            return {n: k for n, k in level.items() if not isinstance(graph.node(n), AccessNode)}
        if max(floor.values()) > deepest:
            raised = sorted(n for n, k in floor.items() if k > deepest)
            raise LoweringError(f"cannot order the steps of {graph.name!r} around its library nodes: raising "
                                f"{raised} to their version's other writers raises those writers again "
                                "(a tasklet feeding a library node and writing a version written after it)")


@dataclass
class Piece:
    """The tasklets of one level as their own graph: ``arguments`` and
    ``results`` map its containers to the original graph's access nodes."""

    graph: DataflowGraph
    arguments: dict[str, str] = field(default_factory=dict)   # piece argument -> original access id
    results: dict[str, str] = field(default_factory=dict)     # piece result -> original access id
    executable: object = None


def _piece(graph: DataflowGraph, tasklets: list[str], needed_later: set[str], index: int) -> Piece:
    """``tasklets`` of ``graph`` as a graph of their own (see the module docstring)."""
    piece = Piece(DataflowGraph(f"{graph.name}_piece{index}"))
    g = piece.graph
    names: dict[str, str] = {}
    written = {a for t in tasklets for a, _ in graph.writes(t)}

    def container(access: str) -> str:
        if access not in names:
            node = graph.node(access)
            c = graph.containers[node.container]
            name = g.unique_name(c.name if c.name not in g.containers else f"{c.name}_v{node.version}")
            if access in written:
                role = "result" if access in needed_later else "transient"
            elif graph.writers(access) or (node.version == 0 and c.role == "argument"):
                role = "argument"
            else:
                role = "transient"  # a version nothing writes reads as zeros here too"
            g.add_container(name, c.shape, c.dtype, role, **c.meta)
            names[access] = name
            (piece.arguments if role == "argument" else piece.results if role == "result" else {})[name] = access
        return names[access]

    for t in tasklets:
        task = graph.node(t)
        reads = {m.connector: (g.access(container(a), 0), m.index) for a, m in graph.reads(t)}
        writes = {m.connector: (g.access(container(a), 0), m.index, m.accumulate) for a, m in graph.writes(t)}
        g.add_tasklet(task.name, task.domain, task.body, reads, writes, condition=task.condition,
                      source=task.source, backward=task.backward, **task.meta)
    return piece


def split(graph: DataflowGraph) -> list[Piece | LibraryNode]:
    """The steps of ``graph`` in order: pieces and library nodes (of a copy
    of ``graph`` whose tasklets are split as ``_apart`` says)."""
    graph = _apart(graph)
    level = levels(graph)
    top = max(level.values(), default=0)
    order = graph.topological_order()
    wanted = {graph.latest(r) for r in graph.results}
    steps: list[Piece | LibraryNode] = []
    for k in range(top + 1):
        tasklets = [n for n in order if level.get(n) == k and not isinstance(graph.node(n), LibraryNode)]
        if tasklets:
            mine = set(tasklets)
            later = {a for t in tasklets for a, _ in graph.writes(t)
                     if a in wanted or any(r not in mine for r, _ in graph.readers(a))}
            if later:  # a piece whose values nothing uses is left out
                steps.append(_piece(graph, tasklets, later, k))
        steps += [graph.node(n) for n in order if level.get(n) == k and isinstance(graph.node(n), LibraryNode)]
    return steps


def _apart(graph: DataflowGraph) -> DataflowGraph:
    """``graph``, or a copy with one tasklet per write wherever a tasklet writes
    a version that has other writers and also writes something else: the
    writers of a version share one level (``levels`` raises them), and raising
    such a tasklet raises what its other writes feed, which may be a library
    node feeding the version's other writer, so that writer rises in turn
    without end (cumprod's gradient and a slice's ``+=`` adding into one
    gradient, the add's tasklet also feeding the scan: fuzz seed 2009).  A
    tasklet whose write index reads its connectors (a scatter) stays whole."""
    shared = {a for t in graph.tasklets() for a, _ in graph.writes(t.name) if len(graph.writers(a)) > 1}
    whole = [t.name for t in graph.tasklets()
             if len(graph.writes(t.name)) > 1 and any(a in shared for a, _ in graph.writes(t.name))
             and not any(uses_connectors(m.index, t) for _, m in graph.writes(t.name))]
    if not whole:
        return graph
    graph = graph.copy()
    for name in whole:
        split_tasklet(graph, graph.node(name))
    return graph


class HostSteps:
    """An executable (``lowering.compile``'s) for a graph with library nodes:
    its pieces compiled for ``device``, its library nodes run by their device
    kernels where they have one, else on the host."""

    def __init__(self, graph: DataflowGraph, device: str, requested: str, sizes: Mapping[str, int] | None = None,
                 deterministic: bool = False, repeated: bool = False):
        self.graph = graph
        self.device = device          # the resolved kind (what ``backends.of`` takes)
        self.sizes = dict(sizes or {})
        self.steps = split(graph)
        for step in self.steps:       # "auto" routes each piece as it would a program (float64 on lavapipe)
            if isinstance(step, Piece):
                step.executable = runtime.compile(step.graph, device=requested, sizes=sizes,
                                                  deterministic=deterministic, repeated=repeated)
        self._launches: dict[tuple, Launch | None] = {}  # (node, its shapes) -> its device kernel, or None
        self._ran_on_host: int | None = None             # host steps of the latest call

    def _pieces(self) -> list[Piece]:
        return [s for s in self.steps if isinstance(s, Piece)]

    @property
    def source(self) -> SlangSource | None:
        """The pieces' Slang, one module after another."""
        parts = [p.executable.source for p in self._pieces() if p.executable.source is not None]
        return SlangSource("\n\n".join(parts)) if parts else None

    def kernels(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for p in self._pieces():
            out.update(p.executable.kernels())
        return out

    def stats(self) -> dict:
        """The pieces' stats summed (``peak_bytes``: the largest), plus
        ``host_steps``: library nodes the latest call ran on the host (before
        a call: those whose op has no device kernel at all), and
        ``library_kernels``: those it ran on the device."""
        total: dict = {}
        for p in self._pieces():
            for k, v in p.executable.stats().items():
                total[k] = max(total.get(k, 0), v) if k == "peak_bytes" else total.get(k, 0) + v
        nodes = [s for s in self.steps if isinstance(s, LibraryNode)]
        on_host = self._ran_on_host if self._ran_on_host is not None else \
            sum(not library_kernels.has_kernel(n.op) for n in nodes)
        total["host_steps"] = on_host
        total["library_kernels"] = len(nodes) - on_host
        return total

    def _launch(self, node: LibraryNode, bound: Mapping[str, int]) -> Launch | None:
        """``node``'s device kernel for the bound sizes, built and compiled on
        first use; None where its op has none (or an array is empty)."""
        g = self.graph
        reads, writes = ordered_edges(g, node)
        specs = [[(tuple(g.containers[g.node(a).container].concrete_shape(bound)),
                   g.containers[g.node(a).container].dtype) for a in accesses] for accesses in (reads, writes)]
        key = (node.name, tuple(map(tuple, specs)))
        if key not in self._launches:
            empty = any(0 in shape for shape, _ in specs[0] + specs[1])
            kernel = None if empty else library_kernels.build(node.op, backends.of(self.device).target(),
                                                              specs[0], specs[1], dict(node.params))
            self._launches[key] = None if kernel is None else Launch(self.device, kernel, specs[1])
        return self._launches[key]

    def __call__(self, inputs: Mapping[str, object], sizes: Mapping[str, int] | None = None,
                 return_device_arrays: bool = False, check_bounds: bool = True) -> dict[str, object]:
        DeviceArray, host_argument = runtime.DeviceArray, runtime.host_argument
        g = self.graph
        given = {k: v if isinstance(v, DeviceArray) else host_argument(k, v, g.containers[k].dtype)
                 for k, v in inputs.items() if k in g.containers}
        bound = ir.bind_sizes(g, given, {**self.sizes, **(sizes or {})})
        values: dict[str, object] = {g.access(a, 0): given[a] for a in g.arguments}

        def value(access: str):
            """A version's value; one that nothing writes reads as zeros (``ir.graph``):
            a library node may read it (``np.cumsum(np.zeros(n))``), as may the caller."""
            if access in values:
                return values[access]
            c = g.containers[g.node(access).container]
            return np.zeros(c.concrete_shape(bound), DTYPES[c.dtype])
        on_host = 0
        for step in self.steps:
            if isinstance(step, LibraryNode):
                launch = self._launch(step, bound)
                reads, writes = ordered_edges(g, step)
                if launch is not None:
                    values.update(zip(writes, launch([_on(value(a), self.device) for a in reads])))
                    continue
                host = {a: _host(value(a)) for a in reads}
                run_node(g, step, host)
                values.update((a, host[a]) for a in writes)
                on_host += 1
                continue
            args = {name: _on(values[access], step.executable.device) for name, access in step.arguments.items()}
            own = {s.name for s in step.graph.size_symbols()}  # others would plan the piece again per value
            out = step.executable(args, sizes={k: v for k, v in bound.items() if k in own},
                                  check_bounds=check_bounds, return_device_arrays=True)
            for name, access in step.results.items():
                values[access] = out[name]
        self._ran_on_host = on_host
        results = {}
        for r in g.results:
            result = value(g.latest(r))
            results[r] = runtime.asarray(_on(result, self.device), self.device) if return_device_arrays \
                else _host(result)
        return results


def _host(value) -> np.ndarray:
    """A step's value as a numpy array: a device array's memory itself where
    it is host memory (the CPU device), else read back."""
    if isinstance(value, runtime.DeviceArray):
        view = dlpack.host_view(value)
        return view if view is not None else value.numpy()
    return value


def _on(value, device: str):
    """``value`` as a step on ``device`` takes it: a device array of another
    device (a piece ``"auto"`` routed elsewhere) as a host array."""
    if isinstance(value, runtime.DeviceArray) and value.device != device:
        return _host(value)
    return value
