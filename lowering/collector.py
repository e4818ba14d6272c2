"""Python's cyclic garbage collector, run less often while a program compiles.

Tracing, differentiating and planning allocate a great many small objects
(graph records, sympy expressions, a fork of the graph for each of the
planner's trials) that nearly all stay alive until the compile ends.  With
CPython's default thresholds (700, 10, 10) the collector walks them again and
again and frees almost nothing: elman_rnn large's plan took 0.43 s with them,
0.38 s with the first threshold at 50,000 and 0.36 s with no collection
(measured in one process, best of three plans of its graph).

Inside ``fewer_collections()`` the first threshold is at least
``COMPILE_THRESHOLD``; the thresholds in effect before come back when the
outermost block ends, unless someone set others meanwhile (then theirs stay).
Cycles that become garbage inside are still collected, later.  A collector
that is off (``gc.disable()`` or a first threshold of 0) stays off.
"""
from __future__ import annotations

import contextlib
import gc
import threading
from typing import Iterator

COMPILE_THRESHOLD = 50_000

_lock = threading.Lock()
_depth = 0  # blocks open, in every thread
_before: tuple[int, ...] = ()  # the thresholds the outermost open block found


@contextlib.contextmanager
def fewer_collections() -> Iterator[None]:
    """Collect garbage cycles less often until the block ends (the module docstring); blocks nest."""
    global _depth, _before
    with _lock:
        if _depth == 0:
            _before = gc.get_threshold()
            if 0 < _before[0] < COMPILE_THRESHOLD:
                gc.set_threshold(COMPILE_THRESHOLD, *_before[1:])
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and gc.get_threshold() == (max(_before[0], COMPILE_THRESHOLD), *_before[1:]):
                gc.set_threshold(*_before)
