"""Matrix products through the host's BLAS, on a target whose buffers are host
memory (slangpy's CPU device): a kernel strategy for matmul-shaped tasklets.

The CPU device's generated micro-kernels (``lowering.matmul``) reach 40-90
GFLOP/s on one core of this machine and g++ takes seconds over their unrolled
blocks; numpy's ``matmul`` calls an optimised BLAS (OpenBLAS in numpy's
wheels) on every core with no compile at all.  So on such a target a product
large enough (``MIN_WORK`` multiply-adds) runs on the host between the Slang
launches of a call: its inputs are finished by the launches before, it writes
its result into its version's buffer in place (a numpy view of the buffer's
memory, no copy), and the launches after read it.  Its elementwise prologue
and epilogue (a bias, an activation, the reverse pass's products with the
activation's derivative) stay fused Slang kernels of their own.

Every form the reverse pass produces is one ``numpy.matmul`` over views:
each operand is transposed (a view) to ``(batch..., rows, k)`` and
``(batch..., k, columns)``, with a unit axis where it has no batch axis of the
output (broadcast), and the output's view is transposed alike.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from symdiff.ir.graph import DataflowGraph, Tasklet

from . import targets
from .matmul import matmul_shape

# Multiply-adds from which the host's BLAS beats the generated micro-kernel on the
# CPU device (bench/host_products.py: 128^3 and up on this 2-core machine).
MIN_WORK = 1 << 21


@dataclass(frozen=True)
class Operand:
    access: str  # the version read or written
    axes: tuple[str, ...]  # the domain symbol each index component is
    shape: tuple[int, ...]  # its container's


@dataclass(frozen=True)
class HostProduct:
    """``out (+)= coeff * a @ b`` over the tasklet's ranges, as numpy computes it."""

    out: Operand
    a: Operand
    b: Operand
    ranges: tuple[tuple[str, int, int], ...]  # (symbol, begin, end) of the domain
    rows: str
    columns: str
    k: str
    coeff: float
    accumulate: bool  # add into the output (another writer shares it), or overwrite it
    dtype: str

    def placed(self, buffer_of: Callable[[str], str], accumulate: bool) -> "HostProduct":
        """This product as a plan runs it: each operand in the version whose
        buffer holds it (``Plan.buffer_of``), adding into the output or not."""
        def moved(o: Operand) -> Operand:
            return replace(o, access=buffer_of(o.access))
        return replace(self, out=moved(self.out), a=moved(self.a), b=moved(self.b), accumulate=accumulate)

    @property
    def batch(self) -> tuple[str, ...]:
        return tuple(s for s in self.out.axes if s not in (self.rows, self.columns))

    @property
    def work(self) -> int:
        return math.prod(e - b for _, b, e in self.ranges)

    def run(self, view: Callable[[Operand], np.ndarray]) -> None:
        """Compute into the output, reading and writing through ``view`` (an
        operand's whole container as a numpy array over its buffer)."""
        a = self._arranged(view(self.a), self.a, (*self.batch, self.rows, self.k))
        b = self._arranged(view(self.b), self.b, (*self.batch, self.k, self.columns))
        out = self._arranged(view(self.out), self.out, (*self.batch, self.rows, self.columns))
        product = np.matmul(a, b)
        if self.coeff != 1:
            product *= product.dtype.type(self.coeff)
        if self.accumulate:
            out += product
        else:
            out[...] = product

    def _arranged(self, whole: np.ndarray, operand: Operand, order: tuple[str, ...]) -> np.ndarray:
        """``operand``'s elements over the domain, its axes in ``order`` (a unit
        axis where it has none of them), contiguous where BLAS needs it."""
        span = {s: (b, e) for s, b, e in self.ranges}
        sliced = whole[tuple(slice(*span[s]) for s in operand.axes)]
        arranged = np.transpose(sliced, [operand.axes.index(s) for s in order if s in operand.axes])
        shape = [arranged.shape[[s for s in order if s in operand.axes].index(s)] if s in operand.axes else 1
                 for s in order]
        return arranged.reshape(shape) if operand is self.out else _blasable(arranged.reshape(shape))


def _blasable(m: np.ndarray) -> np.ndarray:
    """``m`` itself where its last two axes are row-major and contiguous, else a
    row-major copy: numpy's matmul took 1.3 ms for a 256x256 @ 256x64 product
    whose operands were both transposed views, 0.05 ms on row-major ones
    (this machine), and the copy costs a pass over one operand."""
    item = m.itemsize
    row_major = m.ndim < 2 or (m.strides[-1] == item and m.strides[-2] == m.shape[-1] * item)
    return m if row_major else np.ascontiguousarray(m)


def host_product(graph: DataflowGraph, t: Tasklet, target: "targets.Target | None") -> HostProduct | None:
    """Tasklet ``t`` as a product the host's BLAS runs on ``target``, or None:
    the target runs BLAS on its buffers, ``t`` is matmul-shaped
    (``matmul.matmul_shape``: no vector-matrix product) with distinct axes
    per operand, all of one float dtype, and large enough to pay."""
    if target is None or not target.host_blas:
        return None
    shape = matmul_shape(graph, t)
    if shape is None or shape.vector:
        return None
    (out_access, w), = graph.writes(t.name)
    reads = {m.connector: (a, m) for a, m in graph.reads(t.name)}
    memlets = [w, reads[shape.a][1], reads[shape.b][1]]
    if any(len(set(m.index)) != len(m.index) for m in memlets):
        return None  # a diagonal (a[k, k]) is no strided view
    dtypes = {graph.containers[m.container].dtype for m in memlets}
    if len(dtypes) != 1 or dtypes & {"float32", "float64"} != dtypes:
        return None
    ranges = tuple((s.name, int(b), int(e)) for s, b, e in t.domain)
    if math.prod(e - b for _, b, e in ranges) < MIN_WORK:
        return None

    def operand(access: str, m) -> Operand:
        return Operand(access, tuple(s.name for s in m.index), tuple(int(n) for n in graph.containers[m.container].shape))
    return HostProduct(operand(out_access, w), operand(*reads[shape.a]), operand(*reads[shape.b]), ranges,
                       shape.row.name, shape.col.name, shape.k.name, float(shape.coeff), accumulate=False,
                       dtype=dtypes.pop())
