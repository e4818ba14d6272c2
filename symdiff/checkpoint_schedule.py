"""Which states of a loop the reverse pass stores, and how it recomputes the others.

Reversing ``n`` iterations of a loop needs the state going into each one, last
first.  Storing all of them costs ``n`` states; holding fewer means running
iterations again from a stored state.  The model is that of Griewank and
Walther's *revolve* (binomial checkpointing, ACM TOMS 26(1), 2000): the state
going into the first iteration is held, ``free`` more states may be stored at
once, an *advance* runs one iteration forward, and reversing an iteration (its
vector-Jacobian product) needs only the state going into it.  The fewest
advances that reverse ``n`` iterations are then

    T(n, free) = r * n - C(free + r + 1, r - 1),   r the smallest with n <= C(free + 1 + r, r)

(``T(n, 0) = n (n - 1) / 2``: every state recomputed from the first;
``T(n, free) = n - 1`` once ``free >= n - 2``).  With ``free`` about
``log(n)`` that is O(n log n), where storing every ``k``-th state with the
same memory costs O(n^2 / free).  ``reverse`` runs the optimal schedule:
advance ``split(n, free)`` iterations, store that state, reverse the rest with
one slot less, then the first part with the slot given back.

A loop's forward run stores the states the schedule's first chain of
advances passes (``Schedule.stored``), so the reverse pass starts from them;
``Online`` picks stored states when the trip count is unknown until the loop
ends (``sd.while_loop``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, TypeVar

State = TypeVar("State")


def cost(n: int, free: int) -> int:
    """The fewest advances that reverse ``n`` iterations from the state going into the first,
    with ``free`` more states stored at once (closed form above)."""
    if n <= 1:
        return 0
    r = 0
    while math.comb(free + 1 + r, r) < n:
        r += 1
    return r * n - math.comb(free + r + 1, r - 1)


def split(n: int, free: int) -> int:
    """How many iterations an optimal schedule advances before storing a state (``1 <= m < n``,
    ``n >= 2``, ``free >= 1``): the ``m`` minimising ``m + cost(n - m, free - 1) + cost(m, free)``,
    a convex function of ``m`` (each ``cost`` is convex, piecewise linear in ``n``), found by
    bisection on its differences."""
    def total(m: int) -> int:
        return m + cost(n - m, free - 1) + cost(m, free)

    lo, hi = 1, n - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if total(mid + 1) <= total(mid):
            lo = mid + 1
        else:
            hi = mid
    return lo


def reverse(state: State, start: int, end: int, free: int,
            advance: Callable[[State, int, int], State], adjoint: Callable[[int, State], None]) -> None:
    """Reverse iterations ``start .. end - 1`` (``adjoint(k, state going into k)``, ``k``
    decreasing) from ``state``, the one going into ``start``, holding at most ``free`` more
    states; ``advance(state, a, b)`` runs iterations ``a .. b - 1``.  Advances ``cost(end -
    start, free)`` iterations in all.  An explicit stack, not recursion: with many free slots the
    schedule nests as deep as the trip count."""
    stack = [(state, start, end, free)]
    while stack:
        x, a, b, s = stack.pop()
        if b - a == 1:
            adjoint(a, x)
        elif b - a > 1 and s == 0:
            for k in range(b - 1, a - 1, -1):
                adjoint(k, advance(x, a, k))
        elif b - a > 1:
            m = split(b - a, s)
            y = advance(x, a, a + m)
            stack.append((x, a, a + m, s))       # reversed second, with the slot y held given back
            stack.append((y, a + m, b, s - 1))   # reversed first
    return None


@dataclass(frozen=True)
class Schedule:
    """How one run of a loop is reversed: ``stored``, the iterations whose incoming state the
    forward run keeps (0 first); ``slots``, the states held at once (the stored ones and those
    the reverse pass recomputes and keeps; the state being advanced and the cotangent come on
    top).  Segment ``j`` (``stored[j]`` up to the next stored iteration) is reversed with the
    ``slots - j - 1`` slots the earlier stored states leave free."""

    kind: str          # "store every state" | "every k" | "binomial" | "online" | "state not read"
    trips: int
    slots: int
    stored: tuple[int, ...]

    def segments(self, trips: int | None = None) -> list[tuple[int, int, int]]:
        """``(start, end, free)`` of each segment, first to last, for a run of ``trips``
        iterations (a while loop may stop before the planned count)."""
        trips = self.trips if trips is None else trips
        points = [p for p in self.stored if p < trips] or [0]
        ends = points[1:] + [trips]
        return [(a, b, max(self.slots - j - 1, 0)) for j, (a, b) in enumerate(zip(points, ends))]

    def recomputed(self, trips: int | None = None) -> int:
        """Iterations the reverse pass runs again (on top of the forward run's ``trips``)."""
        if self.kind == "state not read":
            return 0
        return sum(cost(b - a, free) for a, b, free in self.segments(trips))

    def __str__(self) -> str:
        what = {"state not read": "the reverse step does not read the state (a constant Jacobian)",
                "store every state": "every state stored",
                "every k": f"a state stored every {self.stored[1] if len(self.stored) > 1 else self.trips} "
                           "iterations, those between recomputed",
                "binomial": f"binomial checkpointing (revolve) in {self.slots} state slots",
                "online": f"{len(self.stored)} states stored as the loop ran (trip count unknown until it "
                          f"ended), binomial checkpointing between them in {self.slots} state slots"}[self.kind]
        return (f"{self.trips:,} iterations, {what}: {len(self.stored):,} states stored by the forward "
                f"run, {self.recomputed():,} iterations run again by the reverse pass")


def unread(trips: int) -> Schedule:
    """For a loop whose reverse step does not read the state (its Jacobian is constant): the
    state going in is kept only as a placeholder argument, nothing is recomputed."""
    return Schedule("state not read", trips, 1, (0,))


def store_all(trips: int) -> Schedule:
    return Schedule("store every state", trips, max(trips, 1), tuple(range(max(trips, 1))))


def every(trips: int, k: int) -> Schedule:
    """A state stored every ``k`` iterations and the ``k`` in between recomputed once each:
    ``ceil(trips / k) + k - 1`` slots."""
    stored = tuple(range(0, max(trips, 1), k))
    return Schedule("every k", trips, len(stored) + k - 1, stored)


def binomial(trips: int, slots: int) -> Schedule:
    """The optimal schedule in ``slots`` states (``slots >= 1``: the one going in): the forward
    run stores the states of the first chain of advances ``reverse`` would make."""
    if slots >= trips:
        return store_all(trips)
    stored, at, free = [0], 0, slots - 1
    while trips - at > 1 and free > 0:
        at += split(trips - at, free)
        stored.append(at)
        free -= 1
    return Schedule("binomial", trips, slots, tuple(stored))


class Online:
    """Stored iterations for a loop whose trip count is known only when it ends: every state
    while ``slots`` hold them, then every 2nd, 4th, ... (those stored thinned to the new
    stride), so at most ``slots`` are held; the reverse pass then runs ``reverse`` on each
    segment (``Schedule.segments``)."""

    def __init__(self, slots: int):
        self.slots = max(slots, 1)
        self.stride = 1
        self.stored: list[int] = []

    def wants(self, n: int) -> bool:
        return n % self.stride == 0

    def add(self, n: int) -> list[int]:
        """Note that the state going into ``n`` was stored; returns the iterations whose stored
        states to drop."""
        self.stored.append(n)
        if len(self.stored) <= self.slots:
            return []
        self.stride *= 2
        drop = [p for p in self.stored if p % self.stride]
        self.stored = [p for p in self.stored if not p % self.stride]
        return drop

    def schedule(self, trips: int) -> Schedule:
        return Schedule("online" if self.stride > 1 else "store every state", trips, self.slots,
                        tuple(self.stored))
