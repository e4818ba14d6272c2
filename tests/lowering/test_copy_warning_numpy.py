"""``sd.asarray`` says when it copies a numpy array before the upload (a
transposed layout, a dtype conversion, bool stored as int32), as it does for
torch and JAX arrays, so ``warnings.simplefilter("error", CopyWarning)``
keeps a hot loop copy-free; an array uploaded as it is stays silent."""
import warnings

import numpy as np
import pytest

import symdiff as sd
from symdiff import lowering
from symdiff.lowering.dlpack import CopyWarning

pytestmark = pytest.mark.skipif("cpu" not in lowering.available_devices(), reason="no slangpy CPU device")


@pytest.mark.parametrize("make, dtype, reason", [
    (lambda: np.arange(6, dtype=np.float32).reshape(2, 3).T, None, "layout"),
    (lambda: np.arange(3, dtype=np.float64), "float32", "float64 is stored as float32"),
    (lambda: np.array([True, False]), None, "bool is stored as int32"),
])
def test_numpy_arrays_copied_before_upload_warn(make, dtype, reason):
    host = make()
    with pytest.warns(CopyWarning, match=reason):
        array = sd.asarray(host, device="cpu", dtype=dtype)
    np.testing.assert_array_equal(array.numpy(), host)


def test_numpy_arrays_uploaded_as_they_are_and_lists_do_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error", CopyWarning)
        sd.asarray(np.arange(6, dtype=np.float32).reshape(2, 3), device="cpu")
        sd.asarray(np.linspace(0, 1, 4), device="cpu")          # float64 stays float64
        sd.asarray([1.0, 2.0], device="cpu")
