"""Structural validation of a ``DataflowGraph`` against the rules in ``graph.py``.

Every later stage (interpreter, differentiator, lowering) assumes these rules
hold, so a violation is caught here with a message that names the container,
access node or tasklet at fault instead of surfacing as a confusing failure
deep inside another stage.  Checks that need concrete sizes are done only
where they are decidable symbolically: an index is rejected when it is
*provably* outside its container, never on a maybe.
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import networkx as nx
import sympy

from .graph import ACCUMULATIONS, AccessNode, Container, GraphError, Memlet, Tasklet, as_expr
from .index_analysis import affine_coefficients, injective_over
from .library.node import LibraryNode

if TYPE_CHECKING:
    from .graph import DataflowGraph


def _is_size_symbol(sym: sympy.Basic) -> bool:
    return isinstance(sym, sympy.Symbol) and bool(sym.is_integer) and bool(sym.is_positive)


def _size_symbols(expr: sympy.Basic) -> bool:
    return all(_is_size_symbol(s) for s in as_expr(expr).free_symbols)


def _check_container(c: Container) -> None:
    for dim in c.shape:
        dim = as_expr(dim)
        if not (dim.is_integer and _size_symbols(dim)):
            raise GraphError(f"container {c.name!r}: shape entry {dim} is neither an int nor an "
                             "expression of size symbols (ir.size_symbol)")
        if dim.is_negative:
            raise GraphError(f"container {c.name!r}: negative extent {dim} in shape {c.shape}")


def _check_node(graph: "DataflowGraph", node_id: str) -> None:
    node = graph.nx.nodes[node_id].get("node")
    if isinstance(node, AccessNode):
        if node.container not in graph.containers:
            raise GraphError(f"access node {node_id!r}: unknown container {node.container!r}")
        if node.id != node_id:
            raise GraphError(f"access node {node_id!r}: id does not match its container/version {node.id!r}")
    elif isinstance(node, (Tasklet, LibraryNode)):
        if node.id != node_id:
            raise GraphError(f"tasklet {node.name!r}: stored under a different node id {node_id!r}")
    else:
        raise GraphError(f"node {node_id!r}: carries no AccessNode or Tasklet under 'node' (got {node!r})")


def _check_edge(graph: "DataflowGraph", u: str, v: str, data: dict) -> None:
    src, dst = graph.node(u), graph.node(v)
    memlet = data.get("memlet")
    if isinstance(src, AccessNode) and isinstance(dst, (Tasklet, LibraryNode)):
        access, tasklet = src, dst
    elif isinstance(src, (Tasklet, LibraryNode)) and isinstance(dst, AccessNode):
        access, tasklet = dst, src
    else:
        raise GraphError(f"edge {u!r} -> {v!r}: edges must go access -> tasklet (read) or "
                         "tasklet -> access (write)")
    if not isinstance(memlet, Memlet):
        raise GraphError(f"tasklet {tasklet.name!r}: edge {u!r} -> {v!r} has no Memlet under 'memlet'")
    if memlet.container != access.container:
        raise GraphError(f"tasklet {tasklet.name!r}: memlet {memlet} on the edge to access node "
                         f"{access.id!r} names container {memlet.container!r}, not {access.container!r}")
    if access is src and memlet.accumulate is not None:
        raise GraphError(f"tasklet {tasklet.name!r}: read {memlet} from {access.id!r} carries an accumulation")


class _TaskletChecker:
    """The per-tasklet rules; one instance per tasklet keeps the symbol sets at hand."""

    def __init__(self, graph: "DataflowGraph", t: Tasklet, size_names: set[str] | None = None):
        self.graph, self.t = graph, t
        # the graph's size symbols, computed once per validate() (per tasklet it was quadratic)
        self.size_names = size_names
        self.reads = graph.reads(t.name)
        self.writes = graph.writes(t.name)
        self.index_syms = set(t.index_symbols)

    def fail(self, message: str) -> GraphError:
        where = f" ({self.t.source})" if self.t.source else ""
        return GraphError(f"tasklet {self.t.name!r}{where}: {message}")

    def check(self) -> None:
        self.check_domain()
        self.check_connectors()
        self.check_symbols()
        for access, memlet in self.reads + self.writes:
            self.check_index(access, memlet)
        self.check_gathers()
        self.check_writes()
        problem = self.out_of_bounds()
        if problem:
            raise self.fail(problem)

    def out_of_bounds(self) -> str | None:
        """What provably leaves its container, or None."""
        box = self.bounded_box()
        if box is not None:
            for access, memlet in self.reads + self.writes:
                problem = self.bounds_problem(access, memlet, box)
                if problem:
                    return problem
        return None

    def check_domain(self) -> None:
        seen = set()
        for sym, begin, end in self.t.domain:
            if not isinstance(sym, sympy.Symbol) or sym in seen:
                raise self.fail(f"domain symbol {sym} is not a fresh symbol")
            seen.add(sym)
            for bound in (begin, end):
                if not (as_expr(bound).is_integer and _size_symbols(bound)):
                    raise self.fail(f"domain range {sym}={begin}:{end}: {bound} is neither an int nor "
                                    "an expression of size symbols")
        extra = {s for s in as_expr(self.t.condition).free_symbols
                 if s not in self.index_syms and not _is_size_symbol(s)}
        if extra:
            raise self.fail(f"condition {self.t.condition} uses {sorted(map(str, extra))}, "
                            "which are not index or size symbols")

    def check_connectors(self) -> None:
        read_conns = [m.connector for _, m in self.reads]
        for conn in read_conns:
            if conn not in self.t.inputs:
                raise self.fail(f"read connector {conn!r} is not among its inputs {list(self.t.inputs)}")
            if read_conns.count(conn) > 1:
                raise self.fail(f"input connector {conn!r} is read by more than one edge")
        sizes = self.size_names
        if sizes is None:
            sizes = {s.name for s in self.graph.size_symbols()}
        for sym in self.index_syms:
            if sym.name in self.t.inputs or sym.name in sizes:
                raise self.fail(f"index symbol {sym} shares its name with a connector or size symbol "
                                "(generated code and lambdify need distinct names)")
        for conn in self.t.inputs:
            if conn in sizes:
                raise self.fail(f"input connector {conn!r} shares its name with a size symbol")
        unread = [c for c in self.t.inputs if c not in read_conns]
        if unread:
            raise self.fail(f"input connectors {unread} have no read edge")
        written = {m.connector for _, m in self.writes}
        for conn in written - set(self.t.body):
            raise self.fail(f"write connector {conn!r} is not an output of its body {list(self.t.body)}")
        for conn in set(self.t.body) - written:
            raise self.fail(f"body output {conn!r} has no write edge")

    def check_symbols(self) -> None:
        allowed = self.index_syms | set(self.t.inputs.values())
        for conn, expr in self.t.body.items():
            extra = {s for s in as_expr(expr).free_symbols if s not in allowed and not _is_size_symbol(s)}
            if extra:
                raise self.fail(f"body output {conn!r} = {expr} uses {sorted(map(str, extra))}, which are "
                                "neither input connectors, index symbols nor size symbols")

    def check_index(self, access: str, memlet: Memlet) -> None:
        c = self.graph.containers[memlet.container]
        if len(memlet.index) != c.ndim:
            raise self.fail(f"access {memlet} on {access!r} has {len(memlet.index)} indices for a "
                            f"{c.ndim}-d container (shape {c.shape})")
        by_symbol = {sym: conn for conn, sym in self.t.inputs.items()}
        for e in memlet.index:
            for s in as_expr(e).free_symbols:
                if s in self.index_syms or _is_size_symbol(s):
                    continue
                if s not in by_symbol:
                    raise self.fail(f"access {memlet} on {access!r}: index uses {s}, which is neither an "
                                    "index symbol, a size symbol nor an input connector")
                if not s.is_integer:
                    raise self.fail(f"access {memlet} on {access!r}: index uses connector {s}, which "
                                    "is not int-typed (only int32 connectors may feed a gather/scatter)")

    def check_gathers(self) -> None:
        """A gather ``a[idx]`` needs ``idx`` read first, so the chain of
        connector-dependent read indices must bottom out."""
        deps = nx.DiGraph()
        by_symbol = {sym: conn for conn, sym in self.t.inputs.items()}
        for _, m in self.reads:
            for e in m.index:
                for s in as_expr(e).free_symbols & set(by_symbol):
                    deps.add_edge(by_symbol[s], m.connector)
        if deps and not nx.is_directed_acyclic_graph(deps):  # (no gather: nothing to order)
            cycle = [u for u, _ in nx.find_cycle(deps)]
            raise self.fail(f"gather indices depend on each other in a cycle through connectors {cycle}")

    def check_writes(self) -> None:
        for access, m in self.writes:
            c = self.graph.containers[m.container]
            if m.accumulate not in ACCUMULATIONS:
                raise self.fail(f"write {m} to {access!r}: accumulation {m.accumulate!r} is not one of "
                                f"{ACCUMULATIONS}")
            if m.accumulate is not None and c.dtype == "bool":
                raise self.fail(f"write {m} to {access!r}: cannot accumulate ({m.accumulate}) into bool "
                                f"container {c.name!r}")
            if m.accumulate is None and self.t.condition == sympy.true:
                self.check_single_write(access, m)

    def check_single_write(self, access: str, m: Memlet) -> None:
        """A plain write must hit each element at most once: a collision is
        almost always a reduction missing its accumulation, runs
        last-writer-wins on the numpy device and is a race on every parallel
        backend.  An index that ignores a domain axis of extent >= 2 provably
        collides; one computed from domain and size symbols only (no gathered
        connector) must be provably injective over the domain
        (``index_analysis.injective_over``: ``out[floor(i/2)]`` is refused,
        ``out[2*i + 1]`` is not).  Data-dependent scatters are the runtime's."""
        index = [as_expr(e) for e in m.index]
        used = set().union(*(e.free_symbols for e in index)) if index else set()
        for sym, begin, end in self.t.domain:
            if sym not in used and (as_expr(end) - as_expr(begin) - 2).is_nonnegative:
                raise self.fail(f"plain write {m} to {access!r} does not use domain symbol {sym} "
                                f"({sym}={begin}:{end}), so elements are written more than once; "
                                "use an accumulation")
        data_dependent = any(s not in self.index_syms and not _is_size_symbol(s) for s in used)
        if not data_dependent and not injective_over(index, self.t.domain, self.graph.containers[m.container].shape):
            domain = ", ".join(f"{sym}={begin}:{end}" for sym, begin, end in self.t.domain)
            raise self.fail(f"plain write {m} to {access!r}: distinct points of the domain ({domain}) "
                            "cannot be proved to write distinct elements, so an element may be written "
                            "more than once; use an accumulation, or an index affine in each domain symbol")

    def bounded_box(self) -> dict[sympy.Symbol, tuple[sympy.Expr, sympy.Expr]] | None:
        """Inclusive ``{sym: (lo, hi)}`` containing exactly the points that run,
        or None when the condition is not a conjunction of simple bounds (the
        box would over-approximate, so nothing outside it is provable)."""
        box = {sym: (as_expr(b), as_expr(e) - 1) for sym, b, e in self.t.domain}
        cond = self.t.condition
        if cond == sympy.true:
            return box
        terms = cond.args if isinstance(cond, sympy.And) else (cond,)
        for term in terms:
            bound = _simple_bound(term, self.index_syms)
            if bound is None:
                return None
            sym, lo, hi = bound
            old_lo, old_hi = box[sym]
            box[sym] = (old_lo if lo is None else sympy.Max(old_lo, lo),
                        old_hi if hi is None else sympy.Min(old_hi, hi))
        return box

    def bounds_problem(self, access: str, memlet: Memlet, box: dict) -> str | None:
        shape = self.graph.containers[memlet.container].shape
        found = _outside(tuple(memlet.index), tuple(shape), tuple(box.items()))
        if found is None:
            return None
        axis, bad = found
        return (f"access {memlet} on {access!r}: index {memlet.index[axis]} reaches {bad}, outside axis "
                f"{axis} of {memlet.container!r} (extent {shape[axis]})")


@functools.lru_cache(maxsize=4096)
def _outside(index: tuple, shape: tuple, box: tuple) -> tuple[int, sympy.Expr] | None:
    """The first axis whose index provably leaves the container over ``box`` (``(symbol, (lo, hi))``
    pairs), with the index value reaching out, or None.  Remembered: an unrolled loop's steps repeat
    the same indices over the same boxes (the tracer asks for every tasklet it emits, ``validate``
    for every tasklet again), and the sympy arithmetic was a quarter of tracing elman_rnn."""
    if any((hi - lo).is_negative for _, (lo, hi) in box):
        return None  # provably empty: nothing runs, nothing is out of range
    ranges = dict(box)
    for axis, (e, extent) in enumerate(zip(index, shape)):
        span = _affine_range(as_expr(e), ranges)
        if span is None:
            continue
        lo, hi = span
        if lo.is_negative or (hi - as_expr(extent)).is_nonnegative:
            return axis, lo if lo.is_negative else hi
    return None


def _simple_bound(term: sympy.Basic, index_syms: set) -> tuple | None:
    """``i >= c`` style relational -> ``(i, lo, hi)`` with inclusive integer
    bounds (one of them None); None for anything else."""
    if not isinstance(term, sympy.core.relational.Relational) or isinstance(term, (sympy.Eq, sympy.Ne)):
        return None
    lhs, rhs = term.lhs, term.rhs
    if lhs in index_syms and not (rhs.free_symbols & index_syms):
        sym, other, flip = lhs, rhs, False
    elif rhs in index_syms and not (lhs.free_symbols & index_syms):
        sym, other, flip = rhs, lhs, True
    else:
        return None
    if not other.is_integer:
        return None
    op = type(term)
    if flip:
        op = {sympy.Ge: sympy.Le, sympy.Le: sympy.Ge, sympy.Gt: sympy.Lt, sympy.Lt: sympy.Gt}[op]
    return {sympy.Ge: (sym, other, None), sympy.Gt: (sym, other + 1, None),
            sympy.Le: (sym, None, other), sympy.Lt: (sym, None, other - 1)}[op]


def _affine_range(e: sympy.Expr, box: dict) -> tuple[sympy.Expr, sympy.Expr] | None:
    """Min and max of an index affine in the box's symbols; None when the index
    is not affine or a coefficient's sign is unknown."""
    syms = [s for s in box if s in e.free_symbols]
    if any(not (s in box or _is_size_symbol(s)) for s in e.free_symbols):
        return None  # depends on a connector value (gather): not decidable here
    if not syms:
        return e, e
    coeffs = affine_coefficients(e, syms)
    if coeffs is None:
        return None
    lo = hi = coeffs[1]
    for s in syms:
        coeff = coeffs[s]
        s_lo, s_hi = box[s]
        if coeff.is_nonnegative:
            lo, hi = lo + coeff * s_lo, hi + coeff * s_hi
        elif coeff.is_nonpositive:
            lo, hi = lo + coeff * s_hi, hi + coeff * s_lo
        else:
            return None
    return lo, hi


def _check_versions(graph: "DataflowGraph", node_id: str) -> None:
    node: AccessNode = graph.node(node_id)
    writers = graph.writers(node_id)
    c = graph.containers[node.container]
    if c.role == "argument" and node.version == 0 and writers:
        raise GraphError(f"access node {node_id!r}: version 0 of argument {c.name!r} holds the caller's "
                         f"data and cannot be written (written by {sorted({w for w, _ in writers})})")
    accs = {m.accumulate for _, m in writers}
    if len(accs) > 1:
        detail = ", ".join(f"{w}: {m.accumulate}" for w, m in writers)
        raise GraphError(f"access node {node_id!r}: writers mix accumulations ({detail}); all writers of "
                         "one version must write plainly or all use the same accumulation")


def static_bounds_violation(graph: "DataflowGraph", tasklet: Tasklet) -> str | None:
    """Which index of ``tasklet`` that does not depend on data provably leaves
    its container (``a[i + 1]`` at the last ``i``), or None.  The tracer asks
    for each tasklet it emits, so the error names the user's line at trace
    time; data-dependent indices are checked when the program runs
    (``IndexOutOfRange``)."""
    return _TaskletChecker(graph, tasklet).out_of_bounds()


def validate(graph: "DataflowGraph") -> None:
    """Raise ``GraphError`` naming the node at fault if ``graph`` breaks a rule
    of ``graph.py``; return None for a well-formed graph."""
    for c in graph.containers.values():
        _check_container(c)
    for node_id in graph.nx.nodes:
        _check_node(graph, node_id)
    for u, v, data in graph.nx.edges(data=True):
        _check_edge(graph, u, v, data)
    if not nx.is_directed_acyclic_graph(graph.nx):
        cycle = [u for u, *_ in nx.find_cycle(graph.nx)]
        raise GraphError(f"the graph has a cycle through {cycle} (node {cycle[0]!r})")
    size_names = {s.name for s in graph.size_symbols()}
    for node_id in graph.nx.nodes:
        node = graph.node(node_id)
        if isinstance(node, Tasklet):
            _TaskletChecker(graph, node, size_names).check()
        elif isinstance(node, LibraryNode):
            from .library.check import check_library_node
            check_library_node(graph, node)
        else:
            _check_versions(graph, node_id)
