"""CPU point loops whose points stay in one row of the box (lowering.kernels.writer.frame: a thread's
point count divides the row): coordinates but the last are the thread's, the last runs
with the point.  Values against the interpreter, including a 3-D box's middle axis and a
box whose rows a thread's points cross (the per-point division stays)."""
import pytest
import sympy

from lowering_graphs import G, i, j, k, rng
from test_programs import assert_agrees


def outer_graph(shape: tuple[int, ...]):
    """o[i, (j,) k] = u[i] * w[k] + tanh(v[j or i] * w[k]): per-axis reads of an elementwise box."""
    axes = (i, j, k)[-len(shape):] if len(shape) == 3 else (i, k)
    b = G("outer").c("u", (shape[0],), "argument").c("v", (shape[-2],), "argument").c("w", (shape[-1],), "argument")
    b.c("o", shape, "result")
    b.t("t", [(s, 0, n) for s, n in zip(axes, shape)],
        b.s("x", "u") * b.s("z", "w") + sympy.tanh(b.s("y", "v") * b.s("z", "w")),
        {"x": ("u", (axes[0],)), "y": ("v", (axes[-2],)), "z": ("w", (axes[-1],))}, ("o", axes))
    r = rng(2)
    return b.g, {c: r.standard_normal(b.g.containers[c].shape).astype("float32") for c in "uvw"}


@pytest.mark.parametrize("shape, in_row", [((64, 1024), True), ((4, 8, 1024), True), ((96, 700), False)])
def test_points_of_a_thread_in_one_row(shape, in_row):
    graph, inputs = outer_graph(shape)
    exe = assert_agrees(graph, inputs, "cpu", rtol=1e-5, atol=1e-5)
    assert (f"first % {shape[-1]} + (lin - first)" in exe.source) == in_row
