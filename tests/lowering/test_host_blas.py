"""GEMM through numpy's own BLAS (lowering.host_blas): ``c = alpha a @ b + beta c``
in place for every way a view lays out a matrix, against float64 products with
a bound from the arithmetic, and the views it must refuse.

A float32 dot product of ``K`` terms is within ``K u sum_k |a_k b_k|`` of the
exact one whatever the summation order; ``alpha`` and ``beta c`` add a few
roundings more.  A transposed or misplaced operand misses it by orders of
magnitude.
"""
import itertools

import numpy as np
import pytest

from symdiff.lowering import host_blas

pytestmark = pytest.mark.skipif(not host_blas.available(), reason="numpy's BLAS is not one host_blas finds")


def laid_out(x: np.ndarray, way: str) -> np.ndarray:
    """A copy of ``x`` laid out ``way``: row-major, column-major, or row-major
    inside a wider array (a leading dimension past its row)."""
    if way in ("row", "column"):
        return np.array(x, order="C" if way == "row" else "F")
    wide = np.full((x.shape[0], x.shape[1] + 3), np.nan, x.dtype)
    wide[:, :x.shape[1]] = x
    return wide[:, :x.shape[1]]


WAYS = ("row", "column", "padded")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_every_layout_scaled_and_accumulated(dtype):
    r = np.random.default_rng(0)
    m, k, n = 9, 7, 11
    a0, b0, c0 = (r.standard_normal(s).astype(dtype) for s in [(m, k), (k, n), (m, n)])
    u = np.finfo(dtype).eps / 2
    exact = a0.astype(np.float64) @ b0.astype(np.float64)
    magnitude = np.abs(a0.astype(np.float64)) @ np.abs(b0.astype(np.float64))
    for ways in itertools.product(WAYS, repeat=3):
        a, b, c = laid_out(a0, ways[0]), laid_out(b0, ways[1]), laid_out(c0, ways[2])
        run = host_blas.gemm(a, b, c)
        assert run is not None, ways
        run(-2.5, 1.0)
        want = -2.5 * exact + c0
        assert np.all(np.abs(c - want) <= (k + 4) * u * (2.5 * magnitude + np.abs(c0))), ways
        run(0.5, 0.0)  # again over the same views: overwrite
        assert np.all(np.abs(c - 0.5 * exact) <= (k + 2) * u * 0.5 * magnitude), ways


def test_nan_in_the_output_is_overwritten_with_beta_zero():
    """A product that overwrites its output never reads it (a reused buffer may hold anything)."""
    a, b = np.ones((3, 4), np.float32), np.ones((4, 5), np.float32)
    c = np.full((3, 5), np.nan, np.float32)
    host_blas.gemm(a, b, c)(1.0, 0.0)
    np.testing.assert_array_equal(c, np.full((3, 5), 4, np.float32))


def test_views_it_refuses():
    a, b, c = np.ones((6, 4), np.float32), np.ones((4, 5), np.float32), np.zeros((6, 5), np.float32)
    assert host_blas.gemm(a[::2], b, c[::2]) is not None  # every other row: a leading dimension
    assert host_blas.gemm(a[:, ::2], b[::2], c) is None  # neither axis of unit stride
    assert host_blas.gemm(a, b.astype(np.float64), c) is None  # mixed dtypes
    assert host_blas.gemm(a.astype(np.int32), b.astype(np.int32), c.astype(np.int32)) is None
    assert host_blas.gemm(None, b, c) is None  # no view of the operand without a copy
    square = np.zeros((4, 4), np.float32)
    assert host_blas.gemm(square, square[:, :4], square) is None  # the output overlaps an operand
    assert host_blas.gemm(np.ones((0, 4), np.float32), b, np.zeros((0, 5), np.float32)) is None
