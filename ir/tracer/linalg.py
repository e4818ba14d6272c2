"""matmul / @ / dot: the domain ``(batch..., i, j, k)`` writing ``c[batch..., i, j]``
with ``"sum"``; 1-d operands follow numpy (a vector is a row on the left and a
column on the right, and its axis disappears from the result)."""
from __future__ import annotations

import numpy as np

from .dispatch import implements
from .elementwise import is_traced, result_dtype
from .emit import (as_arith, broadcast_index, broadcast_shapes, domain_symbols, new_array, read, same,
                   shape_str, write)
from .errors import ShapeMismatchError, UnsupportedOperationError
from .traced_array import TracedArray


def _matmul(op: str, a: TracedArray, b: TracedArray) -> TracedArray:
    if not (isinstance(a, TracedArray) and isinstance(b, TracedArray)) or a.ndim == 0 or b.ndim == 0:
        raise UnsupportedOperationError(op, "needs two traced arrays with at least one dimension "
                                        "(use * for scalars)")
    ka = a.sym_shape[-1]
    kb = b.sym_shape[0] if b.ndim == 1 else b.sym_shape[-2]
    if not same(ka, kb):
        raise ShapeMismatchError(op, f"shapes {shape_str(a.sym_shape)} and {shape_str(b.sym_shape)}: "
                                 f"contracted dimensions {ka} and {kb} differ")
    batch_a = a.sym_shape[:-2]
    batch_b = b.sym_shape[:-2]
    batch = broadcast_shapes(op, batch_a, batch_b)
    rows = a.sym_shape[-2:-1]
    cols = b.sym_shape[-1:] if b.ndim > 1 else ()
    bsyms = domain_symbols(len(batch), "b")
    i, j, k = domain_symbols(3)
    out_shape = batch + rows + cols
    out_index = bsyms + ((i,) if rows else ()) + ((j,) if cols else ())
    domain = tuple((s, 0, d) for s, d in zip(bsyms, batch))
    domain += ((i, 0, rows[0]),) if rows else ()
    domain += ((j, 0, cols[0]),) if cols else ()
    domain += ((k, 0, ka),)
    dtype = result_dtype(a.trace, [a, b], "arith")
    out = new_array(a.trace, out_shape, dtype, op)
    reads = {}
    a_index = broadcast_index(batch_a, batch, bsyms) + ((i, k) if rows else (k,))
    b_index = broadcast_index(batch_b, batch, bsyms) + ((k, j) if cols else (k,))
    body = as_arith(read(a, a_index, "a", reads), a.dtype_name) * as_arith(read(b, b_index, "b", reads),
                                                                          b.dtype_name)
    write(op, out, out_index, domain, body, reads, "sum")
    return out


@implements(np.matmul)
def matmul(a, b, **kwargs):
    if kwargs:
        raise UnsupportedOperationError("numpy.matmul", f"arguments {sorted(kwargs)} are not supported")
    return _matmul("matmul", a, b)


@implements(np.dot)
def dot(a, b, out=None):
    """numpy's dot: scalars multiply; up to 2-d (or N-d with a vector) it is matmul."""
    if out is not None:
        raise UnsupportedOperationError("numpy.dot", "out= is not supported")
    if np.ndim(a) == 0 or np.ndim(b) == 0:
        return np.multiply(a, b)
    if not (is_traced(a) and is_traced(b)) or (b.ndim > 2 and a.ndim > 1):
        raise UnsupportedOperationError("numpy.dot", "of N-d arrays (use np.matmul); supported: scalars, vectors, "
                                        "matrices, N-d with a vector")
    return _matmul("dot", a, b)


@implements(np.outer)
def outer(a, b, out=None):
    return np.multiply(np.reshape(a, (-1, 1)), np.reshape(b, (1, -1)))  # equal ranks: strict broadcasting
