"""SVG drawing of a ``DataflowGraph`` (``graph.to_svg()``, the static export
for papers and docs, also embedded in the interactive ``ir.view``).

A box says what a node is at a glance: a container's name, version and
shape; a tasklet's name and body.  Everything else (domain, condition,
memlet indices, the differentiator's store/recompute choice, the lowering's
strategy) is in the box's ``<title>`` (shown on hover) and in the
interactive view's details panel, so that boxes stay small enough for a
100-node graph to fit a notebook cell.  Colour tells forward (blue) from
backward (orange) tasklets, and gradient containers (yellow, dashed) from
the others; arguments and results have a thick border.

Placement is ``ir.layout``: layered top to bottom, wrapped into bands.
Drawing works on plain ``Item``s so that ``ir.view`` can draw grouped graphs
(one box per source line or kernel) with the same code.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Mapping
from xml.sax.saxutils import escape, quoteattr

import networkx as nx

from . import layout as _layout
from . import tasklet_notes as notes
from .graph import AccessNode, Container, Memlet, Tasklet
from .library.node import LibraryNode
from .layout import Box

if TYPE_CHECKING:
    from .graph import DataflowGraph

CHAR_W = 7.2          # advance of a 12px monospace glyph
LINE_H = 16.0
PAD = 8.0
LABEL_CHARS = 34      # longest text line on a box before it is shortened
BODY_LINES = 2        # body lines shown on a tasklet's box
LEGEND_H = 30.0
MARGIN = 10.0
CORNER = 6.0          # radius where an edge turns in a gutter

STYLE = {
    "tasklet": ("#dbeafe", "#1d4ed8"),     # forward: blue
    "backward": ("#ffedd5", "#c2410c"),    # backward: orange
    "container": ("#f9fafb", "#4b5563"),
    "gradient": ("#fef9c3", "#a16207"),
    "mixed": ("#ede9fe", "#6d28d9"),       # a group with forward and backward tasklets
    "library": ("#dcfce7", "#15803d"),     # a library node (np.linalg.solve): green
}
LEGEND = [("tasklet", "forward tasklet"), ("backward", "backward tasklet"),
          ("container", "container #version"), ("gradient", "gradient container")]


def _shorten(text: str, limit: int = LABEL_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _shape(c: Container) -> str:
    return f"{c.dtype}[{', '.join(str(s) for s in c.shape)}]" if c.shape else f"{c.dtype} scalar"


def is_gradient(c: Container) -> bool:
    """Gradient containers, by the names the differentiator gives them
    (``symdiff.backward``: ``grad_<input>``, ``grad_<container>_<version>``
    and the seeds ``seed_<output>``); hand-built graphs follow the same names."""
    return c.name.startswith(("grad_", "seed_"))


def domain_text(t: Tasklet) -> str:
    return "[" + ", ".join(f"{s}={b}:{e}" for s, b, e in t.domain) + "]"


def _has_condition(t: Tasklet) -> bool:
    return str(t.condition) != "True"


def choices(t: Tasklet) -> list[str]:
    """The differentiator's and the lowering's decisions recorded on a tasklet."""
    out = []
    if notes.forward_values(t):
        out.append(f"forward values: {notes.forward_values(t)}")
    if notes.strategy(t):
        out.append(f"strategy: {notes.strategy(t)}")
    if notes.batched(t):
        out.append(f"batched: {len(notes.batched(t))} steps")
    return out


def node_lines(graph: "DataflowGraph", node_id: str) -> list[str]:
    """The text on a node's box, each line at most ``LABEL_CHARS`` long."""
    node = graph.node(node_id)
    if isinstance(node, AccessNode):
        c = graph.containers[node.container]
        return [_shorten(f"{c.name} #{node.version}"), _shorten(_shape(c))]
    if isinstance(node, LibraryNode):  # one box: the operation, its arguments and results
        return [_shorten(f"{node.op}"), _shorten(library_signature(graph, node))]
    body = [f"{conn} = {expr}" for conn, expr in node.body.items()]
    if len(body) > BODY_LINES:
        body = body[:BODY_LINES - 1] + [f"(+{len(body) - BODY_LINES + 1} more outputs)"]
    return [_shorten(node.name)] + [_shorten(line) for line in body]


def node_title(graph: "DataflowGraph", node_id: str) -> str:
    """The full, unshortened description shown on hover."""
    node = graph.node(node_id)
    if isinstance(node, AccessNode):
        c = graph.containers[node.container]
        acc = graph.accumulation(node_id)
        return "\n".join([f"{c.name} version {node.version}", f"{c.role} {_shape(c)}"]
                         + (["gradient"] if is_gradient(c) else [])
                         + ([f"written with {acc}"] if acc else []))
    if isinstance(node, LibraryNode):
        params = ", ".join(f"{k}={v!r}" for k, v in node.params.items())
        return "\n".join([f"{'backward ' if node.backward else ''}library node {node.name}: {node.op}"
                          + (f"({params})" if params else ""), library_signature(graph, node)]
                         + ([f"from {node.source}"] if node.source else []))
    lines = [f"{'backward ' if node.backward else ''}tasklet {node.name}", f"domain {domain_text(node)}"]
    if _has_condition(node):
        lines.append(f"if {node.condition}")
    if node.source:
        lines.append(f"from {node.source}")
    lines += [f"{conn} = {expr}" for conn, expr in node.body.items()] + choices(node)
    return "\n".join(lines)


def library_signature(graph: "DataflowGraph", node: LibraryNode) -> str:
    """``(A, b) -> (x,)``: the containers a library node reads and writes."""
    from .library.node import ordered_edges
    reads, writes = ordered_edges(graph, node)
    name = lambda a: graph.node(a).container  # noqa: E731
    return f"({', '.join(map(name, reads))}) -> ({', '.join(map(name, writes))})"


def memlet_text(memlet: Memlet, write: bool) -> str:
    """Connector, container element and (for writes) the accumulation."""
    elem = f"{memlet.container}[" + ", ".join(str(i) for i in memlet.index) + "]"
    if not write:
        return f"{memlet.connector} ← {elem}"
    return f"{memlet.connector} → {elem}" + (f" ({memlet.accumulate})" if memlet.accumulate else "")


def node_style(graph: "DataflowGraph", node_id: str) -> str:
    node = graph.node(node_id)
    if isinstance(node, LibraryNode):
        return "backward" if node.backward else "library"
    if isinstance(node, Tasklet):
        return "backward" if node.backward else "tasklet"
    return "gradient" if is_gradient(graph.containers[node.container]) else "container"


@dataclass
class Item:
    """One box to draw: ``style`` is a key of ``STYLE``; ``rounded`` boxes are
    containers; ``strong`` ones (arguments, results) get a thick border."""

    id: str
    lines: list[str]
    style: str
    title: str
    rounded: bool = False
    strong: bool = False
    group: bool = False

    def size(self) -> tuple[float, float]:
        width = max(len(line) for line in self.lines) * CHAR_W + 2 * PAD
        return width + (6 if self.group else 0), len(self.lines) * LINE_H + PAD + (6 if self.group else 0)


@dataclass
class Link:
    """One drawn edge (all memlets between two boxes): ``title`` lists them."""

    source: str
    target: str
    title: str
    backward: bool = False
    accumulate: bool = False


@dataclass
class Scene:
    """Items and links to draw; ``placed`` is filled by ``place``."""

    items: dict[str, Item]
    links: list[Link]
    placed: _layout.Layout | None = field(default=None, repr=False)


def graph_item(graph: "DataflowGraph", node_id: str) -> Item:
    node = graph.node(node_id)
    strong = isinstance(node, AccessNode) and graph.containers[node.container].role in ("argument", "result")
    return Item(node_id, node_lines(graph, node_id), node_style(graph, node_id), node_title(graph, node_id),
                rounded=isinstance(node, AccessNode), strong=strong)


def graph_links(graph: "DataflowGraph", mapping: Mapping[str, str] | None = None) -> list[Link]:
    """One link per pair of drawn boxes; ``mapping`` sends graph nodes to the
    boxes that show them (a group's box), pairs inside one box are dropped."""
    pairs: dict[tuple[str, str], Link] = {}
    for u, v, data in graph.nx.edges(data=True):
        a, b = (mapping.get(u, u), mapping.get(v, v)) if mapping else (u, v)
        if a == b:
            continue
        write = not isinstance(graph.node(u), AccessNode)
        tasklet = graph.node(u if write else v)
        text = f"{tasklet.name}: {memlet_text(data['memlet'], write)}"
        link = pairs.get((a, b))
        if link is None:
            link = pairs[(a, b)] = Link(a, b, text)
        else:
            link.title += "\n" + text
        link.backward |= tasklet.backward
        link.accumulate |= bool(write and data["memlet"].accumulate)
    return list(pairs.values())


def graph_scene(graph: "DataflowGraph") -> Scene:
    """Every node of ``graph`` as its own box."""
    return Scene({v: graph_item(graph, v) for v in graph.nx.nodes}, graph_links(graph))


def place(scene: Scene) -> _layout.Layout:
    if scene.placed is None:
        g = nx.DiGraph()
        g.add_nodes_from(scene.items)
        g.add_edges_from((link.source, link.target) for link in scene.links)
        scene.placed = _layout.layout(g, {v: item.size() for v, item in scene.items.items()},
                                      margin=MARGIN, top=LEGEND_H)
    return scene.placed


def layout(graph: "DataflowGraph", engine: str = "auto") -> dict[str, Box]:
    """``{node_id: (x, y, width, height)}`` in SVG coordinates, as drawn."""
    _check_engine(engine)
    return place(graph_scene(graph)).boxes


def _check_engine(engine: str) -> None:
    if engine not in ("auto", "builtin"):
        raise ValueError(f"engine {engine!r}: use 'auto' or 'builtin' (the built-in layered layout; "
                         "Graphviz is not used)")


def _text(x: float, y: float, lines: list[str], **attrs) -> str:
    extra = "".join(f" {k.replace('_', '-')}={quoteattr(str(v))}" for k, v in attrs.items())
    spans = "".join(f'<tspan x="{x:.1f}" dy="{LINE_H if k else 0:.0f}">{escape(line)}</tspan>'
                    for k, line in enumerate(lines))
    return f'<text x="{x:.1f}" y="{y:.1f}"{extra}>{spans}</text>'


def _item_svg(item: Item, box: Box) -> str:
    x, y, w, h = box
    fill, stroke = STYLE[item.style]
    dash = ' stroke-dasharray="5 3"' if item.style == "gradient" else ""
    under = ""
    if item.group:  # a stack of cards: a group that opens
        under = (f'<rect x="{x + 5:.1f}" y="{y + 5:.1f}" width="{w - 5:.1f}" height="{h - 5:.1f}" rx="3" '
                 f'fill="{fill}" stroke="{stroke}"/>')
        w, h = w - 5, h - 5
    rect = (f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" rx="{14 if item.rounded else 3}" '
            f'fill="{fill}" stroke="{stroke}" stroke-width="{2.5 if item.strong or item.group else 1.2}"{dash}/>')
    head = _text(x + w / 2, y + PAD / 2 + 12, item.lines[:1], text_anchor="middle", font_weight="bold")
    body = _text(x + w / 2, y + PAD / 2 + 12 + LINE_H, item.lines[1:], text_anchor="middle") if item.lines[1:] else ""
    kind = "group" if item.group else "node"
    return (f'<g class="{kind} {item.style}" id={quoteattr(kind + "-" + item.id)} data-id={quoteattr(item.id)}>'
            f"<title>{escape(item.title)}</title>{under}{rect}{head}{body}</g>")


def _path(points: list[tuple[tuple[float, float], str]]) -> str:
    """SVG path data: vertical-tangent curves between rows, straight runs with
    rounded corners in gutters."""
    (x0, y0), _ = points[0]
    out = [f"M {x0:.1f} {y0:.1f}"]
    for k in range(1, len(points)):
        (xa, ya), _ = points[k - 1]
        (xb, yb), kind = points[k]
        if kind == "curve":
            ym = (ya + yb) / 2
            out.append(f"C {xa:.1f} {ym:.1f}, {xb:.1f} {ym:.1f}, {xb:.1f} {yb:.1f}")
        else:
            out.append(f"L {xb:.1f} {yb:.1f}")
    return " ".join(out)


def _link_svg(link: Link, points, prefix: str) -> str:
    color = STYLE["backward" if link.backward else "container"][1]
    dash = ' stroke-dasharray="6 3"' if link.accumulate else ""
    marker = f"{prefix}arrow-b" if link.backward else f"{prefix}arrow"
    return (f'<g class="edge"><title>{escape(link.title)}</title>'
            f'<path d="{_path(points)}" fill="none" stroke="{color}" stroke-width="1.3"{dash} '
            f'stroke-linejoin="round" marker-end="url(#{marker})"/></g>')


def _legend_svg(styles: Iterable[tuple[str, str]] = LEGEND) -> str:
    parts, x = [], MARGIN
    for style, text in styles:
        fill, stroke = STYLE[style]
        dash = ' stroke-dasharray="5 3"' if style == "gradient" else ""
        rx = 6 if style in ("container", "gradient") else 2
        parts.append(f'<rect x="{x:.1f}" y="8" width="18" height="12" rx="{rx}" fill="{fill}" stroke="{stroke}"{dash}/>')
        parts.append(_text(x + 24, 18, [text], font_size="11"))
        x += 24 + len(text) * 6.6 + 18
    return f'<g class="legend">{"".join(parts)}</g>'


def scene_svg(scene: Scene, title: str, attrs: str = "", prefix: str = "sd-") -> str:
    """A standalone ``<svg>`` of ``scene``; ``attrs`` are extra attributes of the
    root; ``prefix`` starts its element ids, which must be unique in a page
    (a marker found by id in a hidden drawing is not drawn)."""
    d = place(scene)
    width = max(d.width, 620.0)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{d.height:.0f}" '
             f'viewBox="0 0 {width:.0f} {d.height:.0f}" font-family="DejaVu Sans Mono, Menlo, Consolas, monospace" '
             f'font-size="12"{attrs}>',
             f"<title>{escape(title)}</title>",
             "<defs>" + "".join(
                 f'<marker id="{mid}" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
                 f'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="{STYLE[s][1]}"/></marker>'
                 for mid, s in ((f"{prefix}arrow", "container"), (f"{prefix}arrow-b", "backward"))) + "</defs>",
             '<rect class="sd-background" width="100%" height="100%" fill="white"/>', _legend_svg(),
             '<g class="sd-world">']
    links = {(link.source, link.target): link for link in scene.links}
    parts += [_link_svg(links[e], pts, prefix) for e, pts in d.edges.items()]
    parts += [_item_svg(scene.items[v], box) for v, box in d.boxes.items()]
    parts.append("</g></svg>")
    return "\n".join(parts)


def to_svg(graph: "DataflowGraph", engine: str = "auto") -> str:
    """A standalone SVG document of the whole graph (the static export)."""
    _check_engine(engine)
    return scene_svg(graph_scene(graph), repr(graph))
