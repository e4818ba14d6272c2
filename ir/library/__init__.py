"""Library nodes: named whole-array operations (``np.linalg``) in the IR.

``node`` (the ``LibraryNode`` and graph helpers), ``registry`` (``LibraryOp``:
shape rule, numpy implementation, derivative rules, by name), ``emit``
(calling an op while tracing), ``run`` (running a node on numpy arrays),
``linalg`` (``np.linalg`` and ``sd.linalg`` on top).  How to add one: write a
module that builds a ``LibraryOp`` and ``register``s it (``linalg/solve.py``
is a short example); users do the same through ``sd.library_node``.
"""
from .node import LibraryNode, add_library_node, has_library_nodes, is_library, library_nodes, ordered_edges
from .registry import LibraryOp, lookup, register, registered, unregister
from .run import run_node


def call(name: str, *args, **params):
    """``emit.call``, imported on first use: this package is imported by
    ``ir.validate`` and the interpreter, below the tracer ``emit`` needs."""
    from .emit import call as _call
    return _call(name, *args, **params)

__all__ = ["LibraryNode", "LibraryOp", "add_library_node", "call", "has_library_nodes", "is_library",
           "library_nodes", "lookup", "ordered_edges", "register", "registered", "run_node", "unregister"]
