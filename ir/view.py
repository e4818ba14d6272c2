"""The interactive graph view for Jupyter: one self-contained HTML block.

``GraphView(graph)`` (also ``graph.view()``, and what a graph displays as in
Jupyter) is inline SVG plus a little inline JavaScript: no server, no
network, no widget, so it works in JupyterLab, VS Code's notebook viewer and
a notebook exported to HTML alike.  Where scripts do not run (an untrusted
notebook) the first drawing still shows, as static SVG.

- Pan (drag) and zoom (Ctrl or ⌘ + wheel, a trackpad pinch, or the + / − /
  fit buttons); a plain wheel scrolls the notebook as usual.
- Click a box: its details (expression, domain, memlets, source line, and
  whatever the caller adds: partial derivatives, kernel, Slang lines).
- Large graphs (more than ``COLLAPSE_ABOVE`` boxes) open grouped, one box per
  user source line; "by kernel" groups by the fused kernel instead when the
  caller passes the kernel plan.  Clicking a group opens its inside; "all
  nodes" shows every node (up to ``DRAW_ALL_UP_TO`` nodes: a drawing of
  thousands of boxes takes long to lay out and is no use at a glance;
  ``to_svg()`` still draws them all).

The view knows only ``ir``: kernels and extra details come in as plain data
(``{kernel: [tasklet, ...]}``, ``{node: [(label, text), ...]}``), which
``symdiff``'s ``program.view()`` fills from the compiled program.
"""
from __future__ import annotations

import dataclasses
import html
import itertools
import json
import linecache
import os
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

import networkx as nx

from . import render
from . import tasklet_notes as notes
from .graph_notes import GraphNotes
from .graph import AccessNode, Tasklet
from .library.node import LibraryNode

if TYPE_CHECKING:
    from .graph import DataflowGraph

COLLAPSE_ABOVE = 80   # boxes; larger graphs open grouped
DRAW_ALL_UP_TO = 400  # nodes; a grouped view of a larger graph has no "all nodes" drawing


@dataclass
class _Grouping:
    """Groups of one kind (``"line"`` or ``"kernel"``): member nodes per group
    and, per group, a label."""

    kind: str
    members: dict[str, list[str]]   # group id -> graph nodes
    labels: dict[str, str]


REPR_ROWS = 20  # kernels or tasklets listed by repr() before '... N more'


class GraphView:
    """A ``DataflowGraph`` as an interactive HTML view (see the module docstring).

    ``kernels``: ``{kernel: [tasklet, ...]}`` from the lowering (adds the
    "by kernel" grouping); ``details``: extra ``(label, text)`` rows per node
    id; ``source_file``: the user's program, so source lines can be quoted;
    ``collapse``: open grouped (default: when the graph has more than
    ``COLLAPSE_ABOVE`` nodes)."""

    def __init__(self, graph: "DataflowGraph", *, kernels: Mapping[str, Sequence[str]] | None = None,
                 details: Mapping[str, Sequence[tuple[str, str]]] | None = None,
                 source_file: str | None = None, collapse: bool | None = None):
        self.graph = graph
        self.kernels = {k: list(v) for k, v in (kernels or {}).items()}
        self.details = {k: list(v) for k, v in (details or {}).items()}
        self.source_file = source_file
        self.collapse = graph.nx.number_of_nodes() > COLLAPSE_ABOVE if collapse is None else collapse
        self._scenes: dict[str, render.Scene] | None = None
        self.loops = _loops(graph)
        self.flow = nx.MultiDiGraph(graph.nx)
        for box in self.loops:
            self.flow.add_edges_from((v, box.id) for v in box.reads)
            self.flow.add_edges_from((box.id, v) for v in box.writes)
        self._groupings: list[_Grouping] | None = None

    # -- what Jupyter calls ---------------------------------------------------------
    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        """HTML (the interactive view) and, for front ends without HTML, the static SVG."""
        bundle = {"text/html": self.to_html()}
        if "all" in self.scenes():
            bundle["image/svg+xml"] = self.to_svg()
        return bundle

    def __repr__(self) -> str:
        """What a plain REPL shows instead of the view: a text summary (what
        each kernel or tasklet holds) and how to see the view itself."""
        g = self.graph
        tasklets = g.tasklets()
        backward = sum(1 for t in tasklets if t.backward)
        kernels = f", {len(self.kernels)} kernel(s)" if self.kernels else ""
        head = (f"<GraphView of {g.name!r}: {len(g.containers)} containers, {len(tasklets)} tasklets "
                f"({backward} backward){kernels}>")
        rows = ([f"  kernel {k}: {', '.join(members)}" for k, members in self.kernels.items()] if self.kernels
                else [f"  {'backward ' if t.backward else ''}tasklet {t.name}"
                      f"{' (' + t.source + ')' if t.source else ''}" for t in tasklets])
        if len(rows) > REPR_ROWS:
            rows = rows[:REPR_ROWS] + [f"  ... {len(rows) - REPR_ROWS} more"]
        hint = ("The interactive view displays in Jupyter. Here: .save('graph.html') writes it as a page to "
                "open in a browser, .to_svg() gives a static drawing, print(view.graph) the graph as text.")
        return "\n".join([head, *rows, hint])

    def to_svg(self) -> str:
        """The static drawing of every node (for papers and docs)."""
        return render.scene_svg(self.scenes().get("all") or render.graph_scene(self.graph), repr(self.graph))

    def draws_all(self) -> bool:
        """Whether the view has the drawing of every node (see ``DRAW_ALL_UP_TO``)."""
        return (not self.collapse or self.graph.nx.number_of_nodes() <= DRAW_ALL_UP_TO
                or not self.groupings()[0].members)   # nothing to group (no source lines): draw it all

    def save(self, path: str) -> None:
        """Write a standalone HTML page with the view."""
        with open(path, "w", encoding="utf-8") as f:
            f.write(f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{html.escape(self.graph.name)}"
                    f"</title></head><body>{self.to_html()}</body></html>")

    # -- the pieces ---------------------------------------------------------------
    def _make_groupings(self) -> list[_Grouping]:
        out = [_group(self.graph, self.flow, "line", self._line_of)]
        if self.kernels:
            kernel_of = {}
            for kernel, names in self.kernels.items():
                for name in names:
                    kernel_of.setdefault(name, kernel)
            out.append(_group(self.graph, self.flow, "kernel", lambda t: kernel_of.get(t.name)))
        return out

    def _line_of(self, t: Tasklet) -> str | None:
        """``"line 7"`` (``"line 7, backward"``): a group's key and label; the
        file is in the group's details.  The tasklets of one call of a
        ``sd.custom_vjp`` function (``tasklet_notes.custom_vjp_call``) form one
        group named after the call, its backward another."""
        if notes.custom_vjp_call(t):
            return f"{notes.custom_vjp_call(t)} (custom_vjp)" + (", backward" if t.backward else "")
        if not t.source:
            return None
        name, _, line = t.source.rpartition(":")
        return (f"line {line}" if name and line.isdigit() else t.source) + (", backward" if t.backward else "")

    def _code(self, source: str | None) -> str | None:
        if not source or not self.source_file or ":" not in source:
            return None
        name, _, line = source.rpartition(":")
        if name != os.path.basename(self.source_file) or not line.isdigit():
            return None
        return linecache.getline(self.source_file, int(line)).strip() or None

    def node_details(self, node_id: str) -> dict:
        """``{"title": ..., "rows": [[label, text], ...]}`` shown when the box is clicked."""
        g = self.graph
        node = g.node(node_id)
        if isinstance(node, AccessNode):
            c = g.containers[node.container]
            rows = [("container", f"{c.name}, version {node.version}"), ("shape", render._shape(c)),
                    ("role", c.role + (" (gradient)" if render.is_gradient(c) else ""))]
            rows += [("written by", t) for t in dict.fromkeys(g.nx.predecessors(node_id))]
            rows += [("read by", t) for t in dict.fromkeys(g.nx.successors(node_id))]
            title = f"{c.name} #{node.version}"
        elif isinstance(node, LibraryNode):  # one whole-array operation (ir.library)
            rows = [("kind", ("backward " if node.backward else "") + "library node"), ("operation", node.op),
                    ("call", render.library_signature(g, node))]
            rows += [("parameter", f"{k} = {v!r}") for k, v in node.params.items()]
            if node.source:
                code = self._code(node.source)
                rows.append(("source", node.source + (f"   {code}" if code else "")))
            title = f"library node {node.name}: {node.op}"
        else:
            rows = [("kind", "backward tasklet" if node.backward else "forward tasklet")]
            if node.source:
                code = self._code(node.source)
                rows.append(("source", node.source + (f"   {code}" if code else "")))
            rows.append(("domain", render.domain_text(node)))
            if render._has_condition(node):
                rows.append(("if", str(node.condition)))
            rows += [("expression", f"{conn} = {expr}") for conn, expr in node.body.items()]
            rows += [("reads", render.memlet_text(m, False)) for _, m in g.reads(node.name)]
            rows += [("writes", render.memlet_text(m, True)) for _, m in g.writes(node.name)]
            if notes.forward_tasklet(node):
                rows.append(("derived from", ", ".join(notes.forward_tasklets(node))))
            rows += [tuple(c.split(": ", 1)) for c in render.choices(node)]
            rows += [("kernel", k) for k, names in self.kernels.items() if node.name in names
                     and not any(label == "kernel" for label, _ in self.details.get(node_id, ()))]
            title = f"{'backward ' if node.backward else ''}tasklet {node.name}"
        rows += self.details.get(node_id, [])
        return {"title": title, "rows": [list(r) for r in rows]}

    def _group_details(self, grouping: _Grouping, gid: str) -> dict:
        members = grouping.members[gid]
        tasklets = [v for v in members if isinstance(self.graph.node(v), Tasklet)]
        rows = [(grouping.kind, grouping.labels[gid]), ("tasklets", ", ".join(tasklets))]
        if grouping.kind == "line":
            source = self.graph.node(tasklets[0]).source
            code = self._code(source)
            rows.insert(1, ("source", source + (f"   {code}" if code else "")))
        rows += self.details.get(grouping.labels[gid], [])
        return {"title": f"{grouping.labels[gid]}: {len(tasklets)} tasklets", "rows": [list(r) for r in rows],
                "scene": f"{grouping.kind}:{gid}"}

    def scenes(self) -> dict[str, render.Scene]:
        """Every drawing the view can show, by name: ``"all"``, one per
        grouping (``"line"``, ``"kernel"``), and one per group (``"line:G3"``).
        Computed once (each is placed once, when first drawn)."""
        if self._scenes is None:
            self._scenes = self._make_scenes()
        return self._scenes

    def groupings(self) -> list[_Grouping]:
        """Groupings offered: by source line always, by kernel when kernels were given."""
        if self._groupings is None:
            self._groupings = self._make_groupings()
        return self._groupings

    def _make_scenes(self) -> dict[str, render.Scene]:
        g = self.graph
        every = {v: render.graph_item(g, v) for v in g.nx.nodes}
        every.update((box.id, box.item()) for box in self.loops)
        loop_links = [link for box in self.loops for link in box.links()]
        links = render.graph_links(g) + loop_links
        out = {"all": render.Scene(every, links)} if self.draws_all() else {}
        for grouping in self.groupings():
            mapping = {v: gid for gid, vs in grouping.members.items() for v in vs}
            items = {v: item for v, item in every.items() if v not in mapping}
            for gid, vs in grouping.members.items():
                items[gid] = self._group_item(grouping, gid, vs)
            out[grouping.kind] = render.Scene(items, render.graph_links(g, mapping) + [
                render.Link(mapping.get(k.source, k.source), mapping.get(k.target, k.target), k.title, k.backward)
                for k in loop_links])
            for gid, vs in grouping.members.items():
                inside = set(vs) | {n for v in vs for n in itertools.chain(self.flow.predecessors(v),
                                                                            self.flow.successors(v))}
                out[f"{grouping.kind}:{gid}"] = render.Scene({v: item for v, item in every.items() if v in inside}, [
                    link for link in links if link.source in inside and link.target in inside])
        for box in self.loops:   # a loop opens to its body
            inner = render.graph_scene(box.body)
            out[f"loop:{box.id}"] = render.Scene(
                {f"{box.id}/{v}": dataclasses.replace(item, id=f"{box.id}/{v}") for v, item in inner.items.items()},
                [dataclasses.replace(k, source=f"{box.id}/{k.source}", target=f"{box.id}/{k.target}")
                 for k in inner.links])
        return out

    def _group_item(self, grouping: _Grouping, gid: str, members: list[str]) -> render.Item:
        tasklets = [self.graph.node(v) for v in members if isinstance(self.graph.node(v), Tasklet)]
        back = {t.backward for t in tasklets}
        style = "mixed" if len(back) == 2 else "backward" if True in back else "tasklet"
        label = grouping.labels[gid]
        code = self._code(tasklets[0].source) if grouping.kind == "line" else None
        lines = [render._shorten(label)]
        if len(tasklets) == 1:
            lines += render.node_lines(self.graph, tasklets[0].name)[1:2]
        else:
            lines.append(f"{len(tasklets)} tasklets, {len(members) - len(tasklets)} containers")
        if code:
            lines.append(render._shorten(code))
        title = f"{label}\n" + "\n".join(t.name for t in tasklets) + "\n(click to open)"
        return render.Item(gid, lines, style, title, group=True)

    def to_html(self) -> str:
        """The view as one HTML block (what Jupyter displays)."""
        root = f"sdv{uuid.uuid4().hex[:12]}"   # unique among all views on a page, across kernels
        groupings = {gr.kind: gr for gr in self.groupings()}
        scenes = self.scenes()
        data = {v: self.node_details(v) for v in self.graph.nx.nodes}
        for box in self.loops:
            data[box.id] = {"title": box.id, "rows": [list(r) for r in box.rows], "scene": f"loop:{box.id}"}
            body = GraphView(box.body)
            data.update((f"{box.id}/{v}", body.node_details(v)) for v in box.body.nx.nodes)
        for gr in groupings.values():
            for gid in gr.members:
                data[f"{gr.kind}/{gid}"] = self._group_details(gr, gid)
        start = "line" if self.collapse and groupings["line"].members else "all"
        svgs = []
        for k, (name, scene) in enumerate(scenes.items()):
            title = self.graph.name if ":" not in name else name
            svgs.append(render.scene_svg(scene, title, prefix=f"{root}-{k}-", attrs=(
                f' class="sdv-scene" data-scene={_attr(name)}'
                f' style="{"" if name == start else "display:none;"}width:100%;height:auto;max-width:'
                f'{max(render.place(scene).width, 620.0):.0f}px;cursor:grab"')))
        buttons = [("all", "all nodes"), ("line", "by source line")] + (
            [("kernel", "by kernel")] if "kernel" in groupings else [])
        bar = "".join(f'<button type="button" data-show="{k}">{html.escape(t)}</button>' for k, t in buttons
                      if k in scenes)
        if "all" not in scenes:
            bar += (f'<button type="button" disabled title="more than {DRAW_ALL_UP_TO} nodes: '
                    f'graph.view(collapse=False) or graph.to_svg() draws every one">all nodes</button>')
        bar += ('<span class="sdv-sep"></span><button type="button" data-zoom="1.25">+</button>'
                '<button type="button" data-zoom="0.8">−</button><button type="button" data-zoom="fit">fit</button>'
                '<span class="sdv-where"></span>')
        n_nodes, n_tasklets = self.graph.nx.number_of_nodes(), len(self.graph.tasklets())
        return (f'<div class="symdiff-view" id="{root}" data-start="{start}" style="{_CSS_ROOT}">'
                f'<div class="sdv-head" style="{_CSS_HEAD}"><div class="sdv-bar">{bar}'
                f'<span style="margin-left:1em;color:#666">{html.escape(self.graph.name)}: {n_nodes} nodes, '
                f'{n_tasklets} tasklets. Drag to pan, Ctrl+wheel to zoom, click a box for details.</span></div>'
                f'<div class="sdv-details" style="{_CSS_DETAILS}">Click a box for its details.</div></div>'
                f'<div class="sdv-stage" style="overflow:hidden;border:1px solid #ddd">{"".join(svgs)}</div>'
                f'<script type="application/json" class="sdv-data">{_json(data)}</script>'
                f"<script>{_JS.replace('@ROOT@', root)}</script></div>")


@dataclass
class _LoopBox:
    """A loop kept out of the graph, drawn as one box from the containers its
    state comes from to those it goes to (its backward: from the gradients of
    those to the seeds of these)."""

    id: str
    reads: list[str]
    writes: list[str]
    rows: list[tuple[str, str]]
    backward: bool
    body: "DataflowGraph"

    def item(self) -> render.Item:
        lines = [render._shorten(self.id), render._shorten(self.rows[1][1]),
                 f"body: {len(self.body.tasklets())} tasklets"]
        title = "\n".join(text for _, text in self.rows[:3])
        return render.Item(self.id, lines, "backward" if self.backward else "tasklet", title, group=True)

    def links(self) -> list[render.Link]:
        return ([render.Link(v, self.id, f"{self.id}: state in {v}", self.backward) for v in self.reads]
                + [render.Link(self.id, v, f"{self.id}: state out {v}", self.backward) for v in self.writes])


def _loops(graph: "DataflowGraph") -> list[_LoopBox]:
    """The loops ``sd.fori_loop`` / ``sd.while_loop`` keep out of a graph,
    from ``GraphNotes.loops`` (entries with ``name``, ``lo``, ``hi``
    (``None`` for a while loop), ``body`` (a graph), ``inputs``, ``outputs``,
    ``where``) and, in a backward graph, ``GraphNotes.loop_gradients`` /
    ``loop_seeds``: one box each way, its body in the details."""

    def access(container: str | None, last: bool) -> list[str]:
        versions = graph.versions(container) if container in graph.containers else []
        return [f"{container}#{versions[-1 if last else 0]}"] if versions else []

    out = []
    graph_notes = GraphNotes(graph)
    grads, seeds = graph_notes.loop_gradients or {}, graph_notes.loop_seeds or {}
    for loop in graph_notes.loops:
        body = loop.body
        trips = f"i in [{loop.lo}, {loop.hi})" if loop.hi is not None else "while its condition holds"
        rows = [("loop", f"{'fori_loop' if loop.hi is not None else 'while_loop'} {loop.name}"), ("iterations", trips),
                ("source", str(loop.where)), ("state in", ", ".join(loop.inputs)),
                ("state out", ", ".join(loop.outputs))]
        rows += [("body", line.strip()) for line in body.summary().splitlines()[1:]]
        forward = _LoopBox(f"{loop.name} (loop)", [a for c in loop.inputs for a in access(c, True)],
                           [a for c in loop.outputs for a in access(c, False)], rows, False, body)
        out.append(forward)
        back_reads = [a for c in loop.outputs for a in access(grads.get(c), True)]
        back_writes = [a for c in loop.inputs for a in access(seeds.get(c), False)]
        if back_reads or back_writes:
            rows = [("loop", f"reverse of {loop.name}: its body's vector-Jacobian product, iterations backwards")]
            out.append(_LoopBox(f"{loop.name} (loop), backward", back_reads, back_writes,
                                rows + forward.rows[1:], True, body))
    return out


def _attr(text: str) -> str:
    return '"' + html.escape(text, quote=True) + '"'


def _json(data) -> str:
    """JSON safe inside a <script> element."""
    return json.dumps(data).replace("<", "\\u003c")   # no "</script>" or "<!--" inside


def _group(graph: "DataflowGraph", flow: nx.MultiDiGraph, kind: str,
           key: Callable[[Tasklet], str | None]) -> _Grouping:
    """Tasklets with the same ``key``, connected through the containers they
    write, form a group with those containers.  A lone node is left as it
    is, and where groups would make the grouped graph
    cyclic the smallest on the cycle is dissolved, so the grouped drawing is layered like the graph."""
    g = flow   # the graph's nodes and edges plus its loops' boxes
    keyed = {v: key(graph.node(v)) for v in graph.nx.nodes if isinstance(graph.node(v), Tasklet)}
    member_key = {v: k for v, k in keyed.items() if k is not None}
    for v in graph.nx.nodes:  # a container goes with the group that writes it
        writers = {member_key.get(n) for n in g.predecessors(v)} if v not in keyed else {None}
        if len(writers) == 1 and None not in writers:
            member_key[v] = next(iter(writers))
    members: dict[str, list[str]] = {}
    labels: dict[str, str] = {}
    simple = nx.Graph()
    simple.add_nodes_from(member_key)
    simple.add_edges_from((u, v) for u, v in g.edges() if u in member_key and v in member_key
                          and member_key[u] == member_key[v])
    index = {v: k for k, v in enumerate(g.nodes)}
    comps = sorted((sorted(c, key=index.get) for c in nx.connected_components(simple)), key=lambda c: index[c[0]])
    pieces = [p for comp in comps for p in _convex(g, comp, simple)]
    for piece in sorted(pieces, key=lambda p: index[p[0]]):
        if len(piece) < 2:
            continue
        gid = f"G{len(members)}"
        members[gid] = piece
        labels[gid] = member_key[piece[0]]
    while True:
        mapping = {v: gid for gid, vs in members.items() for v in vs}
        q = nx.DiGraph()
        q.add_nodes_from(mapping.get(v, v) for v in g.nodes)
        q.add_edges_from((mapping.get(u, u), mapping.get(v, v)) for u, v in g.edges()
                         if mapping.get(u, u) != mapping.get(v, v))
        cyclic = [c for c in nx.strongly_connected_components(q) if len(c) > 1]
        if not cyclic:
            break
        for c in cyclic:  # the smallest group on each cycle goes back to single nodes
            del members[min(c & members.keys(), key=lambda gid: len(members[gid]))]
    return _Grouping(kind, members, labels)


def _convex(g: nx.MultiDiGraph, members: list, simple: nx.Graph) -> list[list]:
    """``members`` cut into connected pieces that no path leaves and re-enters
    (the backward tasklets of one line interleave with other lines' ones): a
    piece is what is not reachable by leaving the group, then the rest."""
    inside = set(members)
    reentered: set = set()
    for v in members:
        for w in g.successors(v):
            if w not in inside and w not in reentered:
                reentered |= {w} | nx.descendants(g, w)
    late = [v for v in members if v in reentered]
    if not late or len(late) == len(members):
        parts = [members]
    else:
        parts = [[v for v in members if v not in reentered], late]
    out = []
    for part in parts:
        for comp in nx.connected_components(simple.subgraph(part)):
            piece = [v for v in part if v in comp]
            out += [piece] if len(parts) == 1 else _convex(g, piece, simple)
    return out


_CSS_ROOT = "font-family:system-ui,sans-serif;font-size:13px;max-width:100%"
# The toolbar and details stay in sight (sticky) while a tall drawing scrolls past.
_CSS_HEAD = "position:sticky;top:0;z-index:2;background:white;padding-bottom:4px"
_CSS_DETAILS = ("margin-top:4px;padding:6px 8px;border:1px solid #ddd;background:#fafafa;"
                "font-family:monospace;font-size:12px;white-space:pre-wrap;max-height:18em;overflow:auto")

# Pan/zoom by a transform on the drawing's "sd-world" group (the <svg> keeps its
# size); details from the JSON block; groups open their own drawing.
_JS = r"""
(function () {
  // Found from the script itself first: JupyterLab and VS Code may run it
  // before the output is attached to the document.
  var me = document.currentScript;
  var root = (me && me.closest && me.closest(".symdiff-view")) || document.getElementById("@ROOT@");
  if (!root || root.getAttribute("data-ready")) return;
  root.setAttribute("data-ready", "1");
  var data = JSON.parse(root.querySelector("script.sdv-data").textContent);
  var panel = root.querySelector(".sdv-details"), where = root.querySelector(".sdv-where");
  var scenes = {}, view = {}, current = null, trail = [];
  root.querySelectorAll("svg.sdv-scene").forEach(function (svg) {
    scenes[svg.getAttribute("data-scene")] = svg;
    view[svg.getAttribute("data-scene")] = {x: 0, y: 0, k: 1};
  });
  function apply() {
    var v = view[current];
    scenes[current].querySelector("g.sd-world").setAttribute(
      "transform", "translate(" + v.x + " " + v.y + ") scale(" + v.k + ")");
  }
  function show(name, mode) {  // mode: "open" (a group), "back", or a fresh choice
    if (!scenes[name]) return;
    if (mode === "open") trail.push(current); else if (mode !== "back") trail = [];
    Object.keys(scenes).forEach(function (n) { scenes[n].style.display = n === name ? "" : "none"; });
    current = name;
    root.querySelectorAll("button[data-show]").forEach(function (b) {
      b.style.fontWeight = b.getAttribute("data-show") === name ? "bold" : "";
    });
    where.textContent = name.indexOf(":") > 0 ? "  inside a group (" + name + ")  " : "";
    if (trail.length) {
      var back = document.createElement("button");
      back.type = "button"; back.textContent = "back";
      back.onclick = function () { show(trail.pop(), "back"); };
      where.appendChild(back);
    }
    apply();
  }
  function point(svg, evt) {
    var p = svg.createSVGPoint(); p.x = evt.clientX; p.y = evt.clientY;
    return p.matrixTransform(svg.getScreenCTM().inverse());
  }
  function zoom(f, at) {
    var v = view[current], svg = scenes[current];
    if (!at) { var vb = svg.viewBox.baseVal; at = {x: vb.width / 2, y: vb.height / 2}; }
    v.x = at.x - (at.x - v.x) * f; v.y = at.y - (at.y - v.y) * f; v.k *= f; apply();
  }
  function key(scene, box) {  // a group's details are per grouping, a node's and a loop's by id
    var id = box.getAttribute("data-id");
    return data[scene.split(":")[0] + "/" + id] ? scene.split(":")[0] + "/" + id : id;
  }
  function describe(id) {
    var d = data[id]; if (!d) return;
    panel.textContent = "";
    var h = document.createElement("b"); h.textContent = d.title; panel.appendChild(h);
    d.rows.forEach(function (r) {
      var line = document.createElement("div");
      var label = document.createElement("span");
      label.style.cssText = "color:#666;display:inline-block;min-width:9em"; label.textContent = r[0];
      var text = document.createElement("span"); text.className = "sdv-value"; text.textContent = r[1];
      line.appendChild(label); line.appendChild(text); panel.appendChild(line);
    });
    if (d.scene) {
      var open = document.createElement("button"); open.type = "button"; open.textContent = "open group";
      open.onclick = function () { show(d.scene, "open"); }; panel.appendChild(open);
    }
  }
  Object.keys(scenes).forEach(function (name) {
    var svg = scenes[name], drag = null;
    svg.addEventListener("wheel", function (e) {
      if (!e.ctrlKey && !e.metaKey) return;   // a plain wheel scrolls the notebook past a tall drawing
      e.preventDefault(); zoom(e.deltaY < 0 ? 1.15 : 1 / 1.15, point(svg, e));
    }, {passive: false});
    svg.addEventListener("pointerdown", function (e) {
      drag = {x: e.clientX, y: e.clientY, moved: false};
    });
    svg.addEventListener("pointermove", function (e) {
      if (!drag || !(e.buttons & 1)) return;
      var m = svg.getScreenCTM(), v = view[name];
      v.x += (e.clientX - drag.x) / m.a; v.y += (e.clientY - drag.y) / m.d;
      if (Math.abs(e.clientX - drag.x) + Math.abs(e.clientY - drag.y) > 2) drag.moved = true;
      drag.x = e.clientX; drag.y = e.clientY; apply();
    });
    svg.addEventListener("pointerup", function () { setTimeout(function () { drag = null; }, 0); });
    svg.addEventListener("click", function (e) {
      if (drag && drag.moved) return;
      var box = e.target.closest("g.node, g.group");
      if (!box) return;
      root.querySelectorAll(".sdv-selected").forEach(function (b) {
        b.classList.remove("sdv-selected"); b.querySelector("rect:last-of-type").style.strokeWidth = ""; });
      box.classList.add("sdv-selected");
      box.querySelector("rect:last-of-type").style.strokeWidth = "4";
      var id = box.getAttribute("data-id");
      describe(key(name, box));
    });
    svg.addEventListener("dblclick", function (e) {
      var box = e.target.closest("g.group"), d = box && data[key(name, box)];
      if (d && d.scene) show(d.scene, "open");
    });
  });
  root.querySelectorAll("button[data-show]").forEach(function (b) {
    b.onclick = function () { show(b.getAttribute("data-show")); };
  });
  root.querySelectorAll("button[data-zoom]").forEach(function (b) {
    b.onclick = function () {
      var z = b.getAttribute("data-zoom");
      if (z === "fit") { view[current] = {x: 0, y: 0, k: 1}; apply(); } else zoom(parseFloat(z));
    };
  });
  show(root.getAttribute("data-start"));
})();
"""
