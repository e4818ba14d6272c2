"""``C = alpha A B + beta C`` in place, through the BLAS numpy itself calls.

``numpy.matmul`` has no ``alpha`` and no ``beta``: a product that adds into
its output (a weight used at every step of an unrolled RNN: 64 of the large
RNN's 159 products; attention's input gradient, three products into one)
cost a temporary the size of the output and a pass adding it, and a scaled
one (a mean's ``1 / n``, attention's ``1 / sqrt(d)``) a pass multiplying it
(``host_products.HostProduct.bound``).  GEMM does both in its own pass over
the output.  scipy's ``sgemm`` binding would be a second OpenBLAS with its own
thread pool, so this calls numpy's: the wheels' ``scipy-openblas`` exports
``scipy_cblas_sgemm64_`` (64-bit integers) or ``scipy_cblas_sgemm`` (32-bit),
found with ``ctypes``.  Elsewhere (a numpy built on another BLAS) there is
none and ``gemm`` says so; the products then take numpy's way.
"""
from __future__ import annotations

import ctypes
import functools
import glob
import os
from dataclasses import dataclass
from typing import Callable

import numpy as np

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112  # CBLAS enums (also in lowering.blas_calls' C++)
LETTERS = {"float32": "s", "float64": "d"}  # each dtype's BLAS routine letter: sgemm, dgemm


@dataclass(frozen=True)
class Library:
    """numpy's bundled OpenBLAS as ``lowering.blas_calls`` names it in C++: its
    file, each dtype's GEMM symbol, and whether its integers are 64-bit."""

    path: str
    symbols: dict[str, str]  # "float32" / "float64" -> the CBLAS GEMM's exported name
    wide: bool  # int64_t (the ``64_`` ABI) rather than int


@functools.cache
def library() -> Library | None:
    """numpy's bundled OpenBLAS with both GEMMs and a known ABI, or None."""
    root = os.path.dirname(np.__file__)
    for path in sorted(glob.glob(os.path.join(root, os.pardir, "numpy.libs", "*openblas*"))
                       + glob.glob(os.path.join(root, ".dylibs", "*openblas*"))):
        try:
            lib = ctypes.CDLL(path)  # already loaded by numpy: the same library and thread pool
        except OSError:
            continue
        for suffix in ("64_", ""):
            symbols = {dtype: f"scipy_cblas_{letter}gemm{suffix}" for dtype, letter in LETTERS.items()}
            if all(hasattr(lib, name) for name in symbols.values()):
                return Library(os.path.realpath(path), symbols, suffix == "64_")
    return None


@functools.cache
def _routines() -> dict[str, tuple[Callable, type, type]] | None:
    """``{"float32": (sgemm, its integer and real types), "float64": ...}`` of ``library()``."""
    found = library()
    if found is None:
        return None
    lib = ctypes.CDLL(found.path)
    integer = ctypes.c_int64 if found.wide else ctypes.c_int
    routines = {}
    for dtype, real in (("float32", ctypes.c_float), ("float64", ctypes.c_double)):
        fn = getattr(lib, found.symbols[dtype])
        fn.restype = None  # arguments are passed as ctypes values, made once (``_Gemm``)
        routines[dtype] = (fn, integer, real)
    return routines


def available() -> bool:
    """Whether numpy's BLAS can be called here (``gemm`` can return a call)."""
    return _routines() is not None


def _matrix(m: np.ndarray) -> tuple[bool, int] | None:
    """How BLAS reads 2-D view ``m`` in row-major terms: (transposed, leading
    dimension in elements), or None where it cannot (neither axis of unit
    stride with the other a whole row or column apart)."""
    item = m.itemsize
    (rows, columns), (row_step, column_step) = m.shape, m.strides
    if column_step == item and row_step % item == 0 and row_step >= max(columns, 1) * item:
        return False, row_step // item
    if row_step == item and column_step % item == 0 and column_step >= max(rows, 1) * item:
        return True, column_step // item
    if rows == 1 and column_step == item:  # one row: any row stride
        return False, max(columns, 1)
    if columns == 1 and row_step == item:
        return True, max(rows, 1)
    return None


@dataclass(frozen=True)
class Layout:
    """A row-major CBLAS GEMM over three 2-D views ``c = alpha a @ b + beta c``:
    its transposes, sizes and leading dimensions (in elements).  ``swapped``:
    ``c`` is column-major, so BLAS computes its transpose, row-major, as
    ``b^T a^T``: its first operand is ``b``."""

    trans_a: bool
    trans_b: bool
    m: int
    n: int
    k: int
    lda: int
    ldb: int
    ldc: int
    swapped: bool


def layout(a: np.ndarray | None, b: np.ndarray | None, c: np.ndarray) -> Layout | None:
    """How one GEMM computes ``c = alpha a @ b + beta c`` on 2-D views as they
    are (no copy), or None where an operand is missing (None: no such view),
    the dtypes differ or are not float32/float64, a view's strides are not a
    matrix BLAS reads as it is, or a matrix is empty.  It reads only shapes and
    strides: ``gemm`` runs it on memory, ``lowering.blas_calls`` emits it into
    the CPU device's program."""
    if a is None or b is None or not (a.ndim == b.ndim == c.ndim == 2) or len({a.dtype, b.dtype, c.dtype}) != 1 \
            or str(c.dtype) not in ("float32", "float64") or 0 in a.shape + b.shape:
        return None
    forms = [_matrix(x) for x in (a, b, c)]
    if None in forms:
        return None
    (ta, lda), (tb, ldb), (tc, ldc) = forms
    m, n = c.shape
    k = a.shape[1]
    if tc:  # a column-major output: its transpose, row-major, is b^T a^T
        return Layout(not tb, not ta, n, m, k, ldb, lda, ldc, True)
    return Layout(ta, tb, m, n, k, lda, ldb, ldc, False)


def gemm(a: np.ndarray | None, b: np.ndarray | None, c: np.ndarray) -> Callable[[float, float], None] | None:
    """``run(alpha, beta)`` computing ``c = alpha a @ b + beta c`` in place on
    2-D views (``c`` writeable, none of them copied), or None where numpy's
    BLAS is not found, ``layout`` has none, or ``c`` may overlap an operand
    (BLAS, unlike ``numpy.matmul``, would read what it has overwritten)."""
    routines = _routines()
    form = layout(a, b, c)
    if routines is None or form is None or np.may_share_memory(c, a) or np.may_share_memory(c, b):
        return None
    fn, integer, real = routines[str(c.dtype)]
    if form.swapped:
        a, b = b, a
    flag = lambda t: ctypes.c_int(TRANS if t else NO_TRANS)  # noqa: E731
    pointer = lambda x: ctypes.c_void_p(x.ctypes.data)  # noqa: E731
    return _Gemm(fn, real, (ctypes.c_int(ROW_MAJOR), flag(form.trans_a), flag(form.trans_b), integer(form.m),
                            integer(form.n), integer(form.k)),
                 (pointer(a), integer(form.lda), pointer(b), integer(form.ldb)), (pointer(c), integer(form.ldc)),
                 (a, b, c))


class _Gemm:
    """One GEMM over fixed views: ``gemm``'s ``run``.  Its arguments are ctypes
    values made once (converting 14 of them on every call cost more than
    numpy's matmul call, ~1.3 us), the last ``alpha`` and ``beta`` too; it
    holds the views, so their memory outlives the pointers it passes."""

    __slots__ = ("fn", "real", "head", "operands", "output", "views", "scalars", "arguments")

    def __init__(self, fn: Callable, real: type, head: tuple, operands: tuple, output: tuple, views: tuple):
        self.fn, self.real, self.head, self.operands, self.output, self.views = fn, real, head, operands, output, views
        self.scalars, self.arguments = None, ()

    def __call__(self, alpha: float, beta: float) -> None:
        if (alpha, beta) != self.scalars:
            self.scalars = (alpha, beta)
            self.arguments = (*self.head, self.real(alpha), *self.operands, self.real(beta), *self.output)
        self.fn(*self.arguments)
