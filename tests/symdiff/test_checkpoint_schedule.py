"""symdiff.checkpoint_schedule: the number of iterations the schedules advance, counted by running
them on a fake loop whose state is the iteration it goes into, against the optimum found by brute
force (dynamic programming over every place to store a state), independent of the closed form."""
from functools import lru_cache

import pytest

from symdiff import checkpoint_schedule as cs


@lru_cache(maxsize=None)
def optimum(n: int, free: int) -> int:
    """Fewest advances reversing n iterations from the first's state with `free` more slots: try
    every first store (advance m, store, reverse the rest with one slot less, then the first m)."""
    if n <= 1:
        return 0
    if free == 0:
        return n * (n - 1) // 2
    return min(m + optimum(n - m, free - 1) + optimum(m, free) for m in range(1, n))


class FakeLoop:
    """States are the iteration they go into; counts advances, checks the reversal order and
    how many states are held at once."""

    def __init__(self):
        self.advances, self.reversed = 0, []

    def advance(self, state, a, b):
        assert state == a and b >= a
        self.advances += b - a
        return b

    def adjoint(self, k, state):
        assert state == k
        self.reversed.append(k)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 13, 21, 34, 40])
@pytest.mark.parametrize("free", [0, 1, 2, 3, 5])
def test_reverse_advances_the_optimal_count_and_reverses_every_iteration_once(n, free):
    loop = FakeLoop()
    cs.reverse(0, 0, n, free, loop.advance, loop.adjoint)
    assert loop.reversed == list(range(n - 1, -1, -1))
    assert loop.advances == optimum(n, free) == cs.cost(n, free)


def _run(schedule, trips):
    """The reverse pass from the states a forward run stored (``schedule.stored``), segment by
    segment as the loop runtime runs it; returns the advances it made."""
    loop = FakeLoop()
    for start, end, free in reversed(schedule.segments(trips)):
        cs.reverse(start, start, end, free, loop.advance, loop.adjoint)
    assert loop.reversed == list(range(trips - 1, -1, -1))
    return loop.advances


@pytest.mark.parametrize("trips", [1, 4, 10, 30, 55])
@pytest.mark.parametrize("slots", [1, 2, 3, 4, 6])
def test_binomial_schedule_with_the_forward_run_reaches_revolves_optimum(trips, slots):
    schedule = cs.binomial(trips, slots)
    advances = _run(schedule, trips)
    assert len(schedule.stored) <= slots
    assert advances == schedule.recomputed()
    # the forward run's advances up to the last stored state are the schedule's first chain
    assert max(schedule.stored) + advances == optimum(trips, slots - 1)


def test_binomial_against_storing_every_kth_state_in_the_same_memory():
    trips = 1000
    interval = cs.every(trips, 10)           # 100 stored + 9 recomputed at a time: 109 slots
    assert interval.recomputed() == (trips // 10) * 9
    same = cs.binomial(trips, interval.slots)
    assert same.recomputed() == trips - interval.slots   # each state not stored recomputed once
    # 8 slots, fewer than sqrt(1000): every 125th state stored and each segment recomputed from its
    # start costs O(N^2 / k); binomial checkpointing O(N log N)
    quadratic = (trips // 125) * cs.cost(125, 0)
    few = cs.binomial(trips, 8)
    assert _run(few, trips) == few.recomputed() < 4 * trips < quadratic / 10


def test_every_state_fits():
    schedule = cs.binomial(20, 20)
    assert schedule.kind == "store every state" and schedule.recomputed() == 0
    assert _run(schedule, 20) == 0


@pytest.mark.parametrize("trips", [0, 1, 3, 7, 16, 41])
@pytest.mark.parametrize("slots", [1, 3, 5])
def test_online_stores_at_most_slots_and_reverses_everything(trips, slots):
    online = cs.Online(slots)
    kept = set()
    for n in range(trips):
        if online.wants(n):
            kept.add(n)
            kept -= set(online.add(n))
            assert len(kept) <= slots
    assert sorted(kept) == online.stored
    if trips:
        _run(online.schedule(trips), trips)
