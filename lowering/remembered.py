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
(which ``DataflowGraph.copy`` shares) and dtypes.  The answers and the objects they are keyed by are kept until it
closes, so no key outlives its objects; outside it nothing is remembered.
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
        answers = _answers.get()
        if answers is None:
            return question(graph, t)
        reads, writes = graph.reads(t.name), graph.writes(t.name)
        containers = [graph.containers[m.container] for _, m in reads + writes]
        key = (question, id(t), tuple((a, id(m)) for a, m in reads), tuple((a, id(m)) for a, m in writes),
               tuple((id(c.shape), c.dtype) for c in containers))
        found = answers.get(key)
        if found is None:
            # the objects whose ids the key holds stay alive with it
            found = answers[key] = (question(graph, t), t, reads, writes, [c.shape for c in containers])
        return found[0]
    return ask
