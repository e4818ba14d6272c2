"""numpy's reshape is a view only where the merged dimensions are contiguous
relative to each other; elsewhere (``A.T.reshape(-1)``, ``A[:, :2].ravel()``)
it is a copy, and a write into it leaves ``A`` as is.  The tracer used to make
every reshape a view, so such a write changed ``A`` (silently wrong values).
Writes through a view change ``A`` (tests/reshaped_writes.py)."""
import numpy as np
import pytest

from symdiff import ir
import symdiff as sd
from symdiff.ir.specs import f32
from reshaped_writes import check as check_reshaped_writes


def write_into_merged_columns(x):
    v = x[:, :2].reshape(-1)      # numpy: a copy
    v[3] = 7.0
    return x * 1.0 + np.sum(v)


def write_into_ravel_of_transpose(x):
    v = np.ravel(x.T)             # numpy: a copy
    v[1] = 7.0
    return x * 1.0 + np.sum(v * v)


def write_through_contiguous_views(x):
    v = x[1:].reshape(-1)         # contiguous rows: a view
    v[1] = 7.0
    w = x[:, :2].reshape(3, 2, 1)  # a split only: a view
    w[0, 1, 0] = -3.0
    return x * 1.0 + np.sum(x.T.reshape(-1)[::5])


CASES = [write_into_merged_columns, write_into_ravel_of_transpose, write_through_contiguous_views]


@pytest.mark.parametrize("fn", CASES, ids=[f.__name__ for f in CASES])
def test_reshape_is_a_view_or_a_copy_as_in_numpy(fn):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    want = fn(a.copy())
    got = ir.run(ir.trace(fn, f32[3, 4]), {"x": a.copy()})
    np.testing.assert_array_equal(list(got.values())[0], want)


@pytest.mark.parametrize("fn", CASES, ids=[f.__name__ for f in CASES])
def test_gradients_through_a_reshape_copy(fn):
    x = np.linspace(-1, 1, 12).reshape(3, 4)
    sd.gradcheck(lambda x: np.sum(fn(x) ** 2), x)


def test_writes_through_reshaped_views_values_like_numpy_gradients_like_jax():
    check_reshaped_writes(sd, "numpy")
