"""The graph corpus on every device, against the interpreter (``ir.run``)."""
import numpy as np
import pytest

from symdiff import ir
from symdiff import lowering
from lowering_graphs import CORPUS


def assert_agrees(graph, inputs, device, rtol=2e-5, atol=1e-5):
    exe = lowering.compile(graph, device=device)
    got = exe(inputs)
    want = ir.run(graph, inputs)
    assert set(got) == set(want)
    for name in want:
        assert got[name].dtype == want[name].dtype, name
        np.testing.assert_allclose(got[name], want[name], rtol=rtol, atol=atol, err_msg=f"{name} on {device}")
    return exe


@pytest.mark.parametrize("case", sorted(CORPUS))
def test_corpus_matches_interpreter(case, device):
    graph, inputs = CORPUS[case]()
    # long float32 sums are reassociated (partial sums): allow their rounding
    rtol = 1e-4 if "large" in case or "long" in case else 2e-5
    assert_agrees(graph, inputs, device, rtol=rtol, atol=1e-4)


def test_max_and_min_of_int32_values(device):
    """Integer reductions by max and min (their identities are int32's extremes), used as an index."""
    import symdiff as sd

    def f(i: sd.i32[7], x: sd.f32[7]):
        return x[np.max(i)] * np.min(i) + np.sum(x)
    program = sd.differentiable_program(f)
    i, x = np.array([3, -2, 5, 1, 0, 6, 2], np.int32), np.arange(7, dtype=np.float32)
    value, grads = program.value_and_grad(i, x, wrt=["x"], device=device)
    assert value == x[6] * -2 + x.sum()
    np.testing.assert_array_equal(grads["x"], [1, 1, 1, 1, 1, 1, -1])
