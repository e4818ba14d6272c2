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
each operand's index is affine in the domain symbols, so its elements are a
strided view of its container arranged as ``(batch..., rows, k)`` or
``(batch..., k, columns)`` (stride 0 along a batch axis it lacks: broadcast),
and the output's view is arranged alike.  The plan finds the product once,
when it places the tasklet (``plan_types.HostKernel.product``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np
import sympy

from symdiff.ir.graph import DataflowGraph, Memlet, Tasklet
from symdiff.ir.index_analysis import affine_coefficients

from . import targets

# Multiply-adds from which the host's BLAS beats the generated micro-kernel on the
# CPU device (bench/host_products.py: 128^3 and up on this 2-core machine).
MIN_WORK = 1 << 21


@dataclass(frozen=True)
class Operand:
    """A product's output or operand: its elements over the domain as a strided
    view of its container (every index component affine in the domain symbols:
    a transpose, a reshape's ``64*h + d``, a slice's offset, a diagonal)."""

    access: str  # the version read or written
    size: int  # elements of its container
    steps: tuple[tuple[str, int], ...]  # (domain symbol, element stride) of the symbols it uses
    offset: int  # the element at the domain's first point
    index: str  # the index as written, for the module's comment

    def axes(self) -> tuple[str, ...]:
        return tuple(s for s, _ in self.steps)


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
        return tuple(s for s in self.out.axes() if s not in (self.rows, self.columns))

    @property
    def work(self) -> int:
        """Multiply-adds."""
        return math.prod(e - b for _, b, e in self.ranges)

    def run(self, view: Callable[[Operand], np.ndarray]) -> None:
        """Compute into the output, reading and writing through ``view`` (an
        operand's whole container, flat, over its buffer's memory)."""
        a = _blasable(self._arranged(view(self.a), self.a, (*self.batch, self.rows, self.k)))
        b = _blasable(self._arranged(view(self.b), self.b, (*self.batch, self.k, self.columns)))
        out = self._arranged(view(self.out), self.out, (*self.batch, self.rows, self.columns), writeable=True)
        product = np.matmul(a, b)
        if self.coeff != 1:
            product *= product.dtype.type(self.coeff)
        if self.accumulate:
            out += product
        else:
            out[...] = product

    def _arranged(self, flat: np.ndarray, operand: Operand, order: tuple[str, ...],
                  writeable: bool = False) -> np.ndarray:
        """``operand``'s elements over the domain with its axes in ``order``: a
        strided view of its container (stride 0 along an axis it does not use)."""
        extent = {s: e - b for s, b, e in self.ranges}
        steps = dict(operand.steps)
        return np.lib.stride_tricks.as_strided(
            flat[operand.offset:], shape=tuple(extent[s] for s in order),
            strides=tuple(steps.get(s, 0) * flat.itemsize for s in order), writeable=writeable)


def _blasable(m: np.ndarray) -> np.ndarray:
    """``m`` itself where its last two axes are row-major and contiguous, else a
    row-major copy: numpy's matmul took 1.3 ms for a 256x256 @ 256x64 product
    whose operands were both transposed views, 0.05 ms on row-major ones
    (this machine), and the copy costs a pass over one operand.  (A broadcast
    batch axis, stride 0, is read in place.)"""
    item = m.itemsize
    row_major = m.ndim < 2 or (m.strides[-1] == item and m.strides[-2] == m.shape[-1] * item)
    return m if row_major else np.ascontiguousarray(m)


def host_product(graph: DataflowGraph, t: Tasklet, target: "targets.Target | None") -> HostProduct | None:
    """Tasklet ``t`` as a product the host's BLAS runs on ``target``, or None:
    the target runs BLAS on its buffers, ``t`` is a ``product`` of one float
    dtype, large enough to pay."""
    if target is None or not target.host_blas:
        return None
    found = product(graph, t)
    return found if found is not None and found.work >= MIN_WORK else None


def product(graph: DataflowGraph, t: Tasklet) -> HostProduct | None:
    """Tasklet ``t`` as a matrix product of strided views, or None: it sums
    ``coeff * a * b`` over one reduced symbol into an output indexed by
    distinct domain symbols, each operand's index affine in the domain symbols
    with integer coefficients, each operand owning an output axis the other
    lacks (no vector-matrix product), all of one float dtype."""
    writes, reads = graph.writes(t.name), graph.reads(t.name)
    if len(writes) != 1 or len(reads) != 2 or writes[0][1].accumulate != "sum" or t.condition is not sympy.true:
        return None
    (out_access, w), = writes
    symbols = t.index_symbols
    if len(set(w.index)) != len(w.index) or any(e not in symbols for e in w.index):
        return None
    reduced = [s for s in symbols if s not in w.index]
    coeff, rest = t.body[w.connector].as_coeff_Mul()
    factors = sorted(sympy.Mul.make_args(rest), key=str)
    connectors = {t.inputs[m.connector]: (a, m) for a, m in reads}
    if len(reduced) != 1 or len(connectors) != 2 or factors != sorted(connectors, key=str) or not coeff.is_number:
        return None
    dtypes = {graph.containers[m.container].dtype for m in [w] + [m for _, m in reads]}
    if len(dtypes) != 1 or dtypes & {"float32", "float64"} != dtypes:
        return None
    ranges = tuple((s.name, int(b), int(e)) for s, b, e in t.domain)
    operands = [_operand(graph, access, m, t) for access, m in [(out_access, w), *connectors.values()]]
    if any(o is None for o in operands):
        return None
    out, a, b = operands
    (k,) = (s.name for s in reduced)
    only_a = [s for s in out.axes() if s in a.axes() and s not in b.axes()]
    only_b = [s for s in out.axes() if s in b.axes() and s not in a.axes()]
    if k not in a.axes() or k not in b.axes() or not only_a or not only_b:
        return None
    return HostProduct(out, a, b, ranges, only_a[-1], only_b[-1], k, float(coeff), accumulate=False,
                       dtype=dtypes.pop())


def _operand(graph: DataflowGraph, access: str, m: Memlet, t: Tasklet) -> Operand | None:
    """The strided view of ``m``'s elements over ``t``'s domain, or None where an
    index component is not affine with integer coefficients."""
    shape = [int(n) for n in graph.containers[m.container].shape]
    strides = [math.prod(shape[d + 1:]) for d in range(len(shape))]
    symbols = t.index_symbols
    steps = dict.fromkeys((s.name for s in symbols), 0)
    offset = 0
    first = {s: b for s, b, _ in t.domain}
    for component, stride in zip(m.index, strides):
        form = affine_coefficients(sympy.sympify(component), list(symbols))
        if form is None or not all(sympy.sympify(c).is_Integer for c in form.values()):
            return None
        offset += stride * (int(form[1]) + sum(int(form[s]) * int(first[s]) for s in symbols))
        for s in symbols:
            steps[s.name] += stride * int(form[s])
    return Operand(access, math.prod(shape), tuple((s, n) for s, n in steps.items() if n), offset,
                   ", ".join(str(e) for e in m.index))
