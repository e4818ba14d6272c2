"""What every np.linalg device kernel shares: one workgroup per matrix.

A batch of small matrices is one dispatch with one workgroup per matrix (per
output matrix of a broadcast batch).  Inside it the matrix steps of the
algorithm (a pivot column, a trailing update) are spread over the
workgroup's threads, with a barrier between steps.  Where that does not pay
(``form``, derived from ``Target.sequential`` and
``Target.workgroup_reductions``, no field of its own) a matrix is one thread
running the same steps in order, without barriers: on slangpy's CPU device,
which runs a dispatch's threads one after another and has no barriers, and on
lavapipe, whose barriers cost more than the work between them.

Where the matrices live while the kernel works: in ``groupshared`` memory
when all of them fit ``SHARED_BYTES`` (Vulkan's guaranteed minimum of
``maxComputeSharedMemorySize``; CUDA allows 48 KiB statically), else in
device memory (the output buffer itself, or a scratch buffer the launch
allocates), with device-memory barriers.  On a sequential target they always
stay in device memory: there is no faster memory to copy them to.

Sizes: ``Tuning.linalg_max_n`` is the largest matrix a workgroup takes.  One workgroup per
matrix leaves a GPU idle on one large matrix (a 512 x 512 LU would run its
134M multiply-adds on one of the H100's 132 multiprocessors), and the
blocked multi-workgroup kernels that would suit it are not written: above
it the op runs as a host step (``lowering.host_steps``).  A workgroup's threads
and matrices are ``Tuning.linalg_threads`` and ``linalg_matrices``; the
groupshared budget (Vulkan's guaranteed minimum) and the workgroups along a
dispatch axis are limits of the API, not choices.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from symdiff.ir.graph import DTYPES

from ...targets import Target
from ..registry import Dispatch, Kernel

SHARED_BYTES = 16384
MAX_GROUPS = 65535    # workgroups along one dispatch axis


@dataclass(frozen=True)
class Form:
    """How a target runs the kernels: ``threads`` cooperating on each matrix
    (``concurrent``: with barriers), or one thread per matrix and
    ``matrices`` of them to a workgroup."""

    threads: int
    concurrent: bool
    matrices: int = 1

    @property
    def size(self) -> int:
        """Threads in a workgroup."""
        return self.threads * self.matrices

    def barrier(self, shared_only: bool) -> str:
        """The barrier between steps: none where the threads are one; group
        memory only when every matrix is groupshared."""
        if not self.concurrent:
            return ""
        return "GroupMemoryBarrierWithGroupSync();" if shared_only else "AllMemoryBarrierWithGroupSync();"

    def spread(self, var: str, start: str, stop: str) -> str:
        """A loop header giving each thread every ``threads``-th value of
        ``[start, stop)``.  Every loop of these kernels is ``[loop]`` (not
        unrolled): lavapipe compiles a shader at its first dispatch and unrolls
        constant-trip loops, and unrolling a step loop gains nothing."""
        if self.threads == 1:
            return f"[loop] for (int {var} = {start}; {var} < {stop}; {var}++)"
        return f"[loop] for (int {var} = {start} + t; {var} < {stop}; {var} += {self.threads})"


    def grid(self, rows: tuple[str, str], cols: tuple[str, str], body: str, lower: bool = False) -> str:
        """``body`` for every ``(i, j)`` of ``rows x cols`` (``lower``: only
        ``j <= i``).  Threads take columns and loop down them (consecutive
        threads touch consecutive elements of a row-major matrix: no
        groupshared bank conflicts); one thread loops along rows instead
        (consecutive elements in its inner loop)."""
        (r0, r1), (c0, c1) = rows, cols
        if self.concurrent:
            return (f"[loop] for (int j = {c0} + t; j < {c1}; j += {self.threads}) "
                    f"[loop] for (int i = {f'max({r0}, j)' if lower else r0}; i < {r1}; i++) {{ {body} }}")
        return (f"[loop] for (int i = {r0}; i < {r1}; i++) "
                f"[loop] for (int j = {c0}; j < {'i + 1' if lower else c1}; j++) {{ {body} }}")


def form(target: Target) -> Form:
    """Cooperative workgroups where a target's workgroups are worth their
    barriers (``Target.workgroup_reductions``, which says that of its
    reductions: Vulkan and CUDA on a GPU); one thread per matrix elsewhere:
    the CPU device has no barriers, and lavapipe's cost more than the work
    between them (value_and_grad of a solve over 64 matrices of 32 x 32:
    96 ms cooperative, measured)."""
    if target.sequential:
        return Form(1, False)
    tuning = target.tuning
    return Form(tuning.linalg_threads, True) if target.workgroup_reductions else Form(1, False, tuning.linalg_matrices)


def scalar(dtype: str) -> str:
    return {"float32": "float", "float64": "double"}[dtype]


def literal(value: float, dtype: str) -> str:
    text = repr(float(value))
    return text + ("l" if dtype == "float64" else "f")


def itemsize(dtype: str) -> int:
    return DTYPES[dtype]().itemsize


@dataclass
class Matrix:
    """A ``rows x cols`` matrix per workgroup: in ``groupshared`` memory
    (``shared``) or at ``base`` in the device buffer ``buffer``."""

    name: str
    rows: int
    cols: int
    shared: bool
    buffer: str
    base: str

    def at(self, i: str, j: str) -> str:
        flat = f"({i}) * {self.cols} + ({j})"
        return f"{self.name}[{flat}]" if self.shared else f"{self.buffer}[{self.base} + {flat}]"

    def flat(self, e: str) -> str:
        return f"{self.name}[{e}]" if self.shared else f"{self.buffer}[{self.base} + {e}]"

    def declaration(self, dtype: str) -> str:
        return f"groupshared {scalar(dtype)} {self.name}[{self.rows * self.cols}];" if self.shared else ""


def place(form_: Form, dtype: str, sizes: list[int]) -> list[bool]:
    """Which of the matrices of ``sizes`` elements go in groupshared memory:
    all of them where they fit together on a concurrent target, else none
    (one barrier kind for the whole kernel)."""
    fits = form_.concurrent and sum(sizes) * itemsize(dtype) <= SHARED_BYTES
    return [fits] * len(sizes)


def batch_offset(out_batch: tuple[int, ...], batch: tuple[int, ...], per_matrix: int) -> str:
    """The first element of operand matrix ``g`` (the output's batch index)
    for an operand whose batch shape ``batch`` broadcasts to ``out_batch``
    (numpy's rule: right-aligned, extent-1 axes repeat)."""
    if tuple(batch) == tuple(out_batch):
        return f"g * {per_matrix}" if out_batch else "0"
    padded = (1,) * (len(out_batch) - len(batch)) + tuple(batch)
    terms, stride = [], per_matrix
    for axis in reversed(range(len(out_batch))):
        if padded[axis] != 1:
            inner = math.prod(out_batch[axis + 1:])
            terms.append(f"((g / {inner}) % {out_batch[axis]}) * {stride}")
        stride *= padded[axis]
    return " + ".join(terms) or "0"


def kernel(source: str, entry: str, groups: int, form_: Form, buffers: dict[str, str],
           scratch: tuple[tuple[str, int], ...] = (), failure: str | None = None) -> Kernel:
    """The hook's ``Kernel``: one dispatch of the workgroups for ``groups``
    matrices (over two axes past ``MAX_GROUPS``), and ``info`` bound to
    scratch0 (one int32 per matrix), whose nonzero entries raise numpy's
    ``LinAlgError(failure)``."""
    x, y = _workgroups(groups, form_)
    dispatch = Dispatch(entry, (x * form_.size, y, 1), {**buffers, "info": "scratch0"})
    return Kernel(source, (dispatch,), (("int32", groups),) + scratch,
                  failure=None if failure is None else (0, failure))


def _workgroups(groups: int, form_: Form) -> tuple[int, int]:
    count = -(-groups // form_.matrices)
    x = min(count, MAX_GROUPS)
    return x, -(-count // x)


def entry_point(name: str, form_: Form, params: list[tuple[str, str]], body: str, groups: int,
                declarations: list[str]) -> str:
    """The kernel's text: groupshared declarations, then the entry point with
    ``g`` (the matrix) and ``t`` (the thread in its workgroup) defined."""
    args = ", ".join(f"RWStructuredBuffer<{ty}> {n}" for n, ty in params)
    x, _ = _workgroups(groups, form_)
    head = "\n".join(d for d in declarations if d)
    workgroup = f"int(gid.y) * {x} + int(gid.x)"
    g, t = (workgroup, "int(lid.x)") if form_.concurrent else (f"({workgroup}) * {form_.matrices} + int(lid.x)", "0")
    return f"""{head}

[shader("compute")]
[numthreads({form_.size}, 1, 1)]
void {name}(uint3 gid: SV_GroupID, uint3 lid: SV_GroupThreadID, {args})
{{
    int g = {g};
    if (g >= {groups}) return;
    int t = {t};
{body}
}}
"""
