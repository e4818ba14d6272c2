"""matmul / @ / dot: the domain ``(batch..., i, j, k)`` writing ``c[batch..., i, j]``
with ``"sum"`` (``contraction.contract``); 1-d operands follow numpy (a vector
is a row on the left and a column on the right, and its axis disappears from
the result); batch axes broadcast."""
from __future__ import annotations

import numpy as np

from .dispatch import implements
from .elementwise import is_traced, result_dtype
from .contraction import contract
from .emit import domain_symbols, same, shape_str
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
    batch = [f"b{n}" for n in range(max(a.ndim, b.ndim) - 2)]
    rows = ["i"] if a.ndim > 1 else []
    cols = ["j"] if b.ndim > 1 else []
    a_letters = batch[len(batch) - (a.ndim - 2):] if a.ndim > 2 else []
    b_letters = batch[len(batch) - (b.ndim - 2):] if b.ndim > 2 else []
    names = dict(zip(batch, domain_symbols(len(batch), "b")))
    names.update(zip("ijk", domain_symbols(3)))
    return contract(op, (a, a_letters + rows + ["k"]), (b, b_letters + ["k"] + cols), batch + rows + cols, names)


@implements(np.matmul)
def matmul(a, b, **kwargs):
    if kwargs:
        raise UnsupportedOperationError("numpy.matmul", f"arguments {sorted(kwargs)} are not supported")
    return _matmul("matmul", a, b)


@implements(np.dot)
def dot(a, b, out=None):
    """numpy's dot: scalars multiply; up to 2-d (or N-d with a vector) it is matmul, N-d with N-d a
    tensordot of a's last axis with b's second-to-last."""
    if out is not None:
        raise UnsupportedOperationError("numpy.dot", "out= is not supported")
    if np.ndim(a) == 0 or np.ndim(b) == 0:
        return np.multiply(a, b)
    if not (is_traced(a) and is_traced(b)):
        raise UnsupportedOperationError("numpy.dot", "needs traced arrays or numbers (not values inside an sd.map "
                                        "body)")
    if b.ndim > 2 and a.ndim > 1:
        from .einsum import dot_nd
        return dot_nd(a, b)
    return _matmul("dot", a, b)


@implements(np.outer)
def outer(a, b, out=None):
    return np.multiply(np.reshape(a, (-1, 1)), np.reshape(b, (1, -1)))  # equal ranks: strict broadcasting


# np.linalg's decompositions and solves are library nodes (ir.library.linalg); importing it registers
# their handlers.  Last: it imports this package's modules.
from ..library import linalg as _library_linalg  # noqa: E402,F401
