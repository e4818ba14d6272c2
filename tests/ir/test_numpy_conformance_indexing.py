"""Index arrays combined with slices, ints and None, with numpy's placement of
the indexed dimensions (issue 31: ``G[k, e, idx[a, b]]``), and traced scalars
where numpy takes numbers (``np.linspace(a, b, n)``, ``np.arange(n) * h``):
value and VJP against jax.numpy float64 on the numpy device."""
import numpy as np
import pytest

from numpy_oracle import arrays, check, refused

X, D, G = arrays((3, 4), (2, 3, 4), (3, 4, 5, 6), seed=21)
V, S, T = arrays((3,), (), (), seed=22)
I = np.array([2, 0, 1, 1], dtype=np.int32)
J = np.array([[0, 3], [2, 1]], dtype=np.int32)

INDEXING = {
    "slice_then_array": (lambda xp, x, i, j: x[:, i], X),
    "two_arrays_broadcast": (lambda xp, x, i, j: x[i[:2], j[0]], X),
    "two_arrays_2d": (lambda xp, x, i, j: x[i[:2, None], j], X),
    "int_slice_array_separated": (lambda xp, d, i, j: d[1, :, i], D),
    "arrays_separated_by_slice": (lambda xp, d, i, j: d[i[1:3], :, j], D),
    "adjacent_arrays_after_slice": (lambda xp, d, i, j: d[:, i[:2, None], j[0]], D),
    "ints_then_array": (lambda xp, g, i, j: g[1, 2, j], G),          # G[k, e, idx[a, b]]
    "int_slice_array_slice": (lambda xp, g, i, j: g[1, :, j, 2:5], G),
    "slice_int_slice_array": (lambda xp, g, i, j: g[:, 2, :, j], G),
    "ellipsis_array": (lambda xp, g, i, j: g[..., j], G),
    "newaxis_array_slice_array": (lambda xp, g, i, j: g[None, i[:3], 1:, j[0, 0:1]], G),
    "chained": (lambda xp, x, i, j: x[i][:, j], X),
    "negative_int_with_array": (lambda xp, x, i, j: x[-1, i], X),
    "strided_slice_with_array": (lambda xp, g, i, j: g[::2, j, 1, ::-2], G),
}


@pytest.mark.parametrize("name", list(INDEXING))
def test_advanced_indexing_matches_jax(name):
    body, a = INDEXING[name]
    check(body, a, I, J)


SCALARS = {
    "linspace_traced_bounds": (lambda xp, a, b: xp.linspace(a, b, 5), S, T),
    "linspace_no_endpoint": (lambda xp, a, b: xp.linspace(a, b, 5, endpoint=False), S, T),
    "linspace_retstep": (lambda xp, a, b: xp.linspace(a, b, 4, retstep=True), S, T),
    "linspace_one_sample": (lambda xp, a, b: xp.linspace(a, 2.0, 1), S, T),
    "linspace_zero_samples": (lambda xp, a, b: xp.linspace(a, b, 0), S, T),
    "linspace_array_bounds_axis": (lambda xp, a, b: xp.linspace(a, b, 6, axis=-1), V, V[::-1] * 3),
    "linspace_broadcast_bounds": (lambda xp, a, b: xp.linspace(a, 3.0, 3, axis=1), V, T),
    "linspace_in_a_model": (lambda xp, a, b: xp.sin(xp.linspace(0.0, b, 7)) * a, S, T),
    "arange_times_traced_step": (lambda xp, a, b: xp.arange(5) * b + a, S, T),
}


@pytest.mark.parametrize("name", list(SCALARS))
def test_traced_scalars_where_numpy_takes_numbers(name):
    body, *inputs = SCALARS[name]
    check(body, *inputs)


def test_traced_counts_refused_with_the_fixed_count_form():
    assert "np.arange(n) * h" in refused(lambda xp, a, b: xp.arange(a), S, T, match="data-dependent")
    refused(lambda xp, a, b: xp.linspace(a, b, b), S, T, match="num must be a non-negative Python int")


def _vadv_like(xp, w, d):
    """NPBench vadv's pattern: np.ndarray / np.empty filled slice by slice (JAX: .at[].set)."""
    I, J, K = d.shape
    traced = xp is np
    ccol = np.ndarray((I, J, K), dtype=d.dtype) if traced else xp.zeros((I, J, K))
    dcol = np.empty((I, J, K)) if traced else xp.zeros((I, J, K))
    for k in range(K):
        c = w[:, :, k] * 0.5 + 1.0
        prev = dcol[:, :, k - 1] if k else 0.0
        if traced:
            ccol[:, :, k] = c
            dcol[:, :, k] = d[:, :, k] * ccol[:, :, k] + prev
        else:
            ccol = ccol.at[:, :, k].set(c)
            dcol = dcol.at[:, :, k].set(d[:, :, k] * ccol[:, :, k] + prev)
    return dcol


def test_ndarray_and_empty_filled_by_slices():
    d = arrays((3, 4, 5), seed=23)[0]
    check(_vadv_like, d, d[::-1] * 0.5)


def test_ndarray_stays_the_class_while_tracing():
    def body(xp, x):
        assert not isinstance(x, np.ndarray) and issubclass(np.ndarray, object)
        return x * float(np.ndarray.__name__ == "ndarray")
    check(body, X)
    refused(lambda xp, x: np.ndarray((2,), buffer=b"12345678") + x[0, 0], X, match="buffer=")
