"""A layered (Sugiyama-style) layout, top to bottom by dataflow, wrapped into
side-by-side bands so that long chains fit a notebook cell.

Pure Python on networkx so that graphs render right after ``pip install``
(no Graphviz).  No maintained Python package does this: grandalf, the one
pure-Python Sugiyama implementation on PyPI, has not had a release since
2023 and has no wrapping, which is what makes our graphs (mostly long
forward-then-backward chains, 40-120 layers deep and 1-3 nodes wide) fit a
screen at all.  The layout only needs box sizes and the edge structure, so it
is kept apart from what the boxes say.

Steps: (1) layers by longest path, sources moved down next to their first
reader; (2) a dummy node on every layer a long edge crosses, so edges are
routed between boxes, never through them; (3) barycenter sweeps to reduce
crossings; (4) x coordinates pulled towards neighbours under a minimum
separation; (5) consecutive layers cut into bands, placed left to right, the
cuts chosen where few edges cross, as few bands as keep the whole from being
a tall strip, so that it shows large at a notebook's width.  An edge crossing from one band into the
next runs down past the band's bottom, up a lane in the gutter between
bands, and into the next band from above.

Boxes never overlap by construction: layers within a band are disjoint rows,
boxes in a row are kept apart by ``NODE_GAP``, and bands are disjoint columns.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Hashable, Mapping

import networkx as nx

Box = tuple[float, float, float, float]  # x, y (top-left), width, height
Point = tuple[float, float]

NODE_GAP = 16.0       # between boxes in a row
LAYER_GAP = 34.0      # between rows
BAND_GAP = 44.0       # between bands (the gutter that carries edges across)
LANE = 6.0            # between parallel edges in a gutter
DUMMY_W = 8.0
ORDER_SWEEPS = 8
PLACE_SWEEPS = 8
MAX_ASPECT = 2.8      # a drawing taller (or wider) than this many times its width is a strip


@dataclass
class Layout:
    """Placed boxes and, per edge ``(u, v)``, the polyline it follows
    (``kind`` per segment point: ``"curve"`` between layers, ``"line"`` in
    gutters)."""

    boxes: dict[Hashable, Box]
    edges: dict[tuple[Hashable, Hashable], list[tuple[Point, str]]]
    width: float
    height: float
    bands: int = 1
    layers: list[list] = field(default_factory=list)


def layers(g: nx.DiGraph) -> list[list]:
    """Longest-path layering from the sources: every edge points to a later
    layer.  Then every node that has readers moves down to just above its
    first reader (as late as possible), so inputs, seeds and side chains do
    not trail long edges across the whole drawing."""
    rank: dict = {}
    topo = list(nx.topological_sort(g))
    for v in topo:
        rank[v] = max((rank[u] + 1 for u in g.predecessors(v)), default=0)
    for v in reversed(topo):
        if g.out_degree(v):
            rank[v] = min(rank[w] for w in g.successors(v)) - 1
    out: list[list] = [[] for _ in range(max(rank.values(), default=-1) + 1)]
    for v in g.nodes:  # insertion order: a stable starting order within each layer
        out[rank[v]].append(v)
    return out


class _Dummy(tuple):
    """``(source, row)``: a point long edges from ``source`` pass through on
    layer ``row``.  Edges from one source share them (drawn as one line until
    they part), which keeps the many reads of one forward value by the
    backward pass from filling the drawing with parallel lines.  A tuple
    subclass: hashed in C, the layout's hottest operation."""

    __slots__ = ()

    @property
    def row(self) -> int:
        return self[1]


def _chain(u: Hashable, v: Hashable, rank: Mapping) -> list:
    return [u] + [_Dummy((u, r)) for r in range(rank[u] + 1, rank[v])] + [v]


def _with_dummies(g: nx.DiGraph, rows: list[list]) -> tuple[nx.DiGraph, list[list]]:
    rank = {v: r for r, row in enumerate(rows) for v in row}
    h = nx.DiGraph()
    h.add_nodes_from(g.nodes)
    rows = [list(row) for row in rows]
    for u, v in g.edges:
        chain = _chain(u, v, rank)
        for d in chain[1:-1]:
            if d not in h:
                rows[d.row].append(d)
        nx.add_path(h, chain)
    return h, rows


def crossings(g: nx.DiGraph, rows: list[list]) -> int:
    """Edge crossings between adjacent rows (edges between adjacent rows only)."""
    index = {v: (r, k) for r, row in enumerate(rows) for k, v in enumerate(row)}
    total = 0
    for r in range(len(rows) - 1):
        edges = sorted((index[u][1], index[v][1]) for u in rows[r] for v in g.successors(u)
                       if index[v][0] == r + 1)
        total += _inversions(edges, len(rows[r + 1]))
    return total


def _inversions(edges: list[tuple[int, int]], width: int) -> int:
    """Pairs ``a < b`` (sorted) with ``a[0] < b[0]`` and ``a[1] > b[1]``, in
    O(E log E) with a Fenwick tree over the lower row (rows of a few hundred
    edges made the pairwise count the layout's bottleneck)."""
    tree = [0] * (width + 1)
    seen, total, k = 0, 0, 0
    while k < len(edges):
        end = k
        while end < len(edges) and edges[end][0] == edges[k][0]:
            end += 1
        group = edges[k:end]   # same upper end: no crossings among them
        for _, low in group:
            i, below = low + 1, 0     # edges seen so far ending at or left of ``low``
            while i > 0:
                below += tree[i]
                i -= i & -i
            total += seen - below
        for _, low in group:
            i = low + 1
            while i <= width:
                tree[i] += 1
                i += i & -i
        seen += len(group)
        k += len(group)
    return total


def _barycenter_sweep(g: nx.DiGraph, rows: list[list], downward: bool) -> None:
    """Reorder each row by the mean position of its neighbours in the row
    already placed (predecessors going down, successors going up)."""
    position = {v: k / max(len(row), 1) for row in rows for k, v in enumerate(row)}
    sequence = range(1, len(rows)) if downward else range(len(rows) - 2, -1, -1)
    for r in sequence:
        row = rows[r]

        def key(item):
            k, v = item
            nbrs = list(g.predecessors(v) if downward else g.successors(v))
            return (sum(position[u] for u in nbrs) / len(nbrs)) if nbrs else position[v], k

        row[:] = [v for _, v in sorted(enumerate(row), key=key)]
        position.update({v: k / len(row) for k, v in enumerate(row)})


def order(g: nx.DiGraph, rows: list[list]) -> list[list]:
    """Rows reordered to keep crossings low (the best of a few sweeps)."""
    rows = [list(r) for r in rows]
    best, best_count = [list(r) for r in rows], crossings(g, rows)
    for sweep in range(ORDER_SWEEPS):
        _barycenter_sweep(g, rows, downward=sweep % 2 == 0)
        count = crossings(g, rows)
        if count < best_count:
            best, best_count = [list(r) for r in rows], count
    return best


def _pack(wanted: list[float], widths: list[float], weights: list[float]) -> list[float]:
    """Centres in the given left-to-right order, ``NODE_GAP`` between boxes,
    closest to ``wanted`` in weighted least squares: with ``o`` the least
    offsets, ``x - o`` must not decrease, which is weighted isotonic
    regression, solved exactly by pooling adjacent violators.  Heavy boxes
    (the graph's own nodes) stay put; light ones (edge points, leaves) move
    aside."""
    offset = [0.0]
    for k in range(len(wanted) - 1):
        offset.append(offset[-1] + (widths[k] + widths[k + 1]) / 2 + NODE_GAP)
    blocks: list[list[float]] = []   # [weighted sum, weight, count]
    for want, o, w in zip(wanted, offset, weights):
        blocks.append([(want - o) * w, w, 1])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            total, weight, count = blocks.pop()
            blocks[-1][0] += total
            blocks[-1][1] += weight
            blocks[-1][2] += count
    out = []
    for total, weight, count in blocks:
        out += [total / weight] * count
    return [y + o for y, o in zip(out, offset)]


def _x_centres(h: nx.DiGraph, rows: list[list], width: Mapping) -> dict:
    """Centres of ``rows`` (one band; neighbours outside it are ignored)."""
    x: dict = {}
    weight = {v: 1.0 if isinstance(v, _Dummy) or h.degree(v) <= 1 else 4.0 for row in rows for v in row}
    for row in rows:
        _place_row(row, [0.0] * len(row), width, x, weight)
    preds = {v: _pulling(h, v, h.predecessors(v), x, h.in_degree) for row in rows for v in row}
    succs = {v: _pulling(h, v, h.successors(v), x, h.out_degree) for row in rows for v in row}
    for sweep in range(PLACE_SWEEPS):
        down = sweep % 2 == 0
        nbrs = preds if down else succs
        for row in (rows if down else rows[::-1]):
            wanted = [sum(x[u] for u in nbrs[v]) / len(nbrs[v]) if nbrs[v] else x[v] for v in row]
            _place_row(row, wanted, width, x, weight)
    return x


def _pulling(h: nx.DiGraph, v, nbrs, x: Mapping, degree) -> list:
    """The neighbours ``v`` is centred under: those in the band, less the
    leaves among them (an argument read by a chain would otherwise pull the
    chain sideways at every step, a staircase) unless only leaves are left."""
    nbrs = [u for u in nbrs if u in x]
    inner = [u for u in nbrs if degree(u)]
    return inner or nbrs


def _place_row(row: list, wanted: list[float], width: Mapping, x: dict, weight: Mapping) -> None:
    for v, c in zip(row, _pack(wanted, [width[v] for v in row], [weight[v] for v in row])):
        x[v] = c


def _cuts(rows: list[list], h: nx.DiGraph, heights: list[float], bands: int) -> list[int]:
    """Row indices where bands start (after 0): near equal heights, at a row
    boundary few edges cross (within a fifth of a band of the ideal place)."""
    crossing = [sum(1 for u in rows[r] for _ in h.successors(u)) for r in range(len(rows))]
    top = [0.0]
    for hh in heights:
        top.append(top[-1] + hh + LAYER_GAP)
    total = top[-1]
    cuts, start = [], 1
    for b in range(1, bands):
        ideal = total * b / bands
        slack = total / bands / 5
        candidates = [r for r in range(start, len(rows)) if abs(top[r] - ideal) <= slack] or \
            [min(range(start, len(rows)), key=lambda r: abs(top[r] - ideal))]
        best = min(candidates, key=lambda r: (crossing[r - 1], abs(top[r] - ideal)))
        cuts.append(best)
        start = best + 1
        if start >= len(rows):
            break
    return cuts


def layout(g: nx.DiGraph, sizes: Mapping[Hashable, tuple[float, float]], margin: float = 10.0,
           top: float = 0.0) -> Layout:
    """Place ``g``'s nodes (boxes of ``sizes``) top to bottom in bands; see the module docstring.

    The band count is the smallest that makes the drawing no more than
    ``MAX_ASPECT`` times taller than wide: the narrowest drawing that is not
    a strip, so that fitted to a notebook's width its text is as large as it
    can be (the view scrolls and pans down a tall drawing).  Where that one
    is a strip the other way (a few very wide rows), whichever of it and one
    band less is nearer to square."""
    if g.number_of_nodes() == 0:
        return Layout({}, {}, 2 * margin, 2 * margin + top)
    rows0 = layers(g)
    h, rows = _with_dummies(g, rows0)
    rows = order(h, rows)
    width = {v: (DUMMY_W if isinstance(v, _Dummy) else sizes[v][0]) for v in h.nodes}
    heights = [max((sizes[v][1] for v in row if not isinstance(v, _Dummy)), default=0.0) for row in rows]
    def fits(placed: Layout) -> bool:
        return placed.width * MAX_ASPECT >= placed.height

    one = _banded(g, h, rows, width, heights, sizes, 1, margin, top)
    # b bands are about b times as wide and 1/b as tall: start the search just below that estimate
    start = max(1, int(math.sqrt(one.height / (MAX_ASPECT * one.width))) - 1)
    while start > 1 and fits(_banded(g, h, rows, width, heights, sizes, start, margin, top)):
        start -= 1
    previous = None
    for bands in range(start, len(rows) + 1):
        placed = one if bands == 1 else _banded(g, h, rows, width, heights, sizes, bands, margin, top)
        if fits(placed) or placed.bands < bands:
            if previous and placed.width / placed.height * (previous.width / previous.height) > 1:
                placed = previous   # one band less is nearer to square
            break
        previous = placed
    placed.layers = rows0
    return placed


def _banded(g: nx.DiGraph, h: nx.DiGraph, rows: list[list], width: Mapping,
            heights: list[float], sizes: Mapping, bands: int, margin: float, top: float) -> Layout:
    cuts = _cuts(rows, h, heights, bands)
    starts = [0] + cuts
    band_of_row = []
    x: dict = {}
    for b, s in enumerate(starts):
        end = starts[b + 1] if b + 1 < len(starts) else len(rows)
        band_of_row += [b] * (end - s)
        band_rows = rows[s:end]   # each band placed on its own: no drift from the others
        x.update(_x_centres(h, band_rows, width))
    nb = len(starts)
    # lanes: one per edge crossing each band boundary
    crossing_edges: dict[int, list] = {b: [] for b in range(nb)}
    for r in range(len(rows) - 1):
        if band_of_row[r] != band_of_row[r + 1]:
            crossing_edges[band_of_row[r]] += sorted(((u, v) for u in rows[r] for v in h.successors(u)),
                                                     key=lambda e: x[e[0]])
    lanes = max((len(es) for es in crossing_edges.values()), default=0)
    pad = lanes * LANE + (LAYER_GAP / 2 if lanes else 0)  # above and below every band for crossing edges
    y_top, y = {}, 0.0
    for r, hh in enumerate(heights):
        if r == 0 or band_of_row[r] != band_of_row[r - 1]:
            y = margin + top + pad
        y_top[r] = y
        y += hh + LAYER_GAP
    lo = {b: min(x[v] - width[v] / 2 for r, row in enumerate(rows) if band_of_row[r] == b for v in row)
          for b in range(nb)}
    hi = {b: max(x[v] + width[v] / 2 for r, row in enumerate(rows) if band_of_row[r] == b for v in row)
          for b in range(nb)}
    left, shift = margin, {}
    for b in range(nb):
        shift[b] = left - lo[b]
        left += hi[b] - lo[b] + BAND_GAP + len(crossing_edges[b]) * LANE
    rank = {v: r for r, row in enumerate(rows) for v in row}

    def cx(v):
        return x[v] + shift[band_of_row[rank[v]]]

    boxes = {}
    for v in g.nodes:
        w, hh = sizes[v]
        r = rank[v]
        boxes[v] = (cx(v) - w / 2, y_top[r] + (heights[r] - hh) / 2, w, hh)
    bottom = {b: max(y_top[r] + heights[r] for r in range(len(rows)) if band_of_row[r] == b) for b in range(nb)}
    ports_out, ports_in = _ports(g, boxes, cx)
    edges = {}
    for u, v in g.edges:
        chain = _chain(u, v, rank)
        pts: list[tuple[Point, str]] = [((ports_out[(u, v)], boxes[u][1] + boxes[u][3]), "start")]
        for a, b in zip(chain, chain[1:]):
            ra, rb = rank[a], rank[b]
            if band_of_row[ra] != band_of_row[rb]:
                band = band_of_row[ra]
                lane = crossing_edges[band].index((a, b))
                below = bottom[band] + LAYER_GAP / 2 + lane * LANE
                gutter = shift[band] + hi[band] + BAND_GAP / 2 + lane * LANE
                above = margin + top + pad - LAYER_GAP / 2 - lane * LANE
                xa = pts[-1][0][0]
                pts += [((xa, below), "line"), ((gutter, below), "line"), ((gutter, above), "line")]
                xb = ports_in[(u, v)] if b == v else cx(b)
                pts.append(((xb, above), "line"))
            if isinstance(b, _Dummy):
                pts.append(((cx(b), y_top[rb]), "curve"))
                pts.append(((cx(b), y_top[rb] + heights[rb]), "line"))
            else:
                pts.append(((ports_in[(u, v)], boxes[v][1]), "curve"))
        edges[(u, v)] = pts
    total_w = left - BAND_GAP - len(crossing_edges[nb - 1]) * LANE + margin
    total_h = max(bottom.values()) + pad + margin
    return Layout(boxes, edges, total_w, total_h, nb)


def _ports(g: nx.DiGraph, boxes: Mapping, cx) -> tuple[dict, dict]:
    """Where each edge leaves its source's bottom and enters its target's top:
    spread along the box in the order of the other ends, so arrows do not pile
    onto one point."""
    out, inn = {}, {}
    for v in g.nodes:
        x0, _, w, _ = boxes[v]
        for ports, nbrs, key in ((out, sorted(g.successors(v), key=cx), lambda n: (v, n)),
                                 (inn, sorted(g.predecessors(v), key=cx), lambda n: (n, v))):
            k = len(nbrs)
            for i, n in enumerate(nbrs):
                ports[key(n)] = x0 + w * (i + 1) / (k + 1)
    return out, inn
