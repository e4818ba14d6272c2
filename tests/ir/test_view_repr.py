"""A graph view in a plain REPL (no Jupyter) reads as text: what it holds and
how to see the interactive view (``.save``), not ``<GraphView object at 0x...>``."""
import numpy as np

import symdiff as sd
from symdiff import ir
from symdiff.ir.specs import f32
from symdiff.ir.view import REPR_ROWS


@sd.differentiable_program
def loss(x: sd.f32[8, 3], w: sd.f32[3, 2]):
    return np.sum(np.tanh(x @ w) ** 2)


def test_view_repr_summarises_and_points_to_save():
    text = repr(loss.view(wrt=["w"], device="numpy"))
    assert text.startswith("<GraphView of 'loss':") and "object at 0x" not in text
    assert "backward tasklet grad_" in text and "test_view_repr.py:" in text
    assert ".save('graph.html')" in text


def test_view_repr_lists_kernels_when_compiled_and_stays_short():
    text = repr(loss.view(device="cpu"))
    assert "kernel(s)>" in text and "\n  kernel k0_" in text
    graph = ir.trace(lambda a: sum(np.sin(a * k) for k in range(30)), f32[4])
    rows = repr(graph.view()).splitlines()
    assert len(rows) == REPR_ROWS + 3 and rows[-2].startswith("  ... ")
