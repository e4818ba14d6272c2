"""Triangular solve ``x = a^-1 b`` (``linalg.solve_triangular``) as one
workgroup per right-hand-side matrix.

Only ``a``'s lower (``lower``) or upper triangle is read, as LAPACK's
``trtrs``.  Substitution row by row (forward for lower, backward for upper):
step ``s`` divides pivot row ``j`` of ``x`` by ``a[j, j]`` (threads over the
right-hand sides), then subtracts it from the rows still to come
(``Form.grid``).  The rules ask for transposed and unit-diagonal solves
by transposing or rebuilding ``a`` before the node (``ir.library.linalg.api``),
so the node, and this kernel, only ever see ``lower``.  A zero on the
diagonal stops the matrix with ``info = j + 1`` (numpy's ``LinAlgError``).
"""
from __future__ import annotations

import math

from ...targets import Target
from ..registry import Kernel
from .workgroup import Form, Matrix, batch_offset, entry_point, form, kernel, literal, place, scalar


def substitution(f: Form, a: Matrix, x: Matrix, n: int, k: int, lower: bool, dtype: str, bar: str,
                 unit: bool = False) -> str:
    """Slang overwriting ``x`` (n x k) with ``a^-1 x`` for ``a``'s lower or upper
    triangle (``unit``: its diagonal taken as ones, nothing checked); sets
    ``info_`` on a zero pivot.  Shared with ``lu``'s two substitutions."""
    p = "s" if lower else f"{n - 1} - s"
    rows = ("s + 1", str(n)) if lower else ("0", f"{n - 1} - s")
    divide = "" if unit else f"""
        {scalar(dtype)} d = {a.at("p", "p")};
        if (d == {literal(0.0, dtype)}) {{ info_ = p + 1; break; }}
        {f.spread("c", "0", str(k))}
            {x.at("p", "c")} = {x.at("p", "c")} / d;
        {bar}"""
    return f"""
    [loop] for (int s = 0; s < {n}; s++)
    {{
        int p = {p};{divide}
        {f.grid(rows, ("0", str(k)), f"{x.at('i', 'j')} = {x.at('i', 'j')} - {a.at('i', 'p')} * {x.at('p', 'j')};")}
        {bar}
    }}"""


def build(target: Target, a_batch: tuple[int, ...], b_batch: tuple[int, ...], out_batch: tuple[int, ...],
          n: int, k: int, dtype: str, lower: bool) -> Kernel:
    f = form(target)
    groups = math.prod(out_batch)
    shared_a, shared_x = place(f, dtype, [n * n, n * k])
    a = Matrix("SA", n, n, shared_a, "a", "base_a")
    x = Matrix("SX", n, k, shared_x, "x", f"g * {n * k}")
    bar = f.barrier(shared_a)
    load_a = f"""    {f.spread("e", "0", str(n * n))}
        {a.flat("e")} = a[base_a + e];
""" if shared_a else ""
    store = f"""    {f.spread("e", "0", str(n * k))}
        x[g * {n * k} + e] = {x.flat("e")};
""" if shared_x else ""
    body = f"""
    int base_a = {batch_offset(out_batch, a_batch, n * n)}, base_b = {batch_offset(out_batch, b_batch, n * k)};
{load_a}    {f.spread("e", "0", str(n * k))}
        {x.flat("e")} = b[base_b + e];
    {bar}
    int info_ = 0;{substitution(f, a, x, n, k, lower, dtype, bar)}
    if (t == 0) info[g] = info_;
{store}"""
    ty = scalar(dtype)
    source = entry_point("solve_triangular", f, [("a", ty), ("b", ty), ("x", ty), ("info", "int")], body,
                         groups, [a.declaration(dtype), x.declaration(dtype)])
    return kernel(source, "solve_triangular", groups, f, {"a": "in0", "b": "in1", "x": "out0"},
                  failure="Singular matrix")
