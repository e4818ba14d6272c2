"""The dataflow IR: containers, versioned access nodes, tasklets and memlets.

The whole pipeline speaks this one small language, so its semantics are fixed
here and every stage (tracer, interpreter, differentiator, lowering) relies on
exactly these rules:

* A **container** is a named array (shape of sympy ints or size symbols, a
  dtype, a role).  Each write phase of a container is a separate **version**,
  represented by one access node ``"<container>#<version>"``.  Versions never
  alias in meaning: a reader of version ``k`` sees the value version ``k`` had
  when all of its writers finished (SSA).  Storage may be shared by a backend
  when lifetimes allow it, but semantically every version is its own array.
* Every version starts filled with the identity of the accumulation its
  writers use (0 for ``"sum"`` and for plain writes, -inf for ``"max"``, +inf
  for ``"min"``, 1 for ``"prod"``).  A version with no writers therefore reads
  as zeros (``np.zeros`` needs no tasklet); version 0 of an argument holds the
  caller's data.
* Writers of one version either all write plainly or all accumulate with the
  same operator.  A plain-written element receives at most one write (no
  ordering between writers is ever needed); a partial update ``u[1:-1] = e``
  is therefore a guarded copy of the untouched elements plus a tasklet for
  the updated ones.
* A **tasklet** runs its body once per point of its domain, a box
  ``((i, begin, end), ...)`` of half-open ranges, restricted by an optional
  ``condition`` over the index symbols.  The body maps output connectors to
  sympy expressions over input-connector symbols and index symbols.
  Iterations are independent except through accumulating writes.
* A **memlet** (edge data) says which element a connector reads or writes:
  an index tuple of sympy expressions over the domain symbols and, for
  gather/scatter, over integer input connectors of the same tasklet.

The networkx ``MultiDiGraph`` is public as ``graph.nx``: nodes are the ids
above with the node object under the ``"node"`` attribute, edges carry a
``Memlet`` under ``"memlet"``.  Read edges go access -> tasklet, write edges
tasklet -> access.
"""
from __future__ import annotations

import functools
import heapq
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Mapping, Sequence

import ml_dtypes
import networkx as nx
import numpy as np
import sympy

DTYPES: dict[str, type] = {
    "float32": np.float32,
    "float64": np.float64,
    "int32": np.int32,
    "bool": np.bool_,
    "float16": np.float16,
    "bfloat16": ml_dtypes.bfloat16,
}
FLOAT_DTYPES = ("float32", "float64", "float16", "bfloat16")
# Storage formats: arrays held in 16 bits and computed on in float32 (``ir.storage``).
STORAGE_FLOATS = ("float16", "bfloat16")
ROLES = ("argument", "result", "transient")
ACCUMULATIONS = (None, "sum", "max", "min", "prod")
ACCUMULATION_IDENTITY = {None: 0.0, "sum": 0.0, "max": -np.inf, "min": np.inf, "prod": 1.0}

Index = tuple[sympy.Expr, ...]
Range = tuple[sympy.Symbol, sympy.Expr, sympy.Expr]


class GraphError(ValueError):
    """A malformed graph; the message names the node at fault."""


class IndexOutOfRange(IndexError):
    """A data-dependent index outside the extent it indexes, found when a
    program runs (every device raises it); the message names the tasklet and
    the user's line, the array and axis, and the index's value."""


def as_expr(value) -> sympy.Expr:
    """Sympify ints, size symbols and expressions uniformly (shapes, indices)."""
    return sympy.sympify(value)


def index_symbol(name: str) -> sympy.Symbol:
    """A domain (loop) symbol.  Integer assumptions make index arithmetic exact."""
    return sympy.Symbol(name, integer=True)


def size_symbol(name: str) -> sympy.Symbol:
    """A shape symbol bound at call time (``N = sd.symbol("N")``)."""
    return sympy.Symbol(name, integer=True, positive=True)


def connector_symbol(name: str, dtype: str) -> sympy.Symbol:
    """The symbol standing for an input connector's value inside a body.

    Real assumptions let sympy differentiate ``Abs`` to ``sign`` and keep
    ``conjugate`` out of derivatives; integer connectors may feed indices.
    """
    if dtype in FLOAT_DTYPES:
        return sympy.Symbol(name, real=True)
    if dtype == "int32":
        return sympy.Symbol(name, integer=True)
    return sympy.Symbol(name)  # bool: a sympy Symbol is also a Boolean


@dataclass
class Container:
    name: str
    shape: tuple[sympy.Expr, ...]
    dtype: str
    role: str = "transient"
    meta: dict = field(default_factory=dict)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def concrete_shape(self, sizes: Mapping[str, int] | None = None) -> tuple[int, ...]:
        """The shape with size symbols bound; raises if one is unbound."""
        subs = {size_symbol(k): v for k, v in (sizes or {}).items()}
        out = []
        for dim in self.shape:
            value = as_expr(dim).subs(subs) if subs else as_expr(dim)
            if not value.is_Integer:
                raise GraphError(f"container {self.name!r}: size {dim} is not bound (pass it in sizes=)")
            out.append(int(value))
        return tuple(out)


@dataclass
class AccessNode:
    container: str
    version: int

    @property
    def id(self) -> str:
        return f"{self.container}#{self.version}"


def empty_domain(domain) -> bool:
    """Whether a range of ``domain`` is provably empty (``0:0``, ``3:N - N``):
    then no point runs, nothing is read or written, and no derivative flows."""
    return any((sympy.sympify(e) - b).is_nonpositive for _, b, e in domain)


@dataclass
class Tasklet:
    """A scalar computation over a parallel domain; see the module docstring."""

    name: str
    domain: tuple[Range, ...]
    body: dict[str, sympy.Expr]
    inputs: dict[str, sympy.Symbol]
    condition: sympy.Basic = sympy.true
    source: str | None = None  # the user's "file:line" that produced it
    backward: bool = False
    meta: dict = field(default_factory=dict)

    @property
    def id(self) -> str:
        return self.name

    # (cached: a tasklet is a value, never edited in place, and planning asks these of every
    # tasklet again and again)
    @functools.cached_property
    def index_symbols(self) -> tuple[sympy.Symbol, ...]:
        return tuple(r[0] for r in self.domain)

    @functools.cached_property
    def input_symbols(self) -> frozenset[sympy.Symbol]:
        """The symbols of its input connectors (``inputs``' values)."""
        return frozenset(self.inputs.values())

    @property
    def runs_nothing(self) -> bool:
        """Its domain is provably empty (``empty_domain``)."""
        return empty_domain(self.domain)


@dataclass(frozen=True)
class Memlet:
    container: str
    index: Index
    connector: str
    accumulate: str | None = None

    def __str__(self) -> str:
        idx = ", ".join(str(i) for i in self.index)
        acc = f" ({self.accumulate})" if self.accumulate else ""
        return f"{self.container}[{idx}]{acc}"


def _copied(graph: nx.MultiDiGraph, renamed: Mapping[str, str] | None = None) -> nx.MultiDiGraph:
    """``graph.copy()``, the same nodes, edges, keys and orders (each attribute dict a shallow
    copy), built on the adjacency dicts: networkx adds each edge through ``add_edge``'s checks,
    and a plan forks its graph once per trial (elman_rnn: 7 copies, 5% of its plan).  Nodes
    named in ``renamed`` take their new names in their old places (``nx.relabel_nodes`` moves
    them last, and the planner reads the node order)."""
    g = graph.__class__()
    g.graph.update(graph.graph)
    nodes, succ, pred = g._node, g._succ, g._pred
    name = renamed.get if renamed else None
    for n, data in graph._node.items():
        n = name(n, n) if name else n
        nodes[n] = data.copy()
        succ[n] = {}
        pred[n] = {}
    for u, neighbours in graph._succ.items():
        out = succ[name(u, u) if name else u]
        for v, keyed in neighbours.items():
            v = name(v, v) if name else v
            # one dict per edge key, shared by both directions (as ``MultiDiGraph.add_edge`` does)
            out[v] = pred[v][name(u, u) if name else u] = {key: data.copy() for key, data in keyed.items()}
    return g


class DataflowGraph:
    """A dataflow program: a container table plus a networkx MultiDiGraph."""

    def __init__(self, name: str = "program"):
        self.name = name
        self.nx = nx.MultiDiGraph()
        self.containers: dict[str, Container] = {}
        self._named = 0  # suffixes ``unique_name`` has handed out
        self.meta: dict = {}
        # What later stages computed from this graph (backward graphs, executables), kept
        # here so that it lives exactly as long as the graph; a copy starts without it.
        self.derived: dict = {}

    # -- building -----------------------------------------------------------------
    def add_container(self, name: str, shape: Sequence, dtype: str, role: str = "transient",
                      **meta) -> Container:
        if name in self.containers:
            raise GraphError(f"container {name!r} already exists")
        if dtype not in DTYPES:
            raise GraphError(f"container {name!r}: dtype {dtype!r} is not one of {list(DTYPES)}")
        if role not in ROLES:
            raise GraphError(f"container {name!r}: role {role!r} is not one of {ROLES}")
        c = Container(name, tuple(as_expr(s) for s in shape), dtype, role, dict(meta))
        self.containers[name] = c
        return c

    def unique_name(self, base: str) -> str:
        """A container or tasklet name not yet used in this graph."""
        def taken(name: str) -> bool:  # O(1): graphs of 10^4 nodes name every node
            return name in self.containers or name in self.nx

        if not taken(base):
            return base
        while True:
            candidate = f"{base}_{self._named}"
            self._named += 1
            if not taken(candidate):
                return candidate

    def access(self, container: str, version: int | None = None) -> str:
        """The id of an access node of ``container``: the given version, or the
        latest one (created as version 0 if the container has none yet)."""
        if container not in self.containers:
            raise GraphError(f"unknown container {container!r}")
        if version is None:
            versions = self.versions(container)
            version = versions[-1] if versions else 0
        node = AccessNode(container, version)
        if node.id not in self.nx:
            self.nx.add_node(node.id, node=node)
        return node.id

    def new_version(self, container: str) -> str:
        """A fresh access node one version past the latest (SSA write target)."""
        versions = self.versions(container)
        if versions:
            return self.access(container, versions[-1] + 1)
        # an argument's version 0 is the caller's data even before anything reads it
        c = self.containers.get(container)  # unknown: access() raises the GraphError
        return self.access(container, 1 if c is not None and c.role == "argument" else 0)

    def add_tasklet(self, name: str, domain: Iterable[Range], body: Mapping[str, sympy.Expr],
                    reads: Mapping[str, tuple[str, Index]],
                    writes: Mapping[str, tuple[str, Index] | tuple[str, Index, str | None]],
                    condition: sympy.Basic = sympy.true, source: str | None = None,
                    backward: bool = False, **meta) -> Tasklet:
        """Add a tasklet with its memlets.

        ``reads``: ``{connector: (access_node_id, index)}``; the connector's
        symbol is derived from the container's dtype (``connector_symbol``).
        ``writes``: ``{connector: (access_node_id, index[, accumulate])}``.
        """
        name = self.unique_name(name)
        inputs = {}
        for conn, (node_id, _) in reads.items():
            inputs[conn] = connector_symbol(conn, self.containers[self.node(node_id).container].dtype)
        t = Tasklet(name, tuple((r[0], as_expr(r[1]), as_expr(r[2])) for r in domain),
                    {k: sympy.sympify(v) for k, v in body.items()}, inputs,
                    sympy.sympify(condition), source, backward, dict(meta))
        self.nx.add_node(name, node=t)
        for conn, (node_id, index) in reads.items():
            c = self.node(node_id).container
            self.nx.add_edge(node_id, name, memlet=Memlet(c, tuple(as_expr(i) for i in index), conn))
        for conn, spec in writes.items():
            node_id, index = spec[0], spec[1]
            acc = spec[2] if len(spec) > 2 else None
            c = self.node(node_id).container
            self.nx.add_edge(name, node_id, memlet=Memlet(c, tuple(as_expr(i) for i in index), conn, acc))
        return t

    def remove_tasklet(self, name: str) -> None:
        self.nx.remove_node(name)

    def move_versions(self, container: str, to: str) -> None:
        """Every access node of ``container`` becomes the same version of container ``to``,
        in its place in the node order (which the planner reads), its memlets renamed."""
        versions = self.versions(container)
        mapping = {f"{container}#{v}": f"{to}#{v}" for v in versions}
        self.nx = _copied(self.nx, mapping)
        for v in versions:
            node = mapping[f"{container}#{v}"]
            self.nx.nodes[node]["node"] = AccessNode(to, v)
            for _, _, data in [*self.nx.in_edges(node, data=True), *self.nx.out_edges(node, data=True)]:
                data["memlet"] = replace(data["memlet"], container=to)

    # -- querying -----------------------------------------------------------------
    # node() and the queries below read networkx's node and adjacency dicts directly (``_node``, ``_pred``,
    # ``_succ``; their iteration order is that of ``nodes``/``in_edges``/``out_edges``): planning an
    # unrolled loop asks them ~10^5 times, and each view object networkx builds per call cost more
    # than the answer (cavity flow's plan and validation: ~0.5 of 5 profiled s).
    def node(self, node_id: str) -> AccessNode | Tasklet:
        return self.nx._node[node_id]["node"]

    def tasklets(self) -> list[Tasklet]:
        return [d["node"] for d in self.nx._node.values() if isinstance(d["node"], Tasklet)]

    def access_nodes(self) -> list[AccessNode]:
        return [d["node"] for d in self.nx._node.values() if isinstance(d["node"], AccessNode)]

    def versions(self, container: str) -> list[int]:
        return sorted(d["node"].version for d in self.nx._node.values()
                      if isinstance(d["node"], AccessNode) and d["node"].container == container)

    def latest(self, container: str) -> str:
        """The access node holding a container's final value."""
        return self.access(container)

    def reads(self, tasklet: str) -> list[tuple[str, Memlet]]:
        """``[(access_node_id, memlet)]`` read by a tasklet."""
        return [(u, d["memlet"]) for u, keys in self.nx._pred[tasklet].items() for d in keys.values()]

    def writes(self, tasklet: str) -> list[tuple[str, Memlet]]:
        """``[(access_node_id, memlet)]`` written by a tasklet."""
        return [(v, d["memlet"]) for v, keys in self.nx._succ[tasklet].items() for d in keys.values()]

    def writers(self, access: str) -> list[tuple[str, Memlet]]:
        """``[(tasklet_name, memlet)]`` writing an access node."""
        return [(u, d["memlet"]) for u, keys in self.nx._pred[access].items() for d in keys.values()]

    def readers(self, access: str) -> list[tuple[str, Memlet]]:
        """``[(tasklet_name, memlet)]`` reading an access node."""
        return [(v, d["memlet"]) for v, keys in self.nx._succ[access].items() for d in keys.values()]

    def accumulation(self, access: str) -> str | None:
        """The accumulation shared by the writers of an access node (None: plain)."""
        accs = {m.accumulate for _, m in self.writers(access)}
        return accs.pop() if len(accs) == 1 else None

    def topological_order(self, key: Callable[[str], Any] | None = None) -> list[str]:
        """Node ids, producers first; ties broken by ``key`` of a node id, then by insertion order
        (stable): networkx's ``lexicographical_topological_sort`` keyed by (``key``, insertion
        order), on the adjacency dicts (planning sorts each graph several times; the generic one
        cost ~40 ms for an unrolled loop's 2k nodes)."""
        position = {n: k for k, n in enumerate(self.nx._node)}
        waiting = {n: len(preds) for n, preds in self.nx._pred.items()}

        def entry(n: str) -> tuple:
            return (position[n], n) if key is None else (key(n), position[n], n)
        ready = [entry(n) for n, count in waiting.items() if not count]
        heapq.heapify(ready)
        out = []
        while ready:
            n = heapq.heappop(ready)[-1]
            out.append(n)
            for child in self.nx._succ[n]:
                waiting[child] -= 1
                if not waiting[child]:
                    heapq.heappush(ready, entry(child))
        if len(out) != len(position):
            raise nx.NetworkXUnfeasible("Graph contains a cycle or graph changed during iteration")
        return out

    @property
    def arguments(self) -> list[str]:
        return [c.name for c in self.containers.values() if c.role == "argument"]

    @property
    def results(self) -> list[str]:
        return [c.name for c in self.containers.values() if c.role == "result"]

    def size_symbols(self) -> set[sympy.Symbol]:
        syms: set[sympy.Symbol] = set()
        for c in self.containers.values():
            for d in c.shape:
                syms |= as_expr(d).free_symbols
        return syms

    def copy(self) -> "DataflowGraph":
        """A structural copy: node objects are shared (treat them as values)."""
        g = DataflowGraph(self.name)
        g.nx = _copied(self.nx)
        g.containers = {k: Container(c.name, c.shape, c.dtype, c.role, dict(c.meta))
                        for k, c in self.containers.items()}
        g.meta = dict(self.meta)
        return g

    def fork(self) -> "DataflowGraph":
        """A ``copy`` that goes on naming new nodes as this graph would
        (``copy`` starts its ``unique_name`` suffixes afresh): rewriting the
        fork gives the names rewriting this graph would (``lowering.pipeline``
        runs the passes of another choice from a fork of the shared state)."""
        g = self.copy()
        g._named = self._named
        return g

    def validate(self) -> "DataflowGraph":
        from .validate import validate
        validate(self)
        return self

    # -- text form ----------------------------------------------------------------
    def summary(self) -> str:
        from .text import summary
        return summary(self)

    def __str__(self) -> str:
        return self.summary()

    # -- rendering (Jupyter) ------------------------------------------------------
    def to_svg(self, engine: str = "auto") -> str:
        """An SVG drawing; ``engine``: ``"auto"`` (graphviz dot if on PATH), ``"dot"``, ``"builtin"``."""
        from .render import to_svg
        return to_svg(self, engine)

    def view(self, **options) -> "GraphView":
        """The interactive view Jupyter shows (pan, zoom, click for details,
        groups); ``options`` as for ``ir.view.GraphView``."""
        from .view import GraphView
        return GraphView(self, **options)

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        return self.view()._repr_mimebundle_(include, exclude)

    def __repr__(self) -> str:
        return (f"<DataflowGraph {self.name!r}: {len(self.containers)} containers, "
                f"{len(self.tasklets())} tasklets>")
