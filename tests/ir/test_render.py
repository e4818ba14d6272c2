"""Rendering: well-formed SVG carrying every label, non-overlapping boxes at 50
nodes, a layout that fits a notebook cell, and the backward/gradient/strategy
annotations a user looks for."""
import xml.etree.ElementTree as ET
from itertools import combinations

import networkx as nx
import pytest
import sympy

from symdiff.ir import DataflowGraph, connector_symbol, index_symbol, layout, render, size_symbol

N = size_symbol("N")
i, j = index_symbol("i"), index_symbol("j")
x, y = sympy.Symbol("x", real=True), sympy.Symbol("y", real=True)
SVG = "{http://www.w3.org/2000/svg}"
ENGINES = ["builtin", "auto"]


def layered_graph(stages: int = 16) -> DataflowGraph:
    """A forward chain of maps and reductions, each stage reading the two
    previous values, and a mirrored backward chain into gradient containers:
    fan-in, fan-out, long edges, and every annotation the renderer shows."""
    g = DataflowGraph("layered")
    g.add_container("a", (N, 3), "float32", "argument")
    g.add_container("b", (N, 3), "float32", "argument")
    prev = [g.access("a"), g.access("b")]
    for s in range(stages):
        name = f"h{s}"
        g.add_container(name, (N, 3), "float32", "result" if s == stages - 1 else "transient")
        body = sympy.tanh(x * y + sympy.exp(-x ** 2) / (1 + y ** 2) + sympy.sqrt(x ** 2 + y ** 4)) \
            if s % 3 == 0 else x + y
        g.add_tasklet(f"f{s}", [(i, 0, N), (j, 0, 3)], {"o": body},
                      {"x": (prev[-1], (i, j)), "y": (prev[-2], (i, j))}, {"o": (g.new_version(name), (i, j))},
                      condition=sympy.Ge(i, 1) if s == 2 else sympy.true, source=f"model.py:{s + 10}")
        prev.append(g.access(name))
    g.add_container("grad_a", (N, 3), "float32", "result")
    g.add_container("seed_h", (N, 3), "float32")
    grad = g.access("seed_h")
    for s in range(stages // 2):
        ct = connector_symbol("ct", "float32")
        t = g.add_tasklet(f"b{s}", [(i, 0, N), (j, 0, 3)], {"o": ct * (1 - x ** 2)},
                          {"ct": (grad, (i, j)), "x": (prev[-1 - s], (i, j))},
                          {"o": (g.new_version("grad_a"), (0, j), "sum")}, backward=True,
                          forward_values="recompute" if s % 2 else "stored", strategy="gather")
        grad = g.writes(t.name)[0][0]
    return g.validate()


@pytest.fixture(scope="module")
def graph50() -> DataflowGraph:
    g = layered_graph()
    assert 45 <= g.nx.number_of_nodes() <= 60
    return g


def texts(svg: str) -> str:
    root = ET.fromstring(svg)
    return "\n".join("".join(t.itertext()) for t in root.iter(f"{SVG}text"))


@pytest.mark.parametrize("engine", ENGINES)
def test_fifty_nodes_no_overlap(graph50, engine):
    boxes = render.layout(graph50, engine)
    assert set(boxes) == set(graph50.nx.nodes)
    for (u, (ux, uy, uw, uh)), (v, (vx, vy, vw, vh)) in combinations(boxes.items(), 2):
        apart = ux + uw <= vx or vx + vw <= ux or uy + uh <= vy or vy + vh <= uy
        assert apart, f"{u} {boxes[u]} overlaps {v} {boxes[v]}"


@pytest.mark.parametrize("engine", ENGINES)
def test_fifty_nodes_svg_well_formed_with_every_label(graph50, engine):
    svg = graph50.to_svg(engine)
    shown = texts(svg)
    for v in graph50.nx.nodes:
        for line in render.node_lines(graph50, v):
            assert line in shown, (v, line)
    titles = [t.text for t in ET.fromstring(svg).iter(f"{SVG}title")]
    assert sum(1 for t in titles if t and t.startswith(("tasklet", "backward tasklet"))) == len(graph50.tasklets())


def test_layers_follow_dataflow_top_to_bottom_within_a_band(graph50):
    """Each edge points down within a band, or into a band further right."""
    boxes = render.layout(graph50, "builtin")
    for u, v in graph50.nx.edges():
        (ux, uy, uw, uh), (vx, vy, vw, _) = boxes[u], boxes[v]
        assert uy + uh < vy or ux + uw < vx, (u, v)


def test_long_chain_wraps_into_bands_near_a_notebook_aspect(graph50):
    placed = render.place(render.graph_scene(graph50))
    assert placed.bands > 1
    assert 1 / 3 <= placed.width / placed.height <= 3, (placed.width, placed.height)


def test_edges_never_pass_through_a_box(graph50):
    """Edges run between rows and in gutters: no straight segment of an edge
    crosses the inside of a box it does not start or end at."""
    placed = render.place(render.graph_scene(graph50))
    for (u, v), points in placed.edges.items():
        for ((xa, ya), _), ((xb, yb), _) in zip(points, points[1:]):
            for node, (x0, y0, w, h) in placed.boxes.items():
                if node in (u, v):
                    continue
                inside_x = max(min(xa, xb), x0 + 1) < min(max(xa, xb), x0 + w - 1)
                inside_y = max(min(ya, yb), y0 + 1) < min(max(ya, yb), y0 + h - 1)
                vertical_in = xa == xb and x0 < xa < x0 + w and inside_y
                horizontal_in = ya == yb and y0 < ya < y0 + h and inside_x
                assert not (vertical_in or horizontal_in), (u, v, node)


def test_barycenter_ordering_does_not_add_crossings(graph50):
    g = nx.DiGraph(graph50.nx)
    rows = layout.layers(g)
    h, rows = layout._with_dummies(g, rows)
    assert layout.crossings(h, layout.order(h, rows)) <= layout.crossings(h, rows)


def test_sources_sit_just_above_their_first_reader():
    g = nx.DiGraph([("a", "b"), ("b", "c"), ("c", "d"), ("late", "d")])
    assert layout.layers(g) == [["a"], ["b"], ["c", "late"], ["d"]]


def test_container_and_tasklet_labels(graph50):
    assert render.node_lines(graph50, "a#0") == ["a #0", "float32[N, 3]"]
    assert render.node_lines(graph50, "f1") == ["f1", "o = x + y"]
    title = render.node_title(graph50, "f2")
    assert "if i >= 1" in title and "domain [i=0:N, j=0:3]" in title


def test_long_expression_shortened_with_full_text_on_hover(graph50):
    full = str(graph50.node("f0").body["o"])
    assert len(full) > render.LABEL_CHARS
    shown = [line for line in render.node_lines(graph50, "f0") if line.startswith("o = ")][0]
    assert shown.endswith("…") and len(shown) == render.LABEL_CHARS
    root = ET.fromstring(graph50.to_svg("builtin"))
    node = next(g for g in root.iter(f"{SVG}g") if g.get("id") == "node-f0")
    title = node.find(f"{SVG}title").text
    assert f"o = {full}" in title and "model.py:10" in title


def test_backward_and_gradient_marked(graph50):
    root = ET.fromstring(graph50.to_svg("builtin"))
    classes = {g.get("id"): g.get("class") for g in root.iter(f"{SVG}g") if g.get("id")}
    assert classes["node-b0"] == "node backward"
    assert classes["node-f0"] == "node tasklet"
    assert classes["node-grad_a#1"] == "node gradient"   # by name
    assert classes["node-seed_h#0"] == "node gradient"  # a seed, by name
    assert classes["node-h0#0"] == "node container"
    assert "gradient" in render.node_title(graph50, "seed_h#0")
    legend = "".join(next(g for g in root.iter(f"{SVG}g") if g.get("class") == "legend").itertext())
    assert "backward tasklet" in legend and "gradient container" in legend


def test_store_recompute_and_strategy_on_hover(graph50):
    assert render.node_title(graph50, "b0").endswith("forward values: stored\nstrategy: gather")
    assert "forward values: recompute" in render.node_title(graph50, "b1")


def edge_titles(svg: str) -> str:
    root = ET.fromstring(svg)
    return "\n".join(g.find(f"{SVG}title").text for g in root.iter(f"{SVG}g") if g.get("class") == "edge")


def test_edges_show_index_and_accumulation_on_hover(graph50):
    shown = edge_titles(graph50.to_svg("builtin"))
    assert "f1: x ← h0[i, j]" in shown
    assert "b0: o → grad_a[0, j] (sum)" in shown


def test_gather_and_scalar_labels():
    g = DataflowGraph("gather")
    g.add_container("a", (5,), "float32", "argument")
    g.add_container("idx", (3,), "int32", "argument")
    g.add_container("s", (), "float64", "result")
    n = connector_symbol("n", "int32")
    g.add_tasklet("t", [(i, 0, 3)], {"o": x}, {"x": (g.access("a"), (n,)), "n": (g.access("idx"), (i,))},
                  {"o": (g.new_version("s"), (), "max")})
    svg = g.to_svg("builtin")
    assert "x ← a[n]" in edge_titles(svg) and "o → s[] (max)" in edge_titles(svg)
    assert "float64 scalar" in texts(svg)


def test_mimebundle_and_empty_graph():
    g = layered_graph(2)
    bundle = g._repr_mimebundle_()
    assert bundle["image/svg+xml"].startswith("<svg") and "symdiff-view" in bundle["text/html"]
    assert ET.fromstring(DataflowGraph("empty").to_svg("builtin")).tag == f"{SVG}svg"


def test_unknown_engine_rejected():
    with pytest.raises(ValueError, match="engine"):
        render.layout(DataflowGraph(), "dot")


def brute_force_pack(wanted, widths, weights):
    """The weighted least-squares placement under the gap constraints, by trying
    every way of cutting the row into runs of touching boxes (each run sits at
    its weighted mean) and keeping the best feasible one."""
    from itertools import product
    n = len(wanted)
    offset = [0.0]
    for k in range(n - 1):
        offset.append(offset[-1] + (widths[k] + widths[k + 1]) / 2 + layout.NODE_GAP)
    best = None
    for cuts in product([False, True], repeat=n - 1):
        runs, start = [], 0
        for k, cut in enumerate(cuts, 1):
            if cut:
                runs.append(range(start, k))
                start = k
        runs.append(range(start, n))
        y = [0.0] * n
        for run in runs:
            mean = sum(weights[k] * (wanted[k] - offset[k]) for k in run) / sum(weights[k] for k in run)
            for k in run:
                y[k] = mean
        if any(y[k + 1] < y[k] - 1e-9 for k in range(n - 1)):
            continue
        x = [a + o for a, o in zip(y, offset)]
        cost = sum(w * (a - b) ** 2 for w, a, b in zip(weights, x, wanted))
        if best is None or cost < best[0] - 1e-9:
            best = (cost, x)
    return best[1]


def test_row_packing_is_the_weighted_least_squares_placement():
    import random
    rng = random.Random(7)
    for _ in range(200):
        n = rng.randint(1, 6)
        wanted = [rng.uniform(-100, 100) for _ in range(n)]
        widths = [rng.uniform(8, 120) for _ in range(n)]
        weights = [rng.choice([1.0, 4.0]) for _ in range(n)]
        got = layout._pack(wanted, widths, weights)
        assert got == pytest.approx(brute_force_pack(wanted, widths, weights), abs=1e-6)
        for k in range(n - 1):   # boxes never overlap
            assert got[k + 1] - got[k] >= (widths[k] + widths[k + 1]) / 2 + layout.NODE_GAP - 1e-9


def test_crossing_count_matches_pairwise_count():
    import random
    rng = random.Random(3)
    for _ in range(100):
        upper, lower = rng.randint(1, 6), rng.randint(1, 6)
        edges = sorted({(rng.randrange(upper), rng.randrange(lower)) for _ in range(rng.randint(0, 12))})
        pairwise = sum(1 for a in range(len(edges)) for b in range(a + 1, len(edges))
                       if edges[a][0] < edges[b][0] and edges[a][1] > edges[b][1])
        assert layout._inversions(edges, lower) == pairwise
