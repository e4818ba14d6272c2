"""Running one library node on numpy arrays: the interpreter's step for it,
and the host step between compiled pieces on the Slang devices."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from ..graph import DTYPES, DataflowGraph, GraphError
from .node import LibraryNode, ordered_edges
from .registry import lookup


def evaluate(node: LibraryNode, arrays: list[np.ndarray], dtypes: list[type]) -> list[np.ndarray]:
    """The op's numpy implementation on ``arrays``, each result cast to its
    dtype; numpy's own errors (``LinAlgError`` for a singular matrix) pass
    through to the caller, as the op's documentation says."""
    outs = lookup(node.op).numpy(*arrays, **node.params)
    if len(outs) != len(node.outputs):
        raise GraphError(f"library node {node.name!r}: {node.op} returned {len(outs)} arrays for "
                         f"{len(node.outputs)} outputs")
    return [np.array(o, dtype=d, order="C") for o, d in zip(outs, dtypes)]  # ascontiguousarray makes 0-d 1-d


def run_node(graph: DataflowGraph, node: LibraryNode, values: dict[str, np.ndarray],
             dtype_of: Mapping[str, type] | None = None) -> None:
    """Read the node's inputs from ``values`` (by access id) and store its
    outputs there; ``dtype_of``: access id -> numpy dtype of an output (the
    interpreter's float64 mode), default the container's."""
    reads, writes = ordered_edges(graph, node)
    dtypes = [(dtype_of or {}).get(a) or DTYPES[graph.containers[graph.node(a).container].dtype] for a in writes]
    for access, value in zip(writes, evaluate(node, [values[a] for a in reads], dtypes)):
        values[access] = value
