"""Arrays whose elements are functions of their own indices: np.vander (a
power chosen by the column) and np.indices (the index itself)."""
from __future__ import annotations

import numpy as np
import sympy

from .context import Trace
from .dispatch import implements
from .elementwise import apply, as_arith, dtype_name
from .emit import domain_symbols, new_array, write
from .errors import ShapeMismatchError, UnsupportedOperationError
from .indexing import reshape
from .traced_array import TracedArray


@implements(np.vander)
def vander(x, N=None, increasing=False):
    """``out[i, j] = x[i] ** p(j)``, one tasklet: ``p(j)`` is a select over the
    (static) column count, so every power is an integer power (a power with a
    symbolic exponent would be ``pow`` of a negative base on the GPU, undefined)."""
    op = "numpy.vander"
    if not isinstance(x, TracedArray) or x.ndim != 1:
        raise ShapeMismatchError(op, "needs a 1-d traced array")
    n = x.sym_shape[0] if N is None else sympy.Integer(N)
    if not n.is_Integer:
        raise UnsupportedOperationError(op, f"N must be a Python int (the number of columns), not {n}")
    n = int(n)
    columns = new_array(x.trace, (n,), "int32", "vander_column")
    (j,) = domain_symbols(1)
    write(op, columns, (j,), ((j, 0, n),), j, {})
    rows = reshape(x, (-1, 1))

    def power(value, column):
        pieces = [(value ** (k if increasing else n - 1 - k), sympy.Eq(column, k)) for k in range(n - 1)]
        return sympy.Piecewise(*pieces, (value ** ((n - 1) if increasing else 0), True))
    return apply(op, power, [rows, reshape(columns, (1, n))], x.dtype_name, [as_arith, lambda e, _: e])


def indices(trace: Trace, dimensions, dtype=int, sparse=False):
    """numpy's np.indices: ``out[k, i0, i1, ...] = ik``, one write per axis."""
    op = "numpy.indices"
    dims = tuple(int(d) for d in dimensions)
    name = dtype_name(dtype)
    if sparse:
        parts = []
        for k, d in enumerate(dims):
            part = new_array(trace, (d,), name, "indices")
            (i,) = domain_symbols(1)
            write(op, part, (i,), ((i, 0, d),), i, {})
            parts.append(reshape(part, tuple(d if a == k else 1 for a in range(len(dims)))))
        return tuple(parts)
    out = new_array(trace, (len(dims),) + dims, name, "indices")
    syms = domain_symbols(len(dims))
    domain = tuple((s, 0, d) for s, d in zip(syms, dims))
    for k, s in enumerate(syms):
        write(op, out, (k,) + syms, domain, s, {}, disjoint=True)
    return out
