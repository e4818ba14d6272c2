"""Cholesky ``a = L L^T`` (``linalg.cholesky``) as one workgroup per matrix.

Right-looking, column by column, reading ``a``'s lower triangle as LAPACK's
``potrf`` does: step ``k`` takes the square root of the pivot, scales the
column below it (threads over rows), then subtracts the column's outer product
from the trailing lower triangle (``Form.grid``).  A pivot that
is not positive (or NaN) stops the matrix with ``info = k + 1``: the launch
raises numpy's ``LinAlgError`` as the host step would.
"""
from __future__ import annotations

import math

from ...targets import Target
from ..registry import Kernel
from .workgroup import Matrix, entry_point, form, kernel, literal, place, scalar


def build(target: Target, batch: tuple[int, ...], n: int, dtype: str) -> Kernel:
    f = form(target)
    groups = math.prod(batch)
    (shared,) = place(f, dtype, [n * n])
    s = Matrix("S", n, n, shared, "l", f"g * {n * n}")
    bar = f.barrier(shared)
    zero = literal(0.0, dtype)
    update = f"{s.at('i', 'j')} = {s.at('i', 'j')} - {s.at('i', 'k')} * {s.at('j', 'k')};"
    store = f"""    {f.spread("e", "0", str(n * n))}
        l[g * {n * n} + e] = {s.flat("e")};
""" if shared else ""
    body = f"""
    {f.spread("e", "0", str(n * n))}
        {s.flat("e")} = (e % {n}) <= (e / {n}) ? a[g * {n * n} + e] : {zero};
    {bar}
    int info_ = 0;
    [loop] for (int k = 0; k < {n}; k++)
    {{
        {scalar(dtype)} d = {s.at("k", "k")};
        if (!(d > {zero})) {{ info_ = k + 1; break; }}
        {scalar(dtype)} r = sqrt(d);
        {f.spread("i", "k + 1", str(n))}
            {s.at("i", "k")} = {s.at("i", "k")} / r;
        {bar}
        if (t == 0) {s.at("k", "k")} = r;
        {f.grid(("k + 1", str(n)), ("k + 1", str(n)), update, lower=True)}
        {bar}
    }}
    {bar}
    if (t == 0) info[g] = info_;
{store}"""
    ty = scalar(dtype)
    source = entry_point("cholesky", f, [("a", ty), ("l", ty), ("info", "int")], body, groups,
                         [s.declaration(dtype)])
    return kernel(source, "cholesky", groups, f, {"a": "in0", "l": "out0"},
                  failure="Matrix is not positive definite")
