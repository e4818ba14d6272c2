"""Reductions with where= and initial=, the nan* reductions, average, cov,
corrcoef, argmax / argmin (issue 31's selections) against jax.numpy float64:
value and VJP on the numpy device.  Inputs are away from ties (arrays()), so
the non-smooth max/min/argmax points where JAX and numpy may split a
gradient differently are not probed, except where a test says so."""
import numpy as np
import pytest

from numpy_oracle import arrays, check, refused

X, Y = arrays((3, 4), (3, 4), seed=3)
D = arrays((2, 3, 4), seed=4)[0]
V = arrays((5,), seed=5)[0]
S = arrays((), seed=6)[0]
W = np.abs(arrays((4,), seed=7)[0])
XN = X.copy()
XN[0, 1] = XN[2, 3] = np.nan       # NaNs for the nan* reductions (their gradient there is 0 in both)
XN_ROW = XN.copy()
XN_ROW[1, :] = np.nan              # an all-NaN row: nanmax/nanmean give NaN there

CASES = {
    "sum_where": (lambda xp, x: xp.sum(x, where=x > 0), X),
    "sum_where_axis_keepdims": (lambda xp, x: xp.sum(x, axis=1, where=x > 0, keepdims=True), X),
    "sum_where_broadcast_mask": (lambda xp, x: xp.sum(x, axis=0, where=xp.arange(4) % 2 == 0), X),
    "sum_where_tuple_axes": (lambda xp, d: xp.sum(d, axis=(0, -1), where=d < 1), D),
    "sum_initial": (lambda xp, x: xp.sum(x, axis=0, initial=2.5), X),
    "sum_where_0d": (lambda xp, s: xp.sum(s, where=s > -5), S),
    "prod_where": (lambda xp, x: xp.prod(x, axis=-1, where=xp.abs(x) < 1.5), X),
    "mean_where": (lambda xp, x: xp.mean(x, axis=-1, where=x > -1), X),
    "mean_where_all": (lambda xp, d: xp.mean(d, where=d > 0), D),
    "max_where_initial": (lambda xp, x: xp.max(x, axis=0, where=x < 1.5, initial=-5.0), X),
    "min_where_initial_keepdims": (lambda xp, d: xp.min(d, axis=(1, 2), where=d > -1, initial=9.0,
                                                        keepdims=True), D),
    "max_initial_binding": (lambda xp, x: xp.max(x, axis=1, initial=1.9), X),
    "var_where": (lambda xp, x: xp.var(x, axis=1, where=x > -1.2), X),
    "std_where_ddof": (lambda xp, x: xp.std(x, axis=0, ddof=1, where=x > -1.8), X),
    "method_where": (lambda xp, x: x.sum(axis=1, where=x > 0) + x.max(axis=1, where=x > 0, initial=0.0), X),
    "any_all_where": (lambda xp, x: xp.where(xp.any(x > 1, axis=1, where=x < 0) | xp.all(x > 0, axis=1, where=x > 1),
                                             x[:, 0], -x[:, 1]), X),
    "nansum": (lambda xp, x: xp.nansum(x) + xp.nansum(x, axis=0), XN),
    "nansum_keepdims": (lambda xp, d: xp.nansum(d, axis=(-1, 0), keepdims=True), D),
    "nanprod": (lambda xp, x: xp.nanprod(x, axis=1), XN),
    "nanmean": (lambda xp, x: xp.nanmean(x, axis=-1), XN),
    "nanmean_all": (lambda xp, x: xp.nanmean(x), XN),
    "nanmax": (lambda xp, x: xp.nanmax(x, axis=1), XN),
    "nanmin_keepdims": (lambda xp, x: xp.nanmin(x, axis=0, keepdims=True), XN),
    "nanvar_nanstd": (lambda xp, x: xp.nanvar(x, axis=1) + xp.nanstd(x, axis=1, ddof=1), XN),
    "nanmax_plain": (lambda xp, x: xp.nanmax(x), X),
    "average": (lambda xp, x: xp.average(x), X),
    "average_axis": (lambda xp, d: xp.average(d, axis=(0, 2)), D),
    "average_weights_1d": (lambda xp, x, w: xp.average(x, axis=1, weights=w), X, W),
    "average_weights_negative_axis": (lambda xp, d, w: xp.average(d, axis=-1, weights=w), D, W),
    "average_weights_full": (lambda xp, x, y: xp.average(x, weights=xp.abs(y) + 0.1), X, Y),
    "average_weights_full_axis": (lambda xp, x, y: xp.average(x, axis=0, weights=xp.abs(y) + 0.1), X, Y),
    "average_weights_tuple_axis": (lambda xp, d, x: xp.average(d, axis=(1, 2), weights=xp.abs(x) + 0.1), D, X),
    "average_weights_reversed_axes": (lambda xp, d, x: xp.average(d, axis=(-1, 1), weights=xp.abs(x.T) + 0.1),
                                      D, X),
    "average_returned": (lambda xp, x, w: xp.average(x, axis=1, weights=w, returned=True), X, W),
    "average_returned_plain": (lambda xp, d: xp.average(d, axis=1, returned=True), D),
    "average_keepdims": (lambda xp, x, w: xp.average(x, axis=1, weights=w, keepdims=True), X, W),
    "cov": (lambda xp, x: xp.cov(x), X),
    "cov_rowvar_false": (lambda xp, x: xp.cov(x, rowvar=False), X),
    "cov_bias": (lambda xp, x: xp.cov(x, bias=True), X),
    "cov_ddof": (lambda xp, x: xp.cov(x, ddof=2), X),
    "cov_vector": (lambda xp, v: xp.cov(v), V),
    "cov_two": (lambda xp, x, y: xp.cov(x, y), X, Y),
    "cov_aweights": (lambda xp, x, w: xp.cov(x, aweights=w), X, W),
    "cov_fweights_aweights": (lambda xp, x, w: xp.cov(x, fweights=np.array([1, 2, 1, 3]), aweights=w), X, W),
    "cov_fweights": (lambda xp, x: xp.cov(x, fweights=np.array([1, 2, 1, 3]), bias=True), X),
    "cov_aweights_ddof0": (lambda xp, x, w: xp.cov(x, aweights=w, ddof=0), X, W),
    "corrcoef": (lambda xp, x: xp.corrcoef(x), X),
    "corrcoef_rowvar_false": (lambda xp, x: xp.corrcoef(x, rowvar=False), X),
    "corrcoef_two": (lambda xp, u, v: xp.corrcoef(u, v), V, V[::-1] ** 2),
    "argmax_gather": (lambda xp, v: v[xp.argmax(v)] * 2.0, V),
    "argmin_flat": (lambda xp, x: xp.ravel(x)[xp.argmin(x)], X),
    "argmax_take_along_axis": (lambda xp, x: xp.take_along_axis(x, xp.argmax(x, axis=1)[:, None], 1), X),
    "argmin_keepdims_take": (lambda xp, d: xp.take_along_axis(d, xp.argmin(d, axis=-2, keepdims=True), -2), D),
    "argmax_of_computed": (lambda xp, x, y: xp.take_along_axis(y, xp.argmax(x * y, axis=0)[None], 0), X, Y),
    "argmax_method": (lambda xp, x: x[0][x[1].argmax()] + x[2][x[2].argmin()], X),
    "argmax_of_ints_and_bools": (lambda xp, x: x[0][xp.argmax((x[1] * 3).astype(np.int32))]
                                 + x[1][xp.argmin(x[2] > 0)], X),
    "nanargmax_nanargmin": (lambda xp, x: xp.take_along_axis(x, xp.nanargmax(x, axis=1, keepdims=True), 1)
                            + xp.take_along_axis(x, xp.nanargmin(x, axis=1, keepdims=True), 1), XN),
}


@pytest.mark.parametrize("name", list(CASES))
def test_selection_matches_jax(name):
    body, *inputs = CASES[name]
    check(body, *inputs)


def test_all_nan_slices_give_nan_and_a_zero_gradient():
    """As in JAX: the NaN of an all-NaN (or all-masked) slice passes no gradient back."""
    check(lambda xp, x: (xp.nanmax(x, axis=1), xp.nanmin(x, axis=1, keepdims=True), xp.nanmean(x, axis=1),
                         xp.mean(x, axis=1, where=~xp.isnan(x))), XN_ROW)


def test_integer_reductions_with_where_and_initial():
    ints = np.array([[3, 1, 4], [1, 5, 9]], dtype=np.int32)
    check(lambda xp, x: (xp.max(x, axis=1, where=x < 5, initial=0), xp.min(x, axis=0, where=x > 1, initial=7),
                         xp.count_nonzero(x > 2, axis=1), xp.count_nonzero(x - 1)), ints, grad=False)


def test_empty_reductions_with_initial():
    check(lambda xp, x: xp.max(x[:, :0], axis=1, initial=1.5) + xp.min(x[:, :0], axis=-1, where=x[:, :0] > 0,
                                                                        initial=-2.0) + xp.sum(x[:0]), X)


INTS = np.array([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0], [5.0, -1.0, 5.0, -1.0]])
NANS = np.array([[1.0, np.nan, 3.0, np.nan], [2.0, 4.0, 4.0, 0.0], [np.nan, 9.0, 1.0, 9.0]])


@pytest.mark.parametrize("values", [INTS, NANS], ids=["ties", "nan"])
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
@pytest.mark.parametrize("keepdims", [False, True])
def test_argmax_argmin_first_index_rule(values, axis, keepdims):
    """Ties go to the first index and a NaN counts as the extremum (numpy's rules, JAX's too): values only."""
    check(lambda xp, x: (xp.argmax(x, axis=axis, keepdims=keepdims), xp.argmin(x, axis=axis, keepdims=keepdims)),
          values, grad=False)


def test_argmax_of_a_0d_and_size_1_array():
    check(lambda xp, s, v: (xp.argmax(s), xp.argmin(v[:1], axis=0, keepdims=True)), S, V, grad=False)


def test_selection_refusals():
    refused(lambda xp, x: xp.max(x, where=x > 0), X, match="needs initial=")
    refused(lambda xp, x: xp.average(x, weights=x[0]), X, match="give axis=")
    refused(lambda xp, d: xp.average(d, axis=(1, 2), weights=d[0, 0]), D, match="shape along axis")
    refused(lambda xp, x: xp.argmax(x[:0]), X, match="empty sequence")
    refused(lambda xp, x: xp.argmax(x, axis=(0, 1)), X, match="must be an int or None")
