"""Device memory that executables keep between calls, bounded process-wide.

An executable keeps one *instance* per size binding: its plan, kernels and
every intermediate buffer, so a repeated call allocates nothing.  A user who
calls one program with many shapes, or explores many programs in a notebook,
would otherwise hold every buffer of every shape ever seen.  This module keeps
the process-wide picture: each instance's bytes, in least-recently-used
order, under a byte limit.  Past the limit the least recently used instances
of any live executable give their buffers back (their next call plans and
allocates again; compiled kernels stay in ``lowering.cache``).  An instance in
use by a running call is never taken, and the one a call is building is never
counted against itself, so a program larger than the limit still runs.

An executable that nothing can call any more takes its instances with it:
this registry holds executables weakly (an id can be reused by a new
executable only after the old one is gone, and its entries go first).

The limit: ``SYMDIFF_CACHE_BYTES`` in the environment (bytes), else
``DEFAULT_LIMIT``; ``set_limit`` changes it for the process.
"""
from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict
from typing import Protocol

from . import cache

DEFAULT_LIMIT = 2 << 30  # 2 GiB of buffers kept between calls, summed over every executable


class Holder(Protocol):
    """What the registry asks of an executable: give back one instance's
    buffers unless a call is using them (then say so with False)."""

    def release_instance(self, key: tuple) -> bool: ...


_lock = threading.Lock()
_held: "OrderedDict[tuple[int, tuple], tuple[weakref.ref, int, str]]" = OrderedDict()  # LRU first
_limit = int(os.environ.get("SYMDIFF_CACHE_BYTES", DEFAULT_LIMIT))


def limit() -> int:
    """Bytes of buffers kept between calls before the least recently used go."""
    return _limit


def set_limit(nbytes: int) -> None:
    """Change the limit for this process; instances past it are released now."""
    global _limit
    if nbytes < 0:
        raise ValueError(f"the cache limit is a number of bytes >= 0, not {nbytes}")
    _limit = int(nbytes)
    _evict(keep=None)


def hold(owner: Holder, key: tuple, nbytes: int, device: str) -> None:
    """Record that ``owner`` keeps ``nbytes`` for binding ``key`` (most
    recently used now), then release other instances past the limit."""
    ident = (id(owner), key)
    with _lock:
        if _held and next(reversed(_held)) == ident and _held[ident][1] == nbytes and _held[ident][0]() is owner:
            return  # the most recent already, with the same bytes: the total past the limit is as it was
        _purge()
        _held.pop(ident, None)
        _held[ident] = (weakref.ref(owner), nbytes, device)
    _evict(keep=ident)


def held_bytes(device: str | None = None) -> int:
    """Bytes of buffers live executables keep between calls (on ``device``)."""
    with _lock:
        _purge()
        return sum(n for _, n, d in _held.values() if device in (None, d))


def release_all() -> int:
    """Give back every instance no call is using; returns the bytes released."""
    return _release(lambda total: True, keep=None)


def clear_caches() -> int:
    """Give back every buffer executables keep between calls (but those of
    calls running now) and forget compiled kernels; returns the bytes given
    back.  Programs keep working: their next call plans and allocates again."""
    released = release_all()
    cache.clear()
    return released


def _evict(keep: tuple | None) -> None:
    _release(lambda total: total > _limit, keep)


def _release(still_over, keep: tuple | None) -> int:
    released = 0
    with _lock:
        _purge()
        total = sum(n for _, n, _ in _held.values())
        candidates = [(ident, ref, n) for ident, (ref, n, _) in _held.items() if ident != keep]
    for ident, ref, n in candidates:  # least recently used first
        if not still_over(total):
            break
        owner = ref()
        if owner is None or owner.release_instance(ident[1]):
            with _lock:
                _held.pop(ident, None)
            total -= n
            released += n
    return released


def _purge() -> None:
    """Drop the entries of executables that are gone (their buffers went with
    them).  Done lazily, under the lock: a weakref callback could run in the
    middle of a walk over ``_held``."""
    for ident in [i for i, (ref, _, _) in _held.items() if ref() is None]:
        del _held[ident]
