"""Points to threads: per-thread point loops (CPU device) and dispatch rows,
checked against the interpreter where a thread's run of points ends mid-way."""
import numpy as np
import pytest

from symdiff import ir
from symdiff import lowering
from symdiff.lowering.targets import TUNING
from symdiff.lowering.threads import Threads
from lowering_graphs import chain, histogram, reduction


CPU_MIN_THREADS, CPU_POINTS_PER_THREAD = TUNING.cpu_min_threads, TUNING.cpu_points_per_thread
GROUP_SIZE, ROW_THREADS = TUNING.group_size, TUNING.row_threads


def test_cpu_threads_loop_over_runs_of_points():
    many = CPU_MIN_THREADS * CPU_POINTS_PER_THREAD * 3 + 5
    t = Threads.for_device(many, "cpu")
    assert t.per_thread == CPU_POINTS_PER_THREAD and t.count == 3 * CPU_MIN_THREADS + 1
    # fewer points: shorter runs, so that worker threads still have CPU_MIN_THREADS threads to share
    t = Threads.for_device(3 * CPU_POINTS_PER_THREAD + 5, "cpu")
    assert t.per_thread == (3 * CPU_POINTS_PER_THREAD + 5) // CPU_MIN_THREADS and t.count == CPU_MIN_THREADS + 1
    assert Threads.for_device(3 * CPU_POINTS_PER_THREAD + 5, "vulkan").count == 3 * CPU_POINTS_PER_THREAD + 5
    assert Threads.for_device(1, "cpu").per_thread == 1  # a single point needs no loop


@pytest.mark.parametrize("points", [ROW_THREADS + 1, 2 ** 24, 3 * ROW_THREADS - 7])
def test_dispatch_rows_are_even(points):
    t = Threads(points)
    width, rows, _ = t.thread_count
    assert width % GROUP_SIZE == 0 and width <= ROW_THREADS
    assert width * rows >= points and width * (rows - 1) < points
    assert width * rows - points < rows * GROUP_SIZE  # only the rounding to whole groups idles


def _agrees(graph, inputs, device, rtol=2e-5):
    got = lowering.compile(graph, device=device)(inputs)
    want = ir.run(graph, inputs)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=rtol, atol=1e-4, err_msg=name)


def test_point_runs_ending_mid_thread(device):
    _agrees(*chain(n=3 * CPU_POINTS_PER_THREAD + 5, ops=4), device)


def test_identity_fill_over_several_runs(device):
    # max-scatter: the result is first filled with -inf by a fill kernel of 2500 points
    graph, inputs = histogram("max", n=20000, bins=2500)
    _agrees(graph, inputs, device)


@pytest.mark.parametrize("axis", [None, 1])
def test_two_stage_reduction_with_a_partial_last_chunk(axis, device):
    _agrees(*reduction("sum", (37, 3001), axis), device, rtol=1e-4)
