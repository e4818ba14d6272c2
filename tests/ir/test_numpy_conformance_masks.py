"""Boolean masks (issue 31): x[mask] inside a reduction and x[mask] = v are
rewritten as where; JAX has no x[mask] under tracing either, so its side is
the where form (jax_body).  Reads with a data-dependent shape, and slices
with data-dependent bounds, are refused with a message showing that form."""
import numpy as np
import pytest

from numpy_oracle import arrays, check, refused

X, Y = arrays((3, 4), (3, 4), seed=11)
D = arrays((2, 3, 4), seed=12)[0]
ROWS = np.array([True, False, True])


def store_scalar(xp, x, y):
    z = x * 1.0
    z[y > 0] = 0.5
    return z


def store_selection(xp, x, y):
    z = x * 1.0
    m = y > 0
    z[m] = y[m] * 2.0
    return z


def store_inplace(xp, x, y):
    z = x * 1.0
    m = y > 0
    z[m] *= 2.0
    z[m] += y[m]
    return z


def store_rows(xp, x, y):
    z = x * 1.0
    z[x[:, 0] > 0] = y[0]          # a row mask, the value broadcast over the row
    return z


def store_traced_scalar(xp, x, y):
    z = x * 1.0
    z[x < y] = y[0, 0]
    return z


CASES = {
    "sum": (lambda xp, x, y: xp.sum(x[x > 0]), lambda xp, x, y: xp.sum(x, where=x > 0)),
    "mean_method": (lambda xp, x, y: x[y > 0].mean(), lambda xp, x, y: xp.mean(x, where=y > 0)),
    "row_mask_axis0": (lambda xp, x, y: xp.sum(x[y[:, 0] > 0], axis=0),
                       lambda xp, x, y: xp.sum(x, axis=0, where=(y[:, 0] > 0)[:, None])),
    "row_mask_keepdims": (lambda xp, x, y: xp.mean(x[y[:, 0] < 1], axis=0, keepdims=True),
                          lambda xp, x, y: xp.mean(x, axis=0, where=(y[:, 0] < 1)[:, None], keepdims=True)),
    "numpy_mask": (lambda xp, x, y: xp.sum(x[ROWS] ** 2), lambda xp, x, y: xp.sum(x ** 2, where=ROWS[:, None])),
    "list_mask": (lambda xp, x, y: xp.mean(x[[True, False, True]]), lambda xp, x, y: xp.mean(x, where=ROWS[:, None])),
    "product_of_selections": (lambda xp, x, y: (lambda m: xp.max(x[m] * y[m], initial=-9.0))(y > 0),
                              lambda xp, x, y: xp.max(x * y, where=y > 0, initial=-9.0)),
    "selection_and_scalar": (lambda xp, x, y: xp.sum(2.0 * x[x > y] - 1.0) + xp.prod(x[x > y]),
                             lambda xp, x, y: xp.sum(2.0 * x - 1.0, where=x > y) + xp.prod(x, where=x > y)),
    "nansum_of_selection": (lambda xp, x, y: xp.nansum(x[y < 0]), lambda xp, x, y: xp.nansum(x, where=y < 0)),
    "var_std": (lambda xp, d, y: xp.var(d[d > -1]) + d[d < 1].std(),
                lambda xp, d, y: xp.var(d, where=d > -1) + xp.std(d, where=d < 1)),
    "ellipsis": (lambda xp, d, y: xp.sum(d[d > 0, ...]), lambda xp, d, y: xp.sum(d, where=d > 0)),
    "store_scalar": (store_scalar, lambda xp, x, y: xp.where(y > 0, 0.5, x)),
    "store_selection": (store_selection, lambda xp, x, y: xp.where(y > 0, y * 2.0, x)),
    "store_inplace": (store_inplace, lambda xp, x, y: xp.where(y > 0, x * 2.0 + y, x)),
    "store_rows": (store_rows, lambda xp, x, y: xp.where((x[:, 0] > 0)[:, None], y[0], x)),
    "store_traced_scalar": (store_traced_scalar, lambda xp, x, y: xp.where(x < y, y[0, 0], x)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_mask_matches_jax_where_form(name):
    body, jax_body = CASES[name]
    first = D if name in ("var_std", "ellipsis") else X
    check(body, first, Y, jax_body=jax_body)


@pytest.mark.parametrize("body", [
    lambda xp, x: x[x > 0],
    lambda xp, x: x[x > 0] * 2.0 + 1,
    lambda xp, x: xp.exp(x[x > 0]),
    lambda xp, x: xp.sort(x[x > 0]),
    lambda xp, x: x[x > 0].cumsum(),
    lambda xp, x: x[x > 0][0],
    lambda xp, x: x[x[:, 0] > 0, 1],
    lambda xp, x: xp.sum(x[x[:, 0] > 0], axis=1),
    lambda xp, x: x[0, int(0):x[0, 0] > 0] if False else x[0:x[0, 0]],
    lambda xp, x: xp.sum(x[x > 0] * x[x < 1]),
    lambda xp, x: xp.sum(x + x[x > 0]),
    lambda xp, x: xp.concatenate([x[0], x[x > 0]]),
], ids=["return", "arith_return", "exp_return", "sort", "method", "index", "mask_with_int", "keep_axis",
        "slice_bound", "two_masks", "full_array_first", "in_a_list"])
def test_data_dependent_shapes_refused_with_the_where_form(body):
    message = refused(body, X, match="data-dependent|different masks")
    assert "np.where" in message or "where=" in message


def test_store_of_a_wrongly_shaped_value_refused():
    def body(xp, x, y):
        z = x * 1.0
        z[x > 0] = y[:, 0]
        return z
    refused(body, X, Y, match="data-dependent placement")
