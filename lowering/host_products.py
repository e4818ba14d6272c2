"""Matrix products through the host's BLAS, on a target whose buffers are host
memory (slangpy's CPU device): a kernel strategy for matmul-shaped tasklets.

The CPU device's generated micro-kernels (``lowering.matmul``) reach 40-90
GFLOP/s on one core of this machine and g++ takes seconds over their unrolled
blocks; numpy's ``matmul`` calls an optimised BLAS (OpenBLAS in numpy's
wheels) on every core with no compile at all.  So on such a target a product
large enough (``Tuning.host_blas_min_work`` multiply-adds) runs on the host between the Slang
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
when it places the tasklet (``plan_types.HostKernel.product``).  Where numpy's
OpenBLAS is found, the CPU device's program entry calls its GEMMs on those
views itself (``HostProduct.gemms``, ``lowering.blas_calls``) and no launch
runs on the host; ``bound`` runs the products it cannot express.
"""
from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np
import sympy

from symdiff.ir.graph import STORAGE_FLOATS, DataflowGraph, Memlet, Tasklet
from symdiff.ir.index_analysis import affine_coefficients

from . import host_blas, targets
from .remembered import remembered


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
    """``out (+)= coeff * scalars * sum over ks of a * b`` over the tasklet's
    ranges, as numpy computes it: the output's axes are the batch axes (in
    both operands), ``rows`` (in ``a`` only) and ``columns`` (in ``b`` only);
    the reduced axes ``ks`` are in both operands and not in the output."""

    out: Operand
    a: Operand
    b: Operand
    ranges: tuple[tuple[str, int, int], ...]  # (symbol, begin, end) of the domain, split symbols split
    rows: tuple[str, ...]
    columns: tuple[str, ...]
    ks: tuple[str, ...]
    coeff: float
    accumulate: bool  # add into the output (another writer shares it), or overwrite it
    dtype: str
    scalars: tuple[Operand, ...] = ()  # one-element factors (the reverse pass's seed), read when it runs

    def placed(self, buffer_of: Callable[[str], str], accumulate: bool) -> "HostProduct":
        """This product as a plan runs it: each operand in the version whose
        buffer holds it (``Plan.buffer_of``), adding into the output or not."""
        def moved(o: Operand) -> Operand:
            return replace(o, access=buffer_of(o.access))
        return replace(self, out=moved(self.out), a=moved(self.a), b=moved(self.b),
                       scalars=tuple(moved(s) for s in self.scalars), accumulate=accumulate)

    @property
    def accesses(self) -> tuple[str, ...]:
        """Every version it reads or writes (the launch binds their buffers)."""
        return (self.out.access, self.a.access, self.b.access, *(s.access for s in self.scalars))

    @property
    def k(self) -> str:
        """The reduced symbols, as the module's comment names them."""
        return ", ".join(self.ks)

    @property
    def batch(self) -> tuple[str, ...]:
        return tuple(s for s in self.out.axes() if s not in self.rows + self.columns)

    @property
    def work(self) -> int:
        """Multiply-adds."""
        return math.prod(e - b for _, b, e in self.ranges)

    def run(self, view: Callable[[Operand], np.ndarray]) -> None:
        """Compute into the output, reading and writing through ``view`` (an
        operand's whole container, flat, over its buffer's memory)."""
        self.bound(view)()

    def bound(self, view: Callable[[Operand], np.ndarray]) -> Callable[[], None]:
        """``run`` over the memory ``view`` gives, as a function of no arguments
        that a call runs again and again (``runtime`` keeps one per set of
        buffers): the strided views are made here once, since making them cost
        a sixth of the BLAS time of an unrolled RNN's 64x256x256 products (159
        a call).  Several row, column or reduced axes are merged into one, a
        view where their strides allow it; an operand they do not allow (or
        whose strides BLAS cannot take, ``_blasable``) is copied on every run,
        as its values change.

        A product of two matrices whose three views BLAS takes as they are is
        one GEMM on them (``host_blas``): its coefficient is GEMM's ``alpha``
        and a product adding into its output (another writer shares it) is
        ``beta = 1``, with no temporary and no pass over the output.  Else
        (a batch, a copied operand, no BLAS found) an output BLAS can write
        (``_layout``) is written by ``matmul`` itself, through its transpose
        where it is column-major, unless the product adds into it."""
        a_view, b_view, a_shape, b_shape, out, merged, lead = self._views(view)
        scalars = [view(s)[s.offset:s.offset + 1] for s in self.scalars]
        coeff, accumulate = self.coeff, self.accumulate
        gemm = None if merged is None or lead else \
            host_blas.gemm(_merged(a_view, a_shape), _merged(b_view, b_shape), merged)
        if gemm is not None:
            beta = 1.0 if accumulate else 0.0
            if not scalars:  # alpha known now: nothing computed per run
                return lambda: gemm(coeff, beta)
            return lambda: gemm(coeff * math.prod(float(s[0]) for s in scalars), beta)
        a, b = _operand_of(a_view, a_shape), _operand_of(b_view, b_shape)
        target = out if merged is None else merged
        layout = None if accumulate or merged is None else _layout(merged)

        def run() -> None:
            c = coeff * math.prod(float(s[0]) for s in scalars)
            if layout == "row":
                np.matmul(a(), b(), out=merged)
            elif layout == "column":
                np.matmul(np.swapaxes(b(), -1, -2), np.swapaxes(a(), -1, -2), out=np.swapaxes(merged, -1, -2))
            else:
                product = np.matmul(a(), b()).reshape(target.shape)
                if c != 1:
                    product *= product.dtype.type(c)
                if accumulate:
                    np.add(target, product, out=target)
                else:
                    target[...] = product
                return
            if c != 1:
                np.multiply(merged, merged.dtype.type(c), out=merged)
        return run

    def _views(self, view: Callable[[Operand], np.ndarray]) -> tuple:
        """The operands as ``bound`` hands them to numpy: ``a`` and ``b`` as
        strided views with their shapes once merged, the output's view, it
        merged (None where its strides do not allow it), and the batch's
        extents."""
        extent = {s: e - b for s, b, e in self.ranges}
        size = lambda axes: math.prod(extent[s] for s in axes)  # noqa: E731
        batch = self.batch
        lead = tuple(extent[s] for s in batch)
        a_view = self._arranged(view(self.a), self.a, (*batch, *self.rows, *self.ks))
        b_view = self._arranged(view(self.b), self.b, (*batch, *self.ks, *self.columns))
        a_shape, b_shape = (*lead, size(self.rows), size(self.ks)), (*lead, size(self.ks), size(self.columns))
        out = self._arranged(view(self.out), self.out, (*batch, *self.rows, *self.columns), writeable=True)
        return a_view, b_view, a_shape, b_shape, out, _merged(out, (*lead, size(self.rows), size(self.columns))), lead

    def gemms(self) -> "Gemms | None":
        """This product as GEMMs on its containers' elements (``lowering.blas_calls``
        emits them into the CPU device's program), or None where BLAS cannot
        read a view as it is (``host_blas.layout``) however the axes are split,
        or where the output shares a buffer with an operand (``bound``'s numpy
        fallback copies then).
        One GEMM a point of the batch axes, and of the outer row, column and
        reduced axes that do not merge with the inner ones into one matrix
        axis (attention's ``o @ wo`` over a head merge: rows ``(batch, token)``
        and reduced ``(head, d)`` of the heads' layout), those over reduced
        axes adding into the output after the first; as few loops as the
        strides allow.  The views are those ``bound`` makes, over no memory:
        only their strides and offsets are read."""
        if any(e <= b for _, b, e in self.ranges) or self.out.access in (self.a.access, self.b.access):
            return None  # an empty product, or one writing the buffer it reads (BLAS would read what it wrote)
        dtype = np.dtype(self.dtype)
        bases = {}

        def unbacked(o: Operand) -> np.ndarray:
            bases[o.access] = base = np.lib.stride_tricks.as_strided(np.zeros(1, dtype), (o.size,), (dtype.itemsize,))
            return base

        a_view, b_view, _, _, out_view, _, lead = self._views(unbacked)
        extent = {s: e - b for s, b, e in self.ranges}
        nb, nr, nk = len(lead), len(self.rows), len(self.ks)
        splits = sorted(itertools.product(range(nr), range(len(self.columns)), range(nk)), key=sum)
        for p, q, r in splits:  # rows[:p], columns[:q] and ks[:r] are loops
            def matrix(view: np.ndarray, groups: list[tuple[tuple[str, ...], int]]) -> np.ndarray | None:
                """``view`` at the loops' first point, each group's inner axes merged."""
                index = (0,) * nb + tuple(x for axes, loops in groups for x in (0,) * loops + (slice(None),) *
                                          (len(axes) - loops))
                return _merged(view[index], tuple(math.prod(extent[x] for x in axes[loops:]) for axes, loops in groups))
            a = matrix(a_view, [(self.rows, p), (self.ks, r)])
            b = matrix(b_view, [(self.ks, r), (self.columns, q)])
            out = matrix(out_view, [(self.rows, p), (self.columns, q)])
            form = None if a is None or b is None or out is None else host_blas.layout(a, b, out)
            if form is None:
                continue
            item = dtype.itemsize
            loops = [(n, a_view.strides[x] // item, b_view.strides[x] // item, out_view.strides[x] // item, False)
                     for x, n in enumerate(lead)]
            loops += [(extent[x], a_view.strides[nb + n] // item, 0, out_view.strides[nb + n] // item, False)
                      for n, x in enumerate(self.rows[:p])]
            loops += [(extent[x], 0, b_view.strides[nb + nk + n] // item, out_view.strides[nb + nr + n] // item, False)
                      for n, x in enumerate(self.columns[:q])]
            loops += [(extent[x], a_view.strides[nb + nr + n] // item, b_view.strides[nb + n] // item, 0, True)
                      for n, x in enumerate(self.ks[:r])]
            operands = [(self.a, a), (self.b, b)]
            if form.swapped:
                operands.reverse()
                loops = [(n, sb, sa, so, reduced) for n, sa, sb, so, reduced in loops]
            operands.append((self.out, out))
            return Gemms(form, tuple(o.access for o, _ in operands),
                         tuple((m.ctypes.data - bases[o.access].ctypes.data) // item for o, m in operands),
                         tuple(loops))
        return None

    def _arranged(self, flat: np.ndarray, operand: Operand, order: tuple[str, ...],
                  writeable: bool = False) -> np.ndarray:
        """``operand``'s elements over the domain with its axes in ``order``: a
        strided view of its container (stride 0 along an axis it does not use)."""
        extent = {s: e - b for s, b, e in self.ranges}
        steps = dict(operand.steps)
        return np.lib.stride_tricks.as_strided(
            flat[operand.offset:], shape=tuple(extent[s] for s in order),
            strides=tuple(steps.get(s, 0) * flat.itemsize for s in order), writeable=writeable)


@dataclass(frozen=True)
class Gemms:
    """A product as GEMMs (``HostProduct.gemms``): ``layout`` over the buffers
    of ``accesses`` (BLAS's first operand, its second, the output), from
    element ``offsets`` of each, and one GEMM a point of the ``loops``:
    (extent, element stride in each of the three, whether it is a reduced
    axis: the GEMMs after its first add into the output) a loop, outermost
    first."""

    layout: host_blas.Layout
    accesses: tuple[str, str, str]
    offsets: tuple[int, int, int]
    loops: tuple[tuple[int, int, int, int, bool], ...]


def _merged(m: np.ndarray, shape: tuple[int, ...]) -> np.ndarray | None:
    """``m`` reshaped to ``shape`` as a view of the same memory, or None where
    its strides need a copy for that (numpy refuses to set such a shape)."""
    merged = m.view()
    try:
        merged.shape = shape
    except AttributeError:
        return None
    return merged


def _operand_of(m: np.ndarray, shape: tuple[int, ...]) -> Callable[[], np.ndarray]:
    """A matmul operand of ``shape`` from view ``m`` as ``HostProduct.bound``'s
    runs read it: the view itself, made once, where BLAS takes it as it is,
    else a copy made on every run (the values change between runs)."""
    merged = _merged(m, shape)
    if merged is not None and _blasable(merged) is merged:
        return lambda: merged
    return lambda: _blasable(m.reshape(shape))


def _layout(m: np.ndarray) -> str | None:
    """``"row"`` or ``"column"`` where the last two axes of ``m`` are a matrix
    BLAS takes in place (one of unit stride, the other a whole row or column
    apart), else None."""
    item = m.itemsize
    (rows, columns), (row_step, column_step) = m.shape[-2:], m.strides[-2:]
    if column_step == item and row_step % item == 0 and row_step >= columns * item:
        return "row"
    if row_step == item and column_step % item == 0 and column_step >= rows * item:
        return "column"
    return None


def _blasable(m: np.ndarray) -> np.ndarray:
    """``m`` itself where numpy's matmul hands its last two axes to BLAS as
    they are (``_layout``: a row-major matrix or a transposed one), else a
    row-major copy.
    numpy falls back to its own loops for any other strides: a 256x256 @
    256x64 product took 1.3 ms over such views and 0.05 ms over row-major
    ones; but a copy of a transposed or head-split operand costs more than it
    saves (this machine, one BLAS thread: 64x256 @ a transposed 256x256 view
    70 us, copied first 124 us; attention's batched ``q @ k^T`` over
    head-split views 0.76 ms, copied first 2.2 ms).  A broadcast batch axis
    (stride 0) is read in place."""
    return m if m.ndim < 2 or _layout(m) is not None else np.ascontiguousarray(m)


def host_product(graph: DataflowGraph, t: Tasklet, target: "targets.Target | None") -> HostProduct | None:
    """Tasklet ``t`` as a product the host's BLAS runs on ``target``, or None:
    the target runs BLAS on its buffers, ``t`` is a ``general_product`` of
    one float dtype (BLAS reads no 16-bit floats), large enough to pay."""
    if target is None or not target.host_blas or \
            any(graph.containers[m.container].dtype in STORAGE_FLOATS for _, m in graph.reads(t.name)):
        return None
    found = general_product(graph, t)
    return found if found is not None and found.work >= target.tuning.host_blas_min_work else None


def product(graph: DataflowGraph, t: Tasklet) -> HostProduct | None:
    """Tasklet ``t`` as a plain matrix product, or None: a ``general_product``
    with one reduced symbol, an output indexed by distinct domain symbols and
    no one-element factor, the form the generated product kernels
    (``lowering.matmul``) also take."""
    found = general_product(graph, t)
    if found is None or len(found.ks) != 1 or found.scalars or found.ranges != _ranges(t):
        return None
    (_, w), = graph.writes(t.name)
    return found if all(e in t.index_symbols for e in w.index) else None


@remembered
def general_product(graph: DataflowGraph, t: Tasklet) -> HostProduct | None:
    """``_general_product``, remembered while planning (``lowering.remembered``): planning asks it of
    each tasklet in every pass and trial plan (elman_rnn 4096x256: 4,154 questions about 519
    distinct tasklets, a quarter of the plan's time)."""
    return _general_product(graph, t)


def _general_product(graph: DataflowGraph, t: Tasklet) -> HostProduct | None:
    """Tasklet ``t`` as a product of strided views, or None: it sums ``coeff *
    a * b`` (times any one-element reads: the reverse pass's seed) into an
    output that is a non-overlapping view, each index affine in the domain
    symbols with integer coefficients once a symbol read as ``floor(s / c)``
    and ``Mod(s, c)`` (a reshape's head split) is split in two, each operand
    owning an output axis the other lacks (no vector-matrix product), every
    reduced axis in both, all of one float dtype (or 16-bit floats read into float32)."""
    writes, reads = graph.writes(t.name), graph.reads(t.name)
    if len(writes) != 1 or len(reads) < 2 or writes[0][1].accumulate != "sum" or t.condition is not sympy.true:
        return None
    (out_access, w), = writes
    coeff, rest = t.body[w.connector].as_coeff_Mul()
    factors = sympy.Mul.make_args(rest)
    connectors = {t.inputs[m.connector]: (a, m) for a, m in reads}
    if not coeff.is_number or not same_factors(factors, tuple(connectors)):
        return None
    dtype = graph.containers[w.container].dtype
    widened = STORAGE_FLOATS if dtype == "float32" else ()  # 16-bit reads widened to float32 (``ir.storage``)
    if dtype not in ("float32", "float64") or \
            any(graph.containers[m.container].dtype not in (dtype, *widened) for _, m in reads):
        return None
    ranges, split = _split_ranges(t, [w.index] + [m.index for _, m in reads])
    if ranges is None:
        return None
    symbols = [s for s in t.index_symbols if s not in split] + [x for hi, lo, _ in split.values() for x in (hi, lo)]
    operands = [_operand(graph, access, m, ranges, symbols, split)
                for access, m in [(out_access, w), *connectors.values()]]
    if any(o is None for o in operands):
        return None
    out, *inputs = operands
    arrays = [o for o in inputs if o.steps]
    if len(arrays) != 2 or not _one_to_one(out, ranges):
        return None
    a, b = arrays
    extent = {s: e - lo for s, lo, e in ranges}
    out_axes, a_axes, b_axes = out.axes(), a.axes(), b.axes()
    ks = tuple(s for s in extent if s not in out_axes)
    rows = tuple(s for s in out_axes if s in a_axes and s not in b_axes)
    columns = tuple(s for s in out_axes if s in b_axes and s not in a_axes)
    if (not ks or not rows or not columns or any(s not in a_axes or s not in b_axes for s in ks)
            or any(s not in a_axes and s not in b_axes for s in out_axes)):
        return None
    return HostProduct(out, a, b, ranges, rows, columns, ks, float(coeff), accumulate=False, dtype=dtype,
                       scalars=tuple(o for o in inputs if not o.steps))


def same_factors(factors: tuple, symbols: tuple) -> bool:
    """``sorted(factors, key=str) == sorted(symbols, key=str)`` for distinct ``symbols``, without
    printing them where their names differ (a ``Mul``'s factors are distinct: then the lists are
    equal exactly when the sets are)."""
    if len(factors) != len(symbols) or set(factors) != set(symbols):
        return False
    return len({s.name for s in symbols}) == len(symbols) or sorted(factors, key=str) == sorted(symbols, key=str)


Split = dict  # domain symbol -> (its high symbol, its low symbol, the divisor)


def _ranges(t: Tasklet) -> tuple[tuple[str, int, int], ...]:
    return tuple((s.name, int(b), int(e)) for s, b, e in t.domain)


def _split_ranges(t: Tasklet, indices: list[tuple]) -> tuple[tuple | None, Split]:
    """The domain with every symbol ``s`` that an index reads as ``floor(s / c)``
    or ``Mod(s, c)`` split into ``s_hi`` over ``extent / c`` and ``s_lo`` over
    ``c`` (``s = c * s_hi + s_lo``), and those splits; None for the ranges
    where such a symbol does not start at 0 or ``c`` does not divide its
    extent, or two divisors split one symbol."""
    bounds = {s: (b, e) for s, b, e in t.domain}
    split: Split = {}
    for index in indices:
        for component in index:
            for f in _divisions(component):
                s, c = (f.args if isinstance(f, sympy.Mod) else sympy.fraction(f.args[0]))
                if s not in bounds or not c.is_Integer or c <= 1:
                    continue
                b, e = bounds[s]
                if split.get(s, (None, None, c))[2] != c or b != 0 or not sympy.sympify(e).is_Integer or int(e) % int(c):
                    return None, {}
                split[s] = (sympy.Symbol(f"{s.name}_hi", integer=True), sympy.Symbol(f"{s.name}_lo", integer=True),
                            int(c))
    ranges = []
    for s, b, e in t.domain:
        if s in split:
            hi, lo, c = split[s]
            ranges += [(hi.name, 0, int(e) // c), (lo.name, 0, c)]
        else:
            ranges.append((s.name, int(b), int(e)))
    return tuple(ranges), split


@functools.lru_cache(maxsize=16384)
def _divisions(component) -> tuple:
    """The ``floor`` and ``Mod`` terms of an index component (cached: every product's indices are
    read again in each trial plan)."""
    return tuple(sympy.sympify(component).atoms(sympy.floor, sympy.Mod))


def _unsplit(e: sympy.Expr, split: Split) -> sympy.Expr:
    """``e`` over the split symbols: ``floor(s / c)`` is ``s_hi``, ``Mod(s, c)`` is
    ``s_lo`` and ``s`` elsewhere is ``c * s_hi + s_lo``."""
    for s, (hi, lo, c) in split.items():
        e = e.xreplace({sympy.floor(s / c): hi, sympy.Mod(s, c): lo}).subs(s, c * hi + lo)
    return e


def _one_to_one(out: Operand, ranges: tuple) -> bool:
    """No two points of the output's axes share an element: its strides, in
    increasing order, each at least the span of the ones before."""
    extent = {s: e - b for s, b, e in ranges}
    span = 0
    for s, stride in sorted(out.steps, key=lambda step: step[1]):
        if stride <= span:
            return False
        span += stride * (extent[s] - 1)
    return True


def _operand(graph: DataflowGraph, access: str, m: Memlet, ranges: tuple, symbols: list,
             split: Split) -> Operand | None:
    """The strided view of ``m``'s elements over the (split) domain ``ranges``,
    or None where an index component is not affine with integer coefficients."""
    shape = [int(n) for n in graph.containers[m.container].shape]
    strides = [math.prod(shape[d + 1:]) for d in range(len(shape))]
    steps = dict.fromkeys((s for s, _, _ in ranges), 0)
    offset = 0
    first = {s: b for s, b, _ in ranges}
    symbols, split_items = tuple(symbols), tuple(split.items())
    for component, stride in zip(m.index, strides):
        form = _integer_form(component, symbols, split_items)
        if form is None:
            return None
        constant, coefficients = form
        offset += stride * (constant + sum(c * int(first[s.name]) for s, c in zip(symbols, coefficients)))
        for s, c in zip(symbols, coefficients):
            steps[s.name] += stride * c
    return Operand(access, math.prod(shape), tuple((s, n) for s, n in steps.items() if n), offset,
                   _written(m.index))


@functools.lru_cache(maxsize=16384)
def _integer_form(component, symbols: tuple, split: tuple) -> tuple[int, tuple[int, ...]] | None:
    """Index ``component`` over the (split, ``_unsplit``) domain ``symbols`` as its constant and each
    symbol's coefficient, or None where it is not affine with integer coefficients.  Cached: an
    unrolled loop's products repeat their index components."""
    form = affine_coefficients(_unsplit(sympy.sympify(component), dict(split)), list(symbols))
    if form is None or not all(sympy.sympify(c).is_Integer for c in form.values()):
        return None
    return int(form[1]), tuple(int(form[s]) for s in symbols)


@functools.lru_cache(maxsize=4096)
def _written(index: tuple) -> str:
    """An index as written (sympy prints slowly, and the operands of an unrolled loop's products share theirs)."""
    return ", ".join(str(e) for e in index)
