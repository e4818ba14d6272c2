"""np.any / np.all and max / min of booleans: numpy's results (any of
nothing is False, all of nothing is True, NaN counts as true), on the
interpreter and on the CPU device.  np.max of a bool array used to trace into
a max accumulation into a bool container, which validation refused."""
import numpy as np
import pytest

from symdiff import ir
from symdiff import lowering
from symdiff.ir.specs import f32


def reductions(x):
    return (np.any(x > 0.5), np.all(x > -5, axis=1), np.max(x > 0.9, axis=0), np.min(x < 2),
            np.any(x[:0] > 0), np.all(x[:0] > 0), (x > 0).any(axis=1, keepdims=True), x.all(axis=0), np.any(x))


X = np.array([[0.2, 0.7, np.nan, 0.0], [-10.0, 0.95, 0.3, 1.0], [0.0, 0.0, 0.0, 0.0]], dtype=np.float32)


@pytest.mark.parametrize("device", ["interpreter", "cpu"])
def test_boolean_reductions_match_numpy(device):
    graph = ir.trace(reductions, f32[3, 4])
    want = reductions(X)
    if device == "interpreter":
        got = ir.run(graph, {"x": X})
    elif device in lowering.available_devices():
        got = lowering.compile(graph, device=device)({"x": X})
    else:
        pytest.skip(f"no {device} device here")
    for name, w in zip(graph.meta.get("result_names", graph.results), want):
        assert got[name].dtype == np.bool_ and got[name].shape == np.shape(w), name
        np.testing.assert_array_equal(got[name], w, err_msg=name)
