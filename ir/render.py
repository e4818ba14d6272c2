"""SVG rendering of a ``DataflowGraph`` for Jupyter (``graph._repr_svg_``).

What a user debugging a gradient needs to see is on the boxes: containers
with version, shape and dtype; tasklets with domain and body; memlets with
index and accumulation; backward nodes and gradient containers told apart;
the differentiator's store/recompute choice and the lowering's accumulation
strategy.  Long text is shortened on the box and kept whole in an SVG
``<title>`` (shown on hover).

The SVG is written here in pure Python so it works with no system package.
Node placement uses graphviz ``dot`` when it is on PATH (better edge routing
on large graphs) and ``ir.layout`` otherwise; ``layout(graph)`` exposes the
boxes either way.
"""
from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from typing import TYPE_CHECKING
from xml.sax.saxutils import escape, quoteattr

import networkx as nx

from . import layout as _layout
from .graph import AccessNode, Container, Memlet, Tasklet
from .layout import Box

if TYPE_CHECKING:
    from .graph import DataflowGraph

CHAR_W = 7.2          # advance of a 12px monospace glyph
LINE_H = 16.0
PAD = 8.0
LABEL_CHARS = 44      # longest text line on a box before it is shortened
EDGE_CHARS = 30
LEGEND_H = 30.0
MARGIN = 10.0
DPI = 72.0            # graphviz works in inches

STYLE = {
    "tasklet": ("#dbeafe", "#1d4ed8"),     # forward: blue
    "backward": ("#ffedd5", "#c2410c"),    # backward: orange
    "container": ("#f9fafb", "#4b5563"),
    "gradient": ("#fef9c3", "#a16207"),
}
LEGEND = [("tasklet", "forward tasklet"), ("backward", "backward tasklet"),
          ("container", "container #version"), ("gradient", "gradient container")]


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _shape(c: Container) -> str:
    return f"{c.dtype}[{', '.join(str(s) for s in c.shape)}]" if c.shape else f"{c.dtype} scalar"


def is_gradient(c: Container) -> bool:
    """Gradient containers are flagged by the differentiator (``meta["gradient"]``)
    or, for hand-built graphs, by the ``grad_`` naming convention."""
    return bool(c.meta.get("gradient")) or c.name.startswith("grad_")


def _domain(t: Tasklet) -> str:
    return "[" + ", ".join(f"{s}={b}:{e}" for s, b, e in t.domain) + "]"


def _has_condition(t: Tasklet) -> bool:
    return str(t.condition) != "True"


def _choices(t: Tasklet) -> list[str]:
    """The differentiator's and the lowering's decisions recorded on a tasklet."""
    out = []
    if t.meta.get("forward_values"):
        out.append(f"forward values: {t.meta['forward_values']}")
    if t.meta.get("strategy"):
        out.append(f"strategy: {t.meta['strategy']}")
    return out


def node_lines(graph: "DataflowGraph", node_id: str) -> list[str]:
    """The text on a node's box, each line at most ``LABEL_CHARS`` long."""
    node = graph.node(node_id)
    if isinstance(node, AccessNode):
        c = graph.containers[node.container]
        kind = f"gradient {c.role}" if is_gradient(c) else c.role
        lines = [f"{c.name} #{node.version}", _shape(c), kind]
    else:
        lines = [f"{node.name} (backward)" if node.backward else node.name, _domain(node)]
        if _has_condition(node):
            lines.append(f"if {node.condition}")
        lines += [f"{conn} = {expr}" for conn, expr in node.body.items()]
        lines += _choices(node)
    return [_shorten(line, LABEL_CHARS) for line in lines]


def node_title(graph: "DataflowGraph", node_id: str) -> str:
    """The full, unshortened description shown on hover."""
    node = graph.node(node_id)
    if isinstance(node, AccessNode):
        c = graph.containers[node.container]
        acc = graph.accumulation(node_id)
        return "\n".join([f"{c.name} version {node.version}", f"{c.role} {_shape(c)}"]
                         + (["gradient"] if is_gradient(c) else [])
                         + ([f"written with {acc}"] if acc else []))
    lines = [f"{'backward ' if node.backward else ''}tasklet {node.name}", f"domain {_domain(node)}"]
    if _has_condition(node):
        lines.append(f"if {node.condition}")
    if node.source:
        lines.append(f"from {node.source}")
    lines += [f"{conn} = {expr}" for conn, expr in node.body.items()] + _choices(node)
    return "\n".join(lines)


def edge_text(memlet: Memlet, write: bool) -> str:
    """Connector, index and (for writes) the accumulation."""
    idx = "[" + ", ".join(str(i) for i in memlet.index) + "]"
    if not write:
        return f"{memlet.connector} ← {idx}"
    return f"{memlet.connector} → {idx}" + (f" ({memlet.accumulate})" if memlet.accumulate else "")


def _box_size(lines: list[str]) -> tuple[float, float]:
    return max(len(line) for line in lines) * CHAR_W + 2 * PAD, len(lines) * LINE_H + PAD


@dataclass
class Edge:
    source: str
    target: str
    text: str
    path: str                 # SVG path data
    label: tuple[float, float]  # centre of the label text


@dataclass
class Drawing:
    boxes: dict[str, Box]
    edges: list[Edge]
    width: float
    height: float


def _edges(graph: "DataflowGraph") -> list[tuple[str, str, str]]:
    out = []
    for u, v, data in graph.nx.edges(data=True):
        out.append((u, v, edge_text(data["memlet"], isinstance(graph.node(u), Tasklet))))
    return out


def _bezier(p0, p3) -> tuple[tuple, tuple, tuple, tuple]:
    dx = (p3[0] - p0[0]) / 2
    return p0, (p0[0] + dx, p0[1]), (p3[0] - dx, p3[1]), p3


def _point(curve, t: float) -> tuple[float, float]:
    (x0, y0), (x1, y1), (x2, y2), (x3, y3) = curve
    s = 1 - t
    return (s**3 * x0 + 3 * s * s * t * x1 + 3 * s * t * t * x2 + t**3 * x3,
            s**3 * y0 + 3 * s * s * t * y1 + 3 * s * t * t * y2 + t**3 * y3)


def _point_at_x(curve, x: float) -> tuple[float, float]:
    """The curve's point at abscissa ``x`` (x grows monotonically along it)."""
    lo, hi = 0.0, 1.0
    for _ in range(30):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _point(curve, mid)[0] < x else (lo, mid)
    return _point(curve, lo)


def _spread(labels: list[list], min_gap: float = LINE_H - 2) -> None:
    """Push labels sharing a column gap apart vertically so they stay legible."""
    labels.sort(key=lambda item: item[1])
    for prev, cur in zip(labels, labels[1:]):
        cur[1] = max(cur[1], prev[1] + min_gap)


def _builtin(graph: "DataflowGraph") -> Drawing:
    g = nx.DiGraph(graph.nx)
    sizes = {v: _box_size(node_lines(graph, v)) for v in g.nodes}
    columns = _layout.order(g)
    column = {v: c for c, col in enumerate(columns) for v in col}
    edges = _edges(graph)
    gaps = [60.0] * max(len(columns) - 1, 0)
    for u, _, text in edges:
        if column[u] < len(gaps):
            gaps[column[u]] = max(gaps[column[u]], len(text) * CHAR_W + 30)
    boxes = _layout.place(g, columns, sizes, gaps, margin=MARGIN)
    boxes = {v: (x, y + LEGEND_H, w, h) for v, (x, y, w, h) in boxes.items()}
    right = {c: max(boxes[v][0] + boxes[v][2] for v in col) for c, col in enumerate(columns)}
    out, by_gap = [], {}
    for u, v, text in edges:
        (ux, uy, uw, uh), (vx, vy, _, vh) = boxes[u], boxes[v]
        curve = _bezier((ux + uw, uy + uh / 2), (vx, vy + vh / 2))
        label = list(_point_at_x(curve, right[column[u]] + gaps[column[u]] / 2))
        by_gap.setdefault(column[u], []).append(label)
        path = "M {:.1f} {:.1f} C {:.1f} {:.1f}, {:.1f} {:.1f}, {:.1f} {:.1f}".format(*sum(curve, ()))
        out.append(Edge(u, v, text, path, label))
    for labels in by_gap.values():
        _spread(labels)
    for e in out:
        e.label = tuple(e.label)
    width = max((x + w for x, _, w, _ in boxes.values()), default=0) + MARGIN
    height = max((y + h for _, y, _, h in boxes.values()), default=LEGEND_H) + MARGIN
    return Drawing(boxes, out, max(width, 620.0), height)


def _graphviz(graph: "DataflowGraph", dot: str) -> Drawing:
    """Node placement and edge splines from ``dot -Tjson0``; boxes keep the
    sizes computed here, so the SVG text fits whichever engine placed them."""
    ids = list(graph.nx.nodes)
    number = {v: k for k, v in enumerate(ids)}
    edges = _edges(graph)
    src = ["digraph G {", "rankdir=LR; nodesep=0.25; ranksep=0.5;",
           'node [shape=box, fixedsize=true, label=""];',
           'edge [fontname="monospace", fontsize=12];']
    for v in ids:
        w, h = _box_size(node_lines(graph, v))
        src.append(f"n{number[v]} [width={w / DPI:.3f}, height={h / DPI:.3f}];")
    for u, v, text in edges:
        src.append(f"n{number[u]} -> n{number[v]} [label={json.dumps(' ' * len(text))}];")
    src.append("}")
    result = subprocess.run([dot, "-Tjson0"], input="\n".join(src), capture_output=True, text=True,
                            timeout=30, check=True)
    data = json.loads(result.stdout)
    _, _, bb_w, bb_h = (float(f) for f in data["bb"].split(","))

    def svg_point(text: str) -> tuple[float, float]:
        px, py = (float(f) for f in text.split(","))
        return px + MARGIN, bb_h - py + MARGIN + LEGEND_H

    boxes = {}
    for obj in data.get("objects", []):
        v = ids[int(obj["name"][1:])]
        cx, cy = svg_point(obj["pos"])
        w, h = float(obj["width"]) * DPI, float(obj["height"]) * DPI
        boxes[v] = (cx - w / 2, cy - h / 2, w, h)
    out = []
    for (u, v, text), e in zip(edges, sorted(data.get("edges", []), key=lambda e: e["_gvid"])):
        parts = e["pos"].split()
        end = [svg_point(p[2:]) for p in parts if p.startswith("e,")]
        pts = [svg_point(p) for p in parts if not p.startswith(("e,", "s,"))]
        path = f"M {pts[0][0]:.1f} {pts[0][1]:.1f} " + " ".join(
            "C " + ", ".join(f"{x:.1f} {y:.1f}" for x, y in pts[k:k + 3]) for k in range(1, len(pts) - 2, 3))
        if end:
            path += f" L {end[0][0]:.1f} {end[0][1]:.1f}"
        out.append(Edge(u, v, text, path, svg_point(e["lp"]) if "lp" in e else pts[len(pts) // 2]))
    return Drawing(boxes, out, max(bb_w + 2 * MARGIN, 620.0), bb_h + 2 * MARGIN + LEGEND_H)


def compute(graph: "DataflowGraph", engine: str = "auto") -> Drawing:
    """Place the graph: ``engine`` is ``"dot"``, ``"builtin"`` or ``"auto"``
    (dot when on PATH, falling back to the built-in layout if dot fails)."""
    if engine not in ("auto", "dot", "builtin"):
        raise ValueError(f"engine {engine!r}: use 'auto', 'dot' or 'builtin'")
    dot = shutil.which("dot") if engine != "builtin" else None
    if engine == "dot" and dot is None:
        raise RuntimeError("graphviz 'dot' is not on PATH; use engine='builtin'")
    if dot:
        try:
            return _graphviz(graph, dot)
        except (OSError, subprocess.SubprocessError, ValueError, KeyError):
            if engine == "dot":
                raise
    return _builtin(graph)


def layout(graph: "DataflowGraph", engine: str = "auto") -> dict[str, Box]:
    """``{node_id: (x, y, width, height)}`` in SVG coordinates, as drawn."""
    return compute(graph, engine).boxes


def _text(x: float, y: float, lines: list[str], **attrs) -> str:
    extra = "".join(f" {k.replace('_', '-')}={quoteattr(str(v))}" for k, v in attrs.items())
    spans = "".join(f'<tspan x="{x:.1f}" dy="{LINE_H if k else 0:.0f}">{escape(line)}</tspan>'
                    for k, line in enumerate(lines))
    return f'<text x="{x:.1f}" y="{y:.1f}"{extra}>{spans}</text>'


def _style(graph: "DataflowGraph", node_id: str) -> str:
    node = graph.node(node_id)
    if isinstance(node, Tasklet):
        return "backward" if node.backward else "tasklet"
    return "gradient" if is_gradient(graph.containers[node.container]) else "container"


def _node_svg(graph: "DataflowGraph", node_id: str, box: Box) -> str:
    x, y, w, h = box
    style = _style(graph, node_id)
    fill, stroke = STYLE[style]
    is_access = style in ("container", "gradient")
    role = graph.containers[graph.node(node_id).container].role if is_access else None
    dash = ' stroke-dasharray="5 3"' if style == "gradient" else ""
    rect = (f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" rx="{14 if is_access else 3}" '
            f'fill="{fill}" stroke="{stroke}" stroke-width="{2.5 if role in ("argument", "result") else 1.2}"'
            f'{dash}/>')
    lines = node_lines(graph, node_id)
    head = _text(x + w / 2, y + PAD / 2 + 12, lines[:1], text_anchor="middle", font_weight="bold")
    body = _text(x + w / 2, y + PAD / 2 + 12 + LINE_H, lines[1:], text_anchor="middle") if lines[1:] else ""
    return (f'<g class="node {style}" id={quoteattr("node-" + node_id)}>'
            f"<title>{escape(node_title(graph, node_id))}</title>{rect}{head}{body}</g>")


def _edge_svg(graph: "DataflowGraph", e: Edge) -> str:
    backward = any(isinstance(n, Tasklet) and n.backward for n in (graph.node(e.source), graph.node(e.target)))
    color = STYLE["backward" if backward else "container"][1]
    label = _shorten(e.text, EDGE_CHARS)
    lx, ly = e.label
    bg_w = len(label) * CHAR_W + 4
    return (f'<g class="edge"><title>{escape(f"{e.source} -> {e.target}: {e.text}")}</title>'
            f'<path d="{e.path}" fill="none" stroke="{color}" stroke-width="1.2" marker-end="url(#sd-arrow)"/>'
            f'<rect x="{lx - bg_w / 2:.1f}" y="{ly - 8:.1f}" width="{bg_w:.1f}" height="14" fill="white" '
            f'fill-opacity="0.85"/>'
            + _text(lx, ly + 3.5, [label], text_anchor="middle", font_size="11", fill=color) + "</g>")


def _legend_svg() -> str:
    parts, x = [], MARGIN
    for style, text in LEGEND:
        fill, stroke = STYLE[style]
        dash = ' stroke-dasharray="5 3"' if style == "gradient" else ""
        parts.append(f'<rect x="{x:.1f}" y="8" width="18" height="12" rx="{6 if style in ("container", "gradient") else 2}" '
                     f'fill="{fill}" stroke="{stroke}"{dash}/>')
        parts.append(_text(x + 24, 18, [text], font_size="11"))
        x += 24 + len(text) * 6.6 + 18
    return f'<g class="legend">{"".join(parts)}</g>'


def to_svg(graph: "DataflowGraph", engine: str = "auto") -> str:
    """A standalone SVG document of the graph (what Jupyter displays)."""
    d = compute(graph, engine)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{d.width:.0f}" height="{d.height:.0f}" '
             f'viewBox="0 0 {d.width:.0f} {d.height:.0f}" font-family="DejaVu Sans Mono, Menlo, Consolas, monospace" '
             f'font-size="12">',
             f"<title>{escape(repr(graph))}</title>",
             '<defs><marker id="sd-arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
             'markerHeight="7" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#4b5563"/>'
             "</marker></defs>",
             '<rect width="100%" height="100%" fill="white"/>', _legend_svg()]
    parts += [_edge_svg(graph, e) for e in d.edges]
    parts += [_node_svg(graph, v, box) for v, box in d.boxes.items()]
    parts.append("</svg>")
    return "\n".join(parts)
