"""ir.view: groups that keep the grouped drawing layered, details per box,
the kernel grouping from plain data, and one self-contained HTML block."""
import json
import re
import xml.etree.ElementTree as ET

import networkx as nx
import pytest
import sympy

from symdiff.ir import DataflowGraph, index_symbol, size_symbol
from symdiff.ir.view import GraphView

N = size_symbol("N")
i = index_symbol("i")
x, y = sympy.Symbol("x", real=True), sympy.Symbol("y", real=True)
SVG = "{http://www.w3.org/2000/svg}"


def step(g, name, reads, out, source, backward=False):
    """A tasklet ``name`` over [0, N) reading the latest version of each of
    ``reads`` and writing a new version of ``out``."""
    names = ["x", "y"][:len(reads)]
    body = x * y if len(reads) == 2 else sympy.exp(x)
    if out not in g.containers:
        g.add_container(out, (N,), "float32", "transient")
    g.add_tasklet(name, [(i, 0, N)], {"o": body}, {c: (g.access(r), (i,)) for c, r in zip(names, reads)},
                  {"o": (g.new_version(out), (i,))}, source=source, backward=backward)


def interleaved() -> DataflowGraph:
    """Line 2's two tasklets sandwich line 3's: one group per line would be a
    cycle (line 2 -> line 3 -> line 2)."""
    g = DataflowGraph("interleaved")
    g.add_container("a", (N,), "float32", "argument")
    step(g, "t1", ["a"], "p", "prog.py:2")
    step(g, "t2", ["p"], "q", "prog.py:2")
    step(g, "t3", ["q"], "r", "prog.py:3")
    step(g, "t4", ["r"], "s", "prog.py:3")
    step(g, "t5", ["s", "q"], "u", "prog.py:2")
    step(g, "t6", ["u"], "v", "prog.py:2")
    step(g, "b1", ["v", "p"], "grad_a", "prog.py:2", backward=True)
    g.containers["v"].role = "result"
    return g.validate()


def quotient(graph, grouping):
    mapping = {v: gid for gid, vs in grouping.members.items() for v in vs}
    q = nx.DiGraph()
    q.add_nodes_from(mapping.get(v, v) for v in graph.nx.nodes)
    q.add_edges_from((mapping.get(u, u), mapping.get(v, v)) for u, v in graph.nx.edges()
                     if mapping.get(u, u) != mapping.get(v, v))
    return q


def test_line_groups_are_split_to_stay_acyclic_not_dropped():
    g = interleaved()
    (lines,) = GraphView(g).groupings()
    assert nx.is_directed_acyclic_graph(quotient(g, lines))
    members = [set(vs) for vs in lines.members.values()]
    assert sum(len(m) for m in members) == len(set().union(*members)), "a node in two groups"
    tasklet_groups = [{v for v in m if not v.endswith(("#0", "#1"))} for m in members]
    assert {"t1", "t2"} in tasklet_groups and {"t3", "t4"} in tasklet_groups and {"t5", "t6"} in tasklet_groups
    back = next(gid for gid, vs in lines.members.items() if "b1" in vs)
    assert set(lines.members[back]) == {"b1", "grad_a#0"}, "a tasklet and what it writes: one box"
    assert lines.labels[back] == "line 2, backward", "backward tasklets are not grouped with forward ones"


def test_kernel_grouping_from_plain_data():
    g = interleaved()
    view = GraphView(g, kernels={"k0": ["t1", "t2", "t3"], "k1": ["t4", "t5", "t6", "b1"]})
    kernel = view.groupings()[1]
    assert kernel.kind == "kernel" and set(kernel.labels.values()) == {"k0", "k1"}
    assert nx.is_directed_acyclic_graph(quotient(g, kernel))
    assert {"kernel": "k1"}.items() <= {r[0]: r[1] for r in view.node_details("t5")["rows"]}.items()
    assert {"all", "line", "kernel"} <= set(view.scenes())


def test_details_carry_expression_memlets_source_and_caller_rows():
    g = interleaved()
    view = GraphView(g, details={"t5": [("partial", "do/dx = y")]})
    rows = view.node_details("t5")["rows"]
    assert ["expression", f"o = {x * y}"] in rows
    assert ["reads", "x ← s[i]"] in rows and ["writes", "o → u[i]"] in rows
    assert ["source", "prog.py:2"] in rows and rows[-1] == ["partial", "do/dx = y"]
    assert ["read by", "t6"] in view.node_details("u#0")["rows"]


def test_html_is_one_block_with_every_scene_and_parseable_details():
    g = interleaved()
    page = GraphView(g, collapse=True).to_html()
    assert "http" not in page.replace('xmlns="http://www.w3.org/2000/svg"', ""), "no network references"
    scenes = re.findall(r'<svg [^>]*data-scene="([^"]+)"', page)
    assert scenes[0] == "all" and "line" in scenes and any(s.startswith("line:") for s in scenes)
    assert 'data-start="line"' in page
    data = json.loads(re.search(r'<script type="application/json" class="sdv-data">(.*?)</script>', page,
                                re.S).group(1))
    assert set(g.nx.nodes) <= set(data)
    ids = []
    for svg in re.findall(r"<svg .*?</svg>", page, re.S):
        root = ET.fromstring(svg)   # each drawing is well-formed XML
        own = {e.get("id") for e in root.iter(f"{SVG}marker")}
        used = set(re.findall(r"url\(#([^)]+)\)", svg))
        assert used and used <= own, "arrowheads must come from the drawing's own markers (others may be hidden)"
        ids += own
    assert len(ids) == len(set(ids)), "marker ids unique on the page"


@pytest.mark.parametrize("nodes, grouped", [(10, False), (200, True)])
def test_large_graphs_open_grouped(nodes, grouped):
    g = DataflowGraph("chain")
    g.add_container("a", (N,), "float32", "argument")
    prev = "a"
    for k in range(nodes // 2):
        step(g, f"t{k}", [prev], f"c{k}", f"prog.py:{k // 4}")
        prev = f"c{k}"
    assert GraphView(g).collapse is grouped
    assert ('data-start="line"' in GraphView(g).to_html()) is grouped


def test_very_large_graphs_are_only_drawn_grouped(monkeypatch):
    from symdiff import ir
    import symdiff.ir.view
    monkeypatch.setattr(ir.view, "DRAW_ALL_UP_TO", 5)
    g = interleaved()
    view = GraphView(g, collapse=True)
    assert "all" not in view.scenes() and "line" in view.scenes()
    page = view.to_html()
    assert 'data-start="line"' in page and re.search(r"<button [^>]*disabled[^>]*>all nodes</button>", page)
    assert set(view._repr_mimebundle_()) == {"text/html"}
    root = ET.fromstring(view.to_svg())   # still available on request, every node drawn
    assert sum(1 for e in root.iter(f"{SVG}g") if e.get("class", "").startswith("node ")) == g.nx.number_of_nodes()
    assert "all" in GraphView(g, collapse=False).scenes()
