"""Smaller variants of a program, most reductive first, for greedy
delta-minimisation: delete a statement (a deleted definition becomes an input
of the same shape), bypass one (``v = f(u)`` deleted and later reads of ``v``
read ``u``: chains of model blocks collapse onto the value that fails), unroll
a loop, drop a returned term, go first order, replace a subexpression by a
fresh input or by one of its children."""
from __future__ import annotations

import copy
import re
from typing import Iterator

from .gen import Arg, Assign, Loop, MapStmt, MGather, MRead, Node, Program, Scatter


def _statement_slots(stmts: list) -> list[tuple[list, int]]:
    out = []
    for t, s in enumerate(stmts):
        out.append((stmts, t))
        if isinstance(s, Loop):
            out.extend(_statement_slots(s.body))
    return out


def _node_slots(prog: Program) -> list[tuple[object, object, Node]]:
    """(holder, attribute name or list index, node) for every expression node."""
    out = []

    def walk(holder, key, node):
        out.append((holder, key, node))
        for k, child in enumerate(node.kids):
            walk(node.kids, k, child)

    def stmts(seq):
        for s in seq:
            if isinstance(s, Loop):
                stmts(s.body)
            elif isinstance(s, MapStmt):
                walk(s, "body", s.body)
            else:
                walk(s, "expr", s.expr)

    stmts(prog.stmts)
    return out


def _put(holder, key, node) -> None:
    if isinstance(holder, list):
        holder[key] = node
    else:
        setattr(holder, key, node)


def cleanup(prog: Program) -> Program:
    """Drop arguments nothing uses."""
    used = prog.used()
    prog.floats = {n: s for n, s in prog.floats.items() if n in used}
    prog.indices = {n: v for n, v in prog.indices.items() if n in used}
    if prog.second is not None and prog.second not in prog.floats:
        prog.second = None
    return prog


def _fresh_input(prog: Program, shape: tuple) -> Arg:
    k = 0
    while f"y{k}" in prog.floats or f"y{k}" in prog.locals_:
        k += 1
    prog.floats[f"y{k}"] = tuple(shape)
    return Arg(f"y{k}", tuple(shape))


def _rename_node(node: Node, old: str, new: str) -> None:
    """Every read of ``old`` under ``node`` reads ``new``."""
    if isinstance(node, Arg):
        if node.name == old:
            node.name = new
        return
    if isinstance(node, (MRead, MGather)):
        node.name = new if node.name == old else node.name
        if isinstance(node, MGather) and node.idx == old:
            node.idx = new
        return
    if old in node.refs:    # a leaf that names an array in its template (``x[1:3]``)
        word = re.compile(rf"\b{re.escape(old)}\b")
        node.tpl = word.sub(new, node.tpl)
        node.jtpl = None if node.jtpl is None else word.sub(new, node.jtpl)
        node.refs = tuple(new if r == old else r for r in node.refs)
    for k in node.kids:
        _rename_node(k, old, new)


def _rename(stmts: list, old: str, new: str) -> None:
    for s in stmts:
        if isinstance(s, Loop):
            _rename(s.body, old, new)
            continue
        for k in s.kids():
            _rename_node(k, old, new)
        if s.var == old:
            s.var = new
        if isinstance(s, Scatter) and s.idx == old:
            s.idx = new


def _bypasses(prog: Program) -> Iterator[Program]:
    """``v = f(u, ...)`` deleted, later reads of ``v`` reading ``u`` (same shape):
    a chain of blocks shrinks to the one that fails without the deleted
    definition's value becoming a fresh input (which would cut the chain)."""
    shapes = {**prog.locals_, **prog.floats}
    for t, s in enumerate(prog.stmts):
        if not isinstance(s, Assign):
            continue
        for u in sorted(s.expr.names()):
            if u == s.var or shapes.get(u) != shapes.get(s.var) or u in prog.indices:
                continue
            c = copy.deepcopy(prog)
            del c.stmts[t]
            _rename(c.stmts[t:], s.var, u)
            c.ret = list(dict.fromkeys((u if n == s.var else n, how) for n, how in c.ret))
            if c.stmts:
                yield cleanup(c)


def candidates(prog: Program) -> Iterator[Program]:
    n_stmt = len(_statement_slots(prog.stmts))
    for n in range(n_stmt):
        c = copy.deepcopy(prog)
        seq, t = _statement_slots(c.stmts)[n]
        s = seq.pop(t)
        defined = s.var if isinstance(s, Assign) or (isinstance(s, (MapStmt, Scatter)) and s.create) else None
        if defined and defined not in c.floats:
            c.floats[defined] = c.locals_[defined]      # the value it computed becomes an input
        if not seq:
            continue
        yield cleanup(c)
    yield from _bypasses(prog)
    for n in range(n_stmt):
        seq, t = _statement_slots(prog.stmts)[n]
        if isinstance(seq[t], Loop):
            c = copy.deepcopy(prog)
            seq, t = _statement_slots(c.stmts)[n]
            loop = seq[t]
            seq[t:t + 1] = loop.body if loop.times <= 2 else [Loop(loop.times - 1, loop.body)]
            yield cleanup(c)
    if len(prog.ret) > 1:
        for k in range(len(prog.ret)):
            c = copy.deepcopy(prog)
            c.ret.pop(k)
            yield cleanup(c)
    if prog.second is not None:
        c = copy.deepcopy(prog)
        c.second = None
        yield c
    n_nodes = len(_node_slots(prog))
    for n in range(n_nodes):
        holder, key, node = _node_slots(prog)[n]
        if isinstance(node, Arg):
            continue
        c = copy.deepcopy(prog)
        holder, key, node = _node_slots(c)[n]
        if node.kids or node.refs or type(node) is not Node:
            _put(holder, key, _fresh_input(c, node.shape))
            yield cleanup(c)
        for k, child in enumerate(node.kids):
            if child.shape == node.shape:
                c = copy.deepcopy(prog)
                holder, key, node = _node_slots(c)[n]
                _put(holder, key, node.kids[k])
                yield cleanup(c)
