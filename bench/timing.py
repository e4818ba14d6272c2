"""Wall-clock measurement with a warm-up call, an adaptive repeat count and a time limit.

Every number in the report comes from ``measure``, so peers and symdiff are
timed the same way: one untimed warm-up call (it may compile), then as many
timed calls as fit in a budget (at least one, at most ``k_max``), reported as
min and median.  The warm-up is also where a too-slow configuration is caught:
a call that outlives its limit raises ``Timeout`` instead of stalling the run.
"""
from __future__ import annotations

import signal
import statistics
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterator


class Timeout(Exception):
    """A timed call exceeded its limit (the configuration is reported as "timeout")."""


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise ``Timeout`` in the main thread after ``seconds``.

    SIGALRM interrupts Python code between bytecodes, so a long C call (a g++
    compile, a kernel) finishes first; that is enough to keep a slow
    configuration from stalling the whole run."""
    def on_alarm(signum, frame):
        raise Timeout(f"exceeded {seconds:.0f} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def describe(exc: BaseException) -> str:
    """A table cell for a configuration that failed."""
    if isinstance(exc, Timeout):
        return "timeout"
    text = str(exc).strip().splitlines()
    return f"error: {type(exc).__name__}: {text[0][:100] if text else ''}"


@dataclass
class Timing:
    """Seconds: ``first`` is the warm-up call, ``min``/``median`` over ``k`` later calls."""

    first: float
    min: float
    median: float
    k: int

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """Seconds one call of ``fn`` takes, and what it returned."""
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def measure(fn: Callable[[], Any], *, budget: float, k_max: int, limit: float,
            settle: Callable[[], Any] | None = None) -> tuple[Timing, Any]:
    """Time ``fn`` (which must block until its result is ready) and return the
    timing and the last call's result, for a correctness check that costs no
    extra call.  ``settle`` runs untimed between the first call and the others
    (symdiff: its -O3 code compiled in the background comes in)."""
    with time_limit(limit):
        first, out = timed(fn)
        if settle is not None:
            settle()
    times: list[float] = []
    with time_limit(limit + budget):
        while not times or (len(times) < k_max and sum(times) < budget):
            t, out = timed(fn)
            times.append(t)
    return Timing(first, min(times), statistics.median(times), len(times)), out
