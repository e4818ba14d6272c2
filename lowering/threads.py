"""How a kernel's points (its linear thread box) become dispatched threads.

On lavapipe and GPUs every point is a thread: lavapipe runs neighbouring
threads in SIMD lanes.  The CPU device runs its threads one after another and
each thread costs ~20 ns of call overhead (measured when every point was a
thread; the per-kernel call from ``run_program`` is of the same kind) against ~1 ns for the work of a simple element, so there
one thread loops over ``CPU_POINTS_PER_THREAD`` consecutive points: the
overhead is paid once per run, and the tight loop over contiguous elements
is what g++ -O3 vectorises.

A dispatch dimension holds at most 65535 groups, so more threads than one row
of groups are laid out as rows of equal width (a multiple of the group size):
the last row is the only one partly idle.
"""
from __future__ import annotations

from dataclasses import dataclass

from . import targets

GROUP_SIZE = 256
MAX_GROUPS = 65535  # per dispatch dimension
ROW_THREADS = GROUP_SIZE * MAX_GROUPS  # most threads in one row of a dispatch
CPU_POINTS_PER_THREAD = 1024


@dataclass(frozen=True)
class Threads:
    """``points`` linear points, ``per_thread`` consecutive ones per thread."""

    points: int
    per_thread: int = 1

    @classmethod
    def for_device(cls, points: int, device: "str | targets.Target") -> "Threads":
        """Points per thread on a device kind (``lowering.targets``): many where threads run in sequence."""
        return cls(points, CPU_POINTS_PER_THREAD if targets.of(device).sequential and points > 1 else 1)

    @property
    def count(self) -> int:
        """Threads that have work."""
        return -(-self.points // self.per_thread)

    @property
    def row(self) -> int:
        """Threads per dispatch row: rows as even as whole groups allow."""
        rows = -(-self.count // ROW_THREADS)
        return -(-self.count // (rows * GROUP_SIZE)) * GROUP_SIZE

    @property
    def thread_count(self) -> list[int]:
        """``thread_count`` of the dispatch."""
        if self.count <= ROW_THREADS:
            return [self.count, 1, 1]
        return [self.row, -(-self.count // self.row), 1]

    def open(self, var: str) -> list[str]:
        """Lines giving each of this thread's points in ``var``, in a loop
        (closed by ``close``) when a thread has several."""
        thread = f"int(tid.x) + int(tid.y) * {self.row}" if self.count > ROW_THREADS else "int(tid.x)"
        if self.per_thread == 1:
            return [f"int {var} = {thread};", f"if ({var} >= {self.points}) return;"]
        if self.count > ROW_THREADS:
            thread = f"({thread})"
        return [f"int first = {thread} * {self.per_thread};",
                f"for (int {var} = first; {var} < min(first + {self.per_thread}, {self.points}); {var}++)",
                "{"]

    def close(self) -> list[str]:
        return ["}"] if self.per_thread > 1 else []
