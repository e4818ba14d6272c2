"""Differentiated graphs (``add_backward_pass``) through the lowering, against
the interpreter on the same graph: forward and backward fused, gradient
accumulation, broadcasts turned into sums."""
import numpy as np
import pytest

from symdiff import ir
from symdiff import lowering
from lowering_graphs import CORPUS
from symdiff.backward import add_backward_pass

CASES = ["chain", "broadcast", "sum_rows", "max_cols", "prod_rows", "sum_all_large", "matmul",
         "partial_update", "gather", "scalars", "strided_sum", "histogram_sum"]


def differentiated(case: str):
    graph, inputs = CORPUS[case]()
    wrt = [a for a in graph.arguments if graph.containers[a].dtype.startswith("float")]
    grads = add_backward_pass(graph, wrt, graph.results)
    rng = np.random.default_rng(11)
    bound = ir.bind_sizes(graph, inputs)
    for out, seed in graph.meta["seeds"].items():
        shape = graph.containers[seed].concrete_shape(bound)
        inputs[seed] = rng.uniform(-1, 1, shape).astype(graph.containers[seed].dtype)
    return graph, inputs, grads


@pytest.mark.parametrize("case", CASES)
def test_gradients_match_interpreter(case, device):
    graph, inputs, grads = differentiated(case)
    got = lowering.compile(graph, device=device)(inputs)
    want = ir.run(graph, inputs)
    rtol = 1e-4 if "large" in case else 3e-5
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=rtol, atol=1e-4, err_msg=f"{name} ({case}, {device})")


def test_ten_op_chain_forward_and_backward_in_at_most_two_kernels(device):
    graph, inputs, grads = differentiated("chain")
    exe = lowering.compile(graph, device=device)
    exe(inputs)
    assert exe.stats()["kernels"] <= 2
    assert exe.stats()["dispatches"] <= 2
