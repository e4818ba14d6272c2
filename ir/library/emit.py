"""Calling a library operation: a ``LibraryNode`` in the graph being traced,
or the numpy implementation when no trace is running (so a function written
with ``sd.linalg`` / a user's ``sd.library_node`` runs on plain arrays too)."""
from __future__ import annotations

import os

import numpy as np

from ..graph import FLOAT_DTYPES
from ..tracer import context
from ..tracer.elementwise import constant_operand
from ..tracer.errors import UnsupportedOperationError, user_location
from ..tracer.traced_array import TracedArray
from .node import add_library_node
from .registry import lookup

_HERE = os.path.dirname(__file__)


def _operand(trace: context.Trace, op: str, x, dtype: str) -> TracedArray:
    """``x`` as a whole container of ``dtype``: a view or another dtype is
    copied (a library node reads whole containers), a numpy array becomes a
    traced constant."""
    if not isinstance(x, TracedArray):
        if np.ndim(x) == 0:
            raise UnsupportedOperationError(op, f"takes arrays; got the scalar {x!r}")
        x = constant_operand(trace, np.asarray(x, dtype=dtype))
    if x.dtype_name != dtype:
        return x.astype(dtype)
    return x if x.is_whole_container() else np.copy(x)


def call(name: str, *args, **params):
    """Apply the registered library operation ``name`` to ``args`` with the
    static keywords ``params``; returns one array, or a tuple when the op has
    several results.  In a trace this adds one ``LibraryNode``."""
    op = lookup(name)
    trace = context.active()
    if trace is None or not any(isinstance(a, TracedArray) for a in args):
        outs = op.numpy(*(np.asarray(a) for a in args), **params)
        return outs[0] if len(outs) == 1 else tuple(outs)
    floats = [a.dtype_name for a in args if isinstance(a, TracedArray) and a.dtype_name in FLOAT_DTYPES]
    dtype = "float64" if "float64" in floats else (floats[0] if floats else trace.float_dtype)
    if op.integers and not floats and all(a.dtype_name == "int32" for a in args if isinstance(a, TracedArray)):
        dtype = "int32"
    operands = [_operand(trace, name, a, dtype) for a in args]
    where = user_location(skip=(_HERE,))
    specs = op.shapes([(a.sym_shape, a.dtype_name) for a in operands], dict(params))  # errors name the line
    g = trace.graph
    outs = []
    for k, (shape, out_dtype) in enumerate(specs):
        c = g.add_container(g.unique_name(f"{name.split('.')[-1]}_out{k}" if len(specs) > 1 else
                                          name.split('.')[-1]), shape, out_dtype)
        outs.append(TracedArray(trace, c.name, c.shape, out_dtype))
    add_library_node(g, name.split(".")[-1], name, [g.access(a.container) for a in operands],
                     [g.new_version(o.container) for o in outs], params, where)
    return outs[0] if len(outs) == 1 else tuple(outs)
