"""A small layered (Sugiyama-style) layout, left to right by dataflow.

Pure Python so that graphs render right after ``pip install``; ``render``
prefers graphviz's ``dot`` when it is on PATH.  The layout only needs box
sizes and the edge structure, so it is kept apart from what the boxes say.

Boxes never overlap by construction: layers are disjoint columns, and within a
column boxes are stacked with a minimum gap.
"""
from __future__ import annotations

from typing import Mapping

import networkx as nx

Box = tuple[float, float, float, float]  # x, y (top-left), width, height

NODE_GAP = 18.0
ORDER_SWEEPS = 8


def layers(g: nx.DiGraph) -> list[list]:
    """Longest-path layering from the sources: every edge points to a later
    layer, and a node sits as far left as its inputs allow.  Sources (inputs,
    seeds) then move right to just before their first reader, so they do not
    trail long edges across the whole drawing."""
    rank: dict = {}
    for v in nx.topological_sort(g):
        rank[v] = max((rank[u] + 1 for u in g.predecessors(v)), default=0)
    for v in g.nodes:
        if g.in_degree(v) == 0 and g.out_degree(v):
            rank[v] = min(rank[w] for w in g.successors(v)) - 1
    out: list[list] = [[] for _ in range(max(rank.values(), default=-1) + 1)]
    for v in g.nodes:  # insertion order: a stable starting order within each layer
        out[rank[v]].append(v)
    return out


def _barycenter_sweep(g: nx.DiGraph, columns: list[list], downward: bool) -> None:
    """Reorder each column by the mean position of its neighbours on the side
    already placed (predecessors going right, successors going left)."""
    position = {v: k / max(len(col), 1) for col in columns for k, v in enumerate(col)}
    sequence = range(1, len(columns)) if downward else range(len(columns) - 2, -1, -1)
    for c in sequence:
        col = columns[c]

        def key(item):
            k, v = item
            nbrs = list(g.predecessors(v) if downward else g.successors(v))
            return (sum(position[u] for u in nbrs) / len(nbrs)) if nbrs else position[v], k

        col[:] = [v for _, v in sorted(enumerate(col), key=key)]
        position.update({v: k / len(col) for k, v in enumerate(col)})


def crossings(g: nx.DiGraph, columns: list[list]) -> int:
    """Edge crossings between adjacent columns (long edges counted where they start)."""
    index = {v: (c, k) for c, col in enumerate(columns) for k, v in enumerate(col)}
    total = 0
    for c in range(len(columns) - 1):
        edges = sorted((index[u][1], index[v][1]) for u in columns[c] for v in g.successors(u)
                       if index[v][0] == c + 1)
        total += sum(1 for a in range(len(edges)) for b in range(a + 1, len(edges))
                     if edges[a][0] < edges[b][0] and edges[a][1] > edges[b][1])
    return total


def order(g: nx.DiGraph) -> list[list]:
    """Columns with an order that keeps crossings low (best of a few sweeps)."""
    columns = layers(g)
    best, best_count = [list(c) for c in columns], crossings(g, columns)
    for sweep in range(ORDER_SWEEPS):
        _barycenter_sweep(g, columns, downward=sweep % 2 == 0)
        count = crossings(g, columns)
        if count < best_count:
            best, best_count = [list(c) for c in columns], count
    return best


def place(g: nx.DiGraph, columns: list[list], sizes: Mapping[object, tuple[float, float]],
          gaps: list[float], margin: float = 10.0) -> dict[object, Box]:
    """Top-left boxes for ``columns`` (from ``order``) with ``gaps[c]`` between
    columns c and c+1: each node pulled towards the mean height of its
    predecessors, then pushed down just enough to clear the node above it."""
    boxes: dict[object, Box] = {}
    x = margin
    for c, col in enumerate(columns):
        width = max(sizes[v][0] for v in col)
        bottom = margin - NODE_GAP
        for v in col:
            w, h = sizes[v]
            preds = [boxes[u] for u in g.predecessors(v)]
            wanted = (sum(b[1] + b[3] / 2 for b in preds) / len(preds) - h / 2) if preds else margin
            y = max(wanted, bottom + NODE_GAP)
            boxes[v] = (x + (width - w) / 2, y, w, h)
            bottom = y + h
        if c < len(gaps):
            x += width + gaps[c]
    return boxes
