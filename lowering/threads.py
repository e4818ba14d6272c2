"""How a kernel's points (its linear thread box) become dispatched threads.

On lavapipe and GPUs every point is a thread: lavapipe runs neighbouring
threads in SIMD lanes.  The CPU device runs its threads one after another and
each thread costs ~20 ns of call overhead (measured when every point was a
thread; the per-kernel call from ``run_program`` is of the same kind) against
~1 ns for the work of a simple element, so there one thread loops over up to
``Tuning.cpu_points_per_thread`` consecutive points (``lowering.targets``): the overhead is paid once per
run, and the tight loop over contiguous elements is what g++ -O3 vectorises.

A dispatch dimension holds at most 65535 groups, so more threads than one row
of groups are laid out as rows of equal width (a multiple of the group size):
the last row is the only one partly idle.

Worker threads on the CPU device: slangpy holds the GIL through a dispatch
and its CPU backend runs a dispatch's threads on the calling thread, so
neither Python threads nor several devices run kernels side by side
(measured, docs/design.md "The CPU device's cores").  The generated C++ can
start threads itself: the program entry (``lowering.codegen``) hands each
kernel whose points are independent (no colliding update, no bounds flag) to
``symdiff_parallel``, a pool of C++ threads in the module's prelude
(``POOL_PRELUDE``), which runs equal contiguous slices of the kernel's
dispatched threads on ``workers`` threads and waits for all of them.  Every
point computes exactly what it computes alone (sums inside a point keep their
order), so results are bit-identical for every worker count.  Kernels with
less work than ``Tuning.min_work_per_worker`` per worker use fewer workers (a tiny
kernel runs on the calling thread alone): waking and joining a worker costs
more than that much work.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from . import compiler_cache, targets


@dataclass(frozen=True)
class Threads:
    """``points`` linear points, ``per_thread`` consecutive ones per thread,
    laid out in workgroups as ``tuning`` says."""

    points: int
    per_thread: int = 1
    tuning: targets.Tuning = targets.TUNING

    @classmethod
    def for_device(cls, points: int, device: "str | targets.Target") -> "Threads":
        """Points per thread on a device kind (``lowering.targets``): many where threads run in sequence."""
        target = targets.of(device)
        tuning = target.tuning
        if not target.sequential:
            return cls(points, 1, tuning)
        return cls(points, max(1, min(tuning.cpu_points_per_thread, points // tuning.cpu_min_threads)), tuning)

    @property
    def count(self) -> int:
        """Threads that have work."""
        return -(-self.points // self.per_thread)

    @property
    def row(self) -> int:
        """Threads per dispatch row: rows as even as whole groups allow."""
        group = self.tuning.group_size
        rows = -(-self.count // self.tuning.row_threads)
        return -(-self.count // (rows * group)) * group

    @property
    def thread_count(self) -> list[int]:
        """``thread_count`` of the dispatch."""
        if self.count <= self.tuning.row_threads:
            return [self.count, 1, 1]
        return [self.row, -(-self.count // self.row), 1]

    def _thread(self, operand: bool = False) -> str:
        """The dispatched thread's number (parenthesised as an ``operand`` of a product)."""
        if self.count > self.tuning.row_threads:
            many = f"int(tid.x) + int(tid.y) * {self.row}"
            return f"({many})" if operand else many
        return "int(tid.x)"

    def open(self, var: str) -> list[str]:
        """Lines giving each of this thread's points in ``var``, in a loop
        (closed by ``close``) when a thread has several."""
        if self.per_thread == 1:
            return [f"int {var} = {self._thread()};", f"if ({var} >= {self.points}) return;"]
        return [f"int first = {self._thread(True)} * {self.per_thread};",
                f"for (int {var} = first; {var} < min(first + {self.per_thread}, {self.points}); {var}++)",
                "{"]

    def close(self) -> list[str]:
        return ["}"] if self.per_thread > 1 else []

    def open_rows(self, length: int, row: str, column: str, per_row: list[str]) -> list[str]:
        """Lines giving this thread's points (several: ``per_thread > 1``) as
        rows of ``length`` points, ``row`` a point's row and ``column`` its
        place in it, in two loops closed by ``close_rows``; ``per_row`` (lines
        of the row's own values) runs once a row, before its points.

        The inner loop is a plain counted loop over ``column``, so an index
        affine in the point's coordinates is affine in the loop: with the
        point's ``lin / length`` and ``lin % length`` per point (``open``) g++
        found no affine evolution and did not vectorise a broadcasting
        ``tanh(x + b)`` (20 ms against numpy's 0.8)."""
        per = self.per_thread
        return ([f"int first = {self._thread(True)} * {per};",
                 f"int last = min(first + {per}, {self.points});",
                 f"for (int {row} = first / {length}; {row} * {length} < last; {row}++)",
                 "{"]
                + ["    " + line for line in per_row]
                + [f"    int {column}_end = min(last - {row} * {length}, {length});",
                   f"    for (int {column} = max(first - {row} * {length}, 0); {column} < {column}_end; {column}++)",
                   "    {"])

    @staticmethod
    def close_rows() -> list[str]:
        return ["    }", "}"]


# Environment variable overriding the CPU device's worker threads (default: the
# cores this process may run on).
WORKERS_ENV = "SYMDIFF_CPU_THREADS"


def cpu_workers() -> int:
    """Worker threads a CPU-device call uses: ``$SYMDIFF_CPU_THREADS``, else
    the cores this process may run on (its affinity mask, not the machine's)."""
    value = os.environ.get(WORKERS_ENV, "").strip()
    if value:
        try:
            n = int(value)
        except ValueError:
            n = 0
        if n < 1:
            raise ValueError(f"${WORKERS_ENV}={value!r}: expected a positive number of threads")
        return n
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no affinity masks on this platform
        return os.cpu_count() or 1


def worker_cap(work: int, dispatched: int, tuning: targets.Tuning | None = None) -> int:
    """Most workers worth giving a kernel of ``work`` (points times their loop
    lengths, ``KernelEntry.work``) over ``dispatched`` threads: one per
    ``tuning.min_work_per_worker`` of work (``targets.TUNING``'s by default),
    never more than threads."""
    least = (tuning or targets.TUNING).min_work_per_worker
    return max(1, min(dispatched, work // least))


# C++ put before the CPU module by ``__requirePrelude``: a pool of worker
# threads, one per module (its .so), started on first use.  A worker idle for
# a second ends (a process may hold many modules); the pool's destructor stops
# and joins its threads, so unloading the module never leaves a thread in its
# code.  ``symdiff_parallel(n, f)`` runs ``f(0)`` .. ``f(n - 1)``, the calling
# thread taking slices with the workers, and returns when all are done; false
# (nothing run) for ``n <= 1``, where the caller runs the kernel itself.
#
# It is written on POSIX threads, a function pointer and a context, not
# std::thread, std::function and std::condition_variable: g++ instantiates
# those templates in every library it compiles, precompiled prelude or not,
# and that took 0.26 of the 0.33 CPU s an empty module cost (measured here,
# g++ 12 -O3).  The pool is an ``inline`` variable, so a library linked from
# several objects still has one.
# ``run`` is out of line: g++ -O3 inlined it into every ``symdiff_parallel``
# instantiation, one per parallel dispatch (jacobi_2d_inplace large's module: 0.64 ->
# 0.42 s of g++ with it out of line, ffn_block large's 0.49 -> 0.43).
POOL_PRELUDE = compiler_cache.OWN_PRELUDE.lstrip("\n") + r""" (lowering.threads: the worker pool)
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

namespace symdiff_pool {
typedef void (*Slice)(void* context, int slice);
struct Pool;
struct Worker { pthread_t thread; bool finished; Pool* pool; };

struct Pool
{
    pthread_mutex_t call = PTHREAD_MUTEX_INITIALIZER;  // one parallel region at a time
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t wake = PTHREAD_COND_INITIALIZER, done = PTHREAD_COND_INITIALIZER;
    Worker** workers = nullptr;
    int count = 0, capacity = 0;
    Slice job = nullptr;
    void* context = nullptr;
    int slices = 0, next = 0, pending = 0;
    bool stop = false;

    bool ready() const { return stop || (job && next < slices); }

    static void* start(void* worker)
    {
        Worker* self = (Worker*)worker;
        self->pool->loop(self);
        return nullptr;
    }

    void loop(Worker* self)
    {
        pthread_mutex_lock(&m);
        for (;;)
        {
            timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_sec += 1;
            while (!ready() && pthread_cond_timedwait(&wake, &m, &until) != ETIMEDOUT) {}
            if (!ready() || stop) { self->finished = true; break; }
            int slice = next++;
            Slice f = job;
            void* c = context;
            pthread_mutex_unlock(&m);
            f(c, slice);
            pthread_mutex_lock(&m);
            if (--pending == 0) pthread_cond_signal(&done);
        }
        pthread_mutex_unlock(&m);
    }

    __attribute__((noinline)) void run(int n, Slice f, void* c)  // once, not in every caller
    {
        pthread_mutex_lock(&call);
        pthread_mutex_lock(&m);
        for (int i = 0; i < count;)  // join the workers that ended idle
        {
            if (workers[i]->finished) { pthread_join(workers[i]->thread, nullptr); free(workers[i]); workers[i] = workers[--count]; }
            else i++;
        }
        while (count < n - 1)
        {
            if (count == capacity)
            {
                capacity = capacity ? 2 * capacity : 8;
                workers = (Worker**)realloc(workers, capacity * sizeof(Worker*));
            }
            Worker* w = (Worker*)malloc(sizeof(Worker));
            w->finished = false;
            w->pool = this;
            if (pthread_create(&w->thread, nullptr, start, w) != 0) { free(w); break; }
            workers[count++] = w;
        }
        job = f; context = c; slices = n; next = 0; pending = n;
        pthread_mutex_unlock(&m);
        pthread_cond_broadcast(&wake);
        pthread_mutex_lock(&m);
        while (next < slices)  // the calling thread takes slices too (all of them if no worker started)
        {
            int slice = next++;
            pthread_mutex_unlock(&m);
            f(c, slice);
            pthread_mutex_lock(&m);
            --pending;
        }
        while (pending != 0) pthread_cond_wait(&done, &m);
        job = nullptr;
        pthread_mutex_unlock(&m);
        pthread_mutex_unlock(&call);
    }

    ~Pool()
    {
        pthread_mutex_lock(&m);
        stop = true;
        pthread_mutex_unlock(&m);
        pthread_cond_broadcast(&wake);
        for (int i = 0; i < count; i++) { pthread_join(workers[i]->thread, nullptr); free(workers[i]); }
        free(workers);
    }
};
inline Pool pool;
}

template <class F>
static bool symdiff_parallel(int n, const F& f)
{
    if (n <= 1) return false;
    symdiff_pool::pool.run(n, [](void* c, int s) { (*(const F*)c)(s); }, (void*)&f);
    return true;
}
"""


def parallel_kernel(name: str, params: list[str], dispatched: tuple[int, int], cap: int,
                    args: list[str], prefix: str) -> tuple[str, str]:
    """Slang for running kernel function ``name`` (a function of the thread id
    and ``params``, ``lowering.codegen``) over its ``x * y`` dispatched threads
    on up to ``cap`` workers, and the program entry's statement calling it with
    the buffers ``args`` (a kernel sharing another's code passes its own).

    ``<prefix>_slice(s, n, ...)`` runs slice ``s`` of ``n`` equal contiguous
    ranges of the threads (x fastest, as the single-thread loop runs them);
    ``<prefix>_workers(n, ...)`` hands the slices to the pool: a C++ intrinsic,
    emitted only into CPU modules, so its ``__target_switch`` has that one case
    (``lowering.targets``: no form is chosen by Slang between targets)."""
    x, y = dispatched
    names = [p.split()[-1] for p in params]
    passed = "".join(", " + a for a in names)
    typed = "".join(", " + p for p in params)
    total = x * y
    thread = f"uint3(t % {x}, t / {x}, 0)" if y > 1 else "uint3(t, 0, 0)"
    forwarded = "".join(f", ${k + 1}" for k in range(len(names)))
    text = (f"// kernel {name} in slices of its {total} thread(s), one slice a worker\n"
            f"__extern_cpp void {prefix}_slice(int s, int n{typed})\n{{\n"
            f"    int lo = int(int64_t({total}) * s / n), hi = int(int64_t({total}) * (s + 1) / n);\n"
            f"    for (int t = lo; t < hi; t++) {name}({thread}{passed});\n}}\n\n"
            f"bool {prefix}_workers(int n{typed})\n{{\n    __target_switch\n    {{\n    case cpp:\n"
            f"        __requirePrelude(R\"({POOL_PRELUDE})\");\n"
            f"        __intrinsic_asm \"symdiff_parallel($0, [&](int s) {{ {prefix}_slice(s, $0{forwarded}); }})\";\n"
            f"    }}\n}}\n")
    given = "".join(", " + a for a in args)
    call = f"if (!{prefix}_workers(min(workers, {cap}){given})) {prefix}_slice(0, 1{given});"
    return text, call
