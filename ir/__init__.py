"""The dataflow IR: data model, validation, tracer, numpy interpreter, text form.

``ir`` knows nothing of differentiation or Slang; a ``DataflowGraph`` is the
only thing that crosses into the other packages.
"""
from .graph import (ACCUMULATIONS, DTYPES, FLOAT_DTYPES, AccessNode, Container, DataflowGraph,
                    GraphError, Memlet, Tasklet, connector_symbol, index_symbol, size_symbol)
from .bounds import IndexOutOfRange, check_index_arguments
from .graph_notes import GraphNotes
from .interpreter import run
from .sizes import bind_sizes
from .tracer import TraceError, map, trace  # noqa: A004 (sd.map)

__all__ = ["ACCUMULATIONS", "DTYPES", "FLOAT_DTYPES", "AccessNode", "Container", "DataflowGraph",
           "GraphError", "GraphNotes", "Memlet", "Tasklet", "connector_symbol", "index_symbol", "size_symbol",
           "run", "bind_sizes", "IndexOutOfRange", "check_index_arguments", "trace", "map", "TraceError"]
