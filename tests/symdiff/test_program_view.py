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
    kernel_groups = view.groupings()[1]
    assert kernel_groups.labels
    for gid, label in kernel_groups.labels.items():
        rows = view._group_details(kernel_groups, gid)["rows"]
        header = [text for label_, text in rows if label_ == "slang"]
        assert header and header[0].startswith(f"// kernel {label}") and header[0] in exe_source
    assert "by kernel" in view.to_html()


def test_view_on_numpy_has_no_kernel_grouping():
    view = smooth.view(device="numpy")
    assert [gr.kind for gr in view.groupings()] == ["line"]
    assert view.graph.nx.number_of_nodes() == smooth.backward_graph().nx.number_of_nodes()
    np.testing.assert_allclose(len(view.graph.tasklets()), len(smooth.backward_graph().tasklets()))


@sd.differentiable_program
def looped(x: sd.f32[16], w: sd.f32[16]):
    s = np.tanh(x * w)
    s = sd.fori_loop(0, 10, lambda i, u: u * 0.5 + np.sin(u), s)
    return np.sum(s * s)


def test_a_loop_is_one_box_each_way_that_opens_to_its_body():
    graph = looped.backward_graph()
    (loop,) = graph.meta["loops"]
    view = looped.view(device="numpy")
    boxes = {box.id: box for box in view.loops}
    assert set(boxes) == {f"{loop.name} (loop)", f"{loop.name} (loop), backward"}
    forward, backward = boxes[f"{loop.name} (loop)"], boxes[f"{loop.name} (loop), backward"]
    assert [graph.node(v).container for v in forward.reads] == list(loop.inputs)
    assert [graph.node(v).container for v in forward.writes] == list(loop.outputs)
    assert [graph.node(v).container for v in backward.reads] == [graph.meta["loop_gradients"][c] for c in loop.outputs]
    assert [graph.node(v).container for v in backward.writes] == [graph.meta["loop_seeds"][c] for c in loop.inputs]
    scenes = view.scenes()
    inside = scenes[f"loop:{forward.id}"]
    assert len(inside.items) == loop.body.nx.number_of_nodes()
    assert forward.id in scenes["all"].items and forward.id in scenes["line"].items
    html = view.to_html()
    sin = next(t for t in loop.body.tasklets() if "sin" in str(t.body))
    assert f"{forward.id}/{sin.name}" in html and str(next(iter(sin.body.values()))) in html
