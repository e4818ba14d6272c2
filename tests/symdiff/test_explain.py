"""program.explain(): every forward tasklet with its line, partials, backward tasklets and kernel."""
import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import symdiff as sd
from symdiff.ir.graph import Tasklet
from symdiff.derivatives import tasklet_partials


@sd.differentiable_program
def stencil_loss(a: sd.f32[32], w: sd.f32[32]):
    u = np.tanh(a * w)
    out = np.zeros_like(u)
    for i in sd.map[1:31]:
        out[i] = (u[i - 1] + 2 * u[i] + u[i + 1]) / 4
    s = np.zeros(1, dtype=np.float32)
    for i in sd.map[0:32]:
        s[0] += out[i] * out[i]
    return s[0] + np.sum(np.where(a > 0, a, 0.0) ** 2)


def _forward_tasklets(program):
    g = program.graph
    return [g.node(n) for n in g.topological_order() if isinstance(g.node(n), Tasklet)]


@pytest.fixture(scope="module")
def explained():
    return stencil_loss.explain(device="cpu")


def test_every_forward_tasklet_in_execution_order(explained):
    assert [t.name for t in explained.tasklets] == [t.name for t in _forward_tasklets(stencil_loss)]


def test_partials_are_the_differentiators(explained):
    by_name = {t.name: t for t in _forward_tasklets(stencil_loss)}
    for view in explained.tasklets:
        t = by_name[view.name]
        expected = [f"d{o}/d{c} = {d}" for (o, c), d in tasklet_partials(t.body, t.inputs).items()]
        assert view.partials == expected
    stencil = next(v for v in explained.tasklets if "u[i - 1]" in (v.code or ""))
    assert sorted(p.split(" = ")[1] for p in stencil.partials) == ["1/2", "1/4", "1/4"]


def test_every_tasklet_names_a_real_kernel(explained):
    source = stencil_loss.slang_source(device="cpu")
    defined = set(re.findall(r"^void (\w+)\(uint3 tid,", source, re.M))
    assert set(explained.kernels) <= defined
    for view in explained.tasklets:
        assert view.kernels and set(view.kernels) <= set(explained.kernels), view.name
        for b in view.backward:
            assert b.kernels and set(b.kernels) <= set(explained.kernels), b.name
            assert b.forward_values in ("stored", "recompute", "none")
            assert all(re.search(r"\[(plain|sum)\]$", e) for e in b.expressions), b.expressions


def test_backward_tasklets_come_from_their_forward_tasklet(explained):
    graph = stencil_loss.backward_graph()
    for view in explained.tasklets:
        for b in view.backward:
            assert graph.node(b.name).meta["forward_tasklet"] == view.name
    derived = {b.name for v in explained.tasklets for b in v.backward}
    assert derived == {t.name for t in graph.tasklets() if t.backward}


def test_source_lines_are_quoted(explained):
    codes = [v.code for v in explained.tasklets]
    assert "out[i] = (u[i - 1] + 2 * u[i] + u[i + 1]) / 4" in codes
    assert all(v.source.startswith("test_explain.py:") for v in explained.tasklets)


def test_text_and_html_name_everything(explained):
    text = str(explained)
    assert repr(explained) == text
    html = explained._repr_html_()
    root = ET.fromstring(html)  # well-formed: conditions such as (a > 0) & ... are escaped
    shown = "".join(root.itertext())
    for view in explained.tasklets:
        for part in [view.name, *view.partials, *view.kernels] + [b.name for b in view.backward]:
            assert part in text and part in shown, part


def test_inactive_tasklets_have_no_backward():
    ex = stencil_loss.explain(wrt=["w"], device="numpy")
    where = [v for v in ex.tasklets if v.name.split("_")[0] in ("greater", "where", "power")]
    assert ex.device == "numpy" and not ex.kernels and "no kernels" in str(ex)
    assert len(where) == 3 and all(not v.backward for v in where)
    assert "not on a path" in str(ex)


def test_higher_order_program_explains_its_backward_tasklets_as_forward():
    ex = stencil_loss.grad_program(wrt=["w"]).explain(device="numpy")
    assert any(v.name.startswith("grad_") and v.partials for v in ex.tasklets)
    assert len(ex.tasklets) == len(_forward_tasklets(stencil_loss.grad_program(wrt=["w"])))
