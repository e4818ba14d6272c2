"""Facts about a tasklet remembered for the length of one ``plan`` call.

``plan`` runs its passes over several trial graphs (``lowering.pipeline``:
elman_rnn's unrolled loop, six), forks that share every tasklet and memlet
a trial did not rewrite, and the passes ask the same questions of each
tasklet again and again: is it a matrix product (``matmul``), which product
the host's BLAS runs (``host_products``), which of its symbols are threads
(``plan_types.parallel_symbols``).  Answered anew, they were a fifth of
elman_rnn's plan.

A function decorated ``@remembered`` (a question about ``(graph, tasklet)``
that reads only the tasklet, its memlets and their containers' shapes and
dtypes) keeps its answers while ``remembering()`` is open, by the tasklet
and memlet objects asked about (the graph's records are values: a rewrite
puts new ones in place, ``ir.rewrite``) and their containers' shape tuples
(which ``DataflowGraph.copy`` shares) and dtypes.  The answers and the
objects they are keyed by are kept until it closes, so no key outlives its
objects; outside it nothing is remembered.
A rewrite whose result depends on the tasklets it rewrites alone keeps its
results the same way (``answers``, ``signature``, ``held``: ``inlining.inline``),
and a trial gets the very objects an earlier one made, so that its later
questions are answered too.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
from typing import Callable, Iterator, TypeVar

from symdiff.ir.graph import DataflowGraph, Tasklet

Answer = TypeVar("Answer")

_answers: contextvars.ContextVar[dict | None] = contextvars.ContextVar("remembered_answers", default=None)


@contextlib.contextmanager
def remembering() -> Iterator[None]:
    """Remember the answers of ``@remembered`` questions until the block ends
    (one already open goes on: a nested block shares its answers)."""
    if _answers.get() is not None:
        yield
        return
    token = _answers.set({})
    try:
        yield
    finally:
        _answers.reset(token)


def remembered(question: Callable[[DataflowGraph, Tasklet], Answer]) -> Callable[[DataflowGraph, Tasklet], Answer]:
    """``question``, its answers remembered inside ``remembering()`` (the module docstring)."""
    @functools.wraps(question)
    def ask(graph: DataflowGraph, t: Tasklet) -> Answer:
        memo = _answers.get()
        if memo is None:
            return question(graph, t)
        key = (question, *signature(graph, t))
        found = memo.get(key)
        if found is None:
            found = memo[key] = (question(graph, t), held(graph, t))
        return found[0]
    return ask


def answers(kind: str) -> dict | None:
    """The answers of ``kind`` remembered for the ``remembering()`` block open now (None outside
    one), for a caller keying them by ``signature`` and keeping ``held`` with each: a rewrite whose
    result depends on the tasklets it rewrites alone (``inlining.inline``)."""
    found = _answers.get()
    return None if found is None else found.setdefault(kind, {})


def signature(graph: DataflowGraph, t: Tasklet) -> tuple:
    """``t`` in ``graph`` as a remembered answer's key: ids of the tasklet, of each memlet (with the
    version it reads or writes) and of its container's shape, with the dtype; built on networkx's
    adjacency dicts (the graph's ``reads`` and ``writes`` lists cost twice as much, and most
    questions are answered).  Valid while the objects ``held`` keeps stay alive."""
    containers = graph.containers
    key = [id(t)]
    for edges in (graph.nx._pred[t.name], graph.nx._succ[t.name]):
        for access, keyed in edges.items():
            for d in keyed.values():
                m = d["memlet"]
                c = containers[m.container]
                key += (access, id(m), id(c.shape), c.dtype)
        key.append(None)  # reads, then writes
    return tuple(key)


def held(graph: DataflowGraph, t: Tasklet) -> tuple:
    """The objects whose ids ``signature`` holds, to keep alive with an answer keyed by it."""
    return t, [(d["memlet"], graph.containers[d["memlet"].container].shape)
               for edges in (graph.nx._pred[t.name], graph.nx._succ[t.name])
               for keyed in edges.values() for d in keyed.values()]
