"""program.view(): the backward graph's interactive view knows the compiled
program: kernels (as a grouping and per tasklet), Slang lines, partials."""
import numpy as np
import sympy

import symdiff as sd


@sd.differentiable_program
def smooth(a: sd.f32[64], w: sd.f32[64]):
    b = np.tanh(a * w)
    return np.sum(b * b)


def test_view_has_kernels_slang_lines_and_partials():
    view = smooth.view(device="cpu")
    exe_source = smooth.slang_source(device="cpu")
    kinds = [gr.kind for gr in view.groupings()]
    assert kinds == ["line", "kernel"]
    kernels = view.kernels
    assert kernels and all(name in exe_source for name in kernels)
    for t in view.graph.tasklets():
        rows = view.node_details(t.name)["rows"]
        assert any(label == "kernel" and text in kernels for label, text in rows), t.name
        slang = [text for label, text in rows if label == "slang"]
        if f"// tasklet {t.name} " in exe_source:   # not folded into another tasklet's loop
            assert slang and all(line in exe_source for line in slang), t.name
        if not t.backward:   # sympy's own derivative of each smooth body, independently
            partials = {text for label, text in rows if label == "partial"}
            for out, expr in t.body.items():
                for conn, sym in t.inputs.items():
                    assert f"d{out}/d{conn} = {sympy.diff(expr, sym)}" in partials, (t.name, conn)
    total = next(t.name for t in view.graph.tasklets() if t.name.startswith("sum"))
    reduction = [text for label, text in view.node_details(total)["rows"] if label == "slang"]
    assert reduction[-1].startswith("out_"), "the whole block, past its inner loops, to the store of the result"
    assert "by kernel" in view.to_html()


def test_view_on_numpy_has_no_kernel_grouping():
    view = smooth.view(device="numpy")
    assert [gr.kind for gr in view.groupings()] == ["line"]
    assert view.graph.nx.number_of_nodes() == smooth.backward_graph().nx.number_of_nodes()
    np.testing.assert_allclose(len(view.graph.tasklets()), len(smooth.backward_graph().tasklets()))
