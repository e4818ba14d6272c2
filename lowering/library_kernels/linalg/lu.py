"""LU with partial pivoting as one workgroup per matrix, and what is built on
it: ``linalg.solve``, ``linalg.inv``, ``linalg.det``, ``linalg.slogdet``.

Step ``k`` of the factorisation (LAPACK's ``getf2``, unblocked: a matrix of at
most ``Tuning.linalg_max_n`` rows gains nothing from blocking inside one
workgroup): every thread finds the same pivot row ``p`` (the first largest
``|a[i, k]|``, ``i >= k``), the threads swap rows ``k`` and ``p`` (of the
right-hand sides too), scale the column below the pivot, and subtract its
outer product from the trailing matrix.  A zero pivot leaves its column
unscaled and records ``info = k + 1`` (LAPACK goes on the same way): solve
and inv then raise numpy's ``LinAlgError``, det gives 0 and slogdet
``(0, -inf)``, as numpy's.

Then solve substitutes forward through the unit lower factor and backward
through the upper one (``triangular.substitution``); inv is solve against
the identity; det multiplies the pivots, slogdet sums their logs (so it needs
``log`` of the dtype: not on a target whose float64 transcendentals are wrong,
``Target.float64_transcendentals``, where ``build`` returns None).
"""
from __future__ import annotations

import math

from ...targets import Target
from ..registry import Kernel
from .triangular import substitution
from .workgroup import Form, Matrix, batch_offset, entry_point, form, kernel, literal, place, scalar

MODES = ("solve", "inv", "det", "slogdet")


def _factor(f: Form, s: Matrix, x: Matrix | None, n: int, k: int, dtype: str, bar: str) -> str:
    ty, zero = scalar(dtype), literal(0.0, dtype)
    update = f"{s.at('i', 'j')} = {s.at('i', 'j')} - {s.at('i', 'kk')} * {s.at('kk', 'j')};"
    swap_x = f"""
            {f.spread("c", "0", str(k))}
            {{
                {ty} v = {x.at("kk", "c")};
                {x.at("kk", "c")} = {x.at("p", "c")};
                {x.at("p", "c")} = v;
            }}""" if x is not None else ""
    return f"""
    [loop] for (int kk = 0; kk < {n}; kk++)
    {{
        int p = kk;
        {ty} best = abs({s.at("kk", "kk")});
        [loop] for (int i = kk + 1; i < {n}; i++)
        {{
            {ty} v = abs({s.at("i", "kk")});
            if (v > best) {{ best = v; p = i; }}
        }}
        {bar}
        if (p != kk)
        {{
            swaps++;
            {f.spread("c", "0", str(n))}
            {{
                {ty} v = {s.at("kk", "c")};
                {s.at("kk", "c")} = {s.at("p", "c")};
                {s.at("p", "c")} = v;
            }}{swap_x}
        }}
        {bar}
        {ty} d = {s.at("kk", "kk")};
        if (d == {zero}) {{ if (info_ == 0) info_ = kk + 1; continue; }}
        {f.spread("i", "kk + 1", str(n))}
            {s.at("i", "kk")} = {s.at("i", "kk")} / d;
        {bar}
        {f.grid(("kk + 1", str(n)), ("kk + 1", str(n)), update)}
        {bar}
    }}"""


def build(target: Target, mode: str, a_batch: tuple[int, ...], n: int, dtype: str,
          b_batch: tuple[int, ...] = (), out_batch: tuple[int, ...] | None = None, k: int = 0) -> Kernel | None:
    """The kernel for ``mode`` (``MODES``); ``b_batch``, ``out_batch`` and ``k``
    (right-hand sides) for solve; None where the target cannot run it."""
    if mode == "slogdet" and dtype == "float64" and not target.float64_transcendentals:
        return None
    f = form(target)
    out_batch = a_batch if out_batch is None else out_batch
    k = n if mode == "inv" else k
    groups = math.prod(out_batch)
    sides = mode in ("solve", "inv")
    shared = place(f, dtype, [n * n] + ([n * k] if sides else []))
    s = Matrix("SA", n, n, shared[0], "work", f"g * {n * n}")
    x = Matrix("SX", n, k, shared[-1], "x", f"g * {n * k}") if sides else None
    bar = f.barrier(shared[0])
    ty, zero, one = scalar(dtype), literal(0.0, dtype), literal(1.0, dtype)
    load = f"""
    int base_a = {batch_offset(out_batch, a_batch, n * n)};
    {f.spread("e", "0", str(n * n))}
        {s.flat("e")} = a[base_a + e];"""
    if mode == "solve":
        load += f"""
    int base_b = {batch_offset(out_batch, b_batch, n * k)};
    {f.spread("e", "0", str(n * k))}
        {x.flat("e")} = b[base_b + e];"""
    elif mode == "inv":
        load += f"""
    {f.spread("e", "0", str(n * n))}
        {x.flat("e")} = (e / {n}) == (e % {n}) ? {one} : {zero};"""
    body = load + f"""
    {bar}
    int info_ = 0, swaps = 0;{_factor(f, s, x, n, k, dtype, bar)}"""
    params = [("a", ty)] + ([("b", ty)] if mode == "solve" else [])
    if sides:
        unit_lower = substitution(f, s, x, n, k, True, dtype, bar, unit=True)
        upper = substitution(f, s, x, n, k, False, dtype, bar)
        body += f"""
    if (info_ == 0)
    {{{unit_lower}{upper}
    }}
    if (t == 0) info[g] = info_;"""
        if x.shared:
            body += f"""
    {f.spread("e", "0", str(n * k))}
        x[g * {n * k} + e] = {x.flat("e")};"""
        params += [("x", ty)]
    else:
        sign = f"(swaps % 2 == 0 ? {one} : -{one})"
        if mode == "det":
            finish = f"""
        {ty} det_ = {sign};
        [loop] for (int i = 0; i < {n}; i++) det_ = det_ * {s.at("i", "i")};
        det[g] = det_;"""
            params += [("det", ty)]
        else:
            finish = f"""
        {ty} sign_ = {sign}, log_ = {zero};
        [loop] for (int i = 0; i < {n}; i++)
        {{
            {ty} d = {s.at("i", "i")};
            sign_ = d < {zero} ? -sign_ : sign_;
            log_ = log_ + log(abs(d));
        }}
        sgn[g] = info_ == 0 ? sign_ : {zero};
        logabsdet[g] = log_;"""
            params += [("sgn", ty), ("logabsdet", ty)]
        body += f"""
    if (t == 0)
    {{{finish}
        info[g] = info_;
    }}"""
    ty_params = params + ([] if shared[0] else [("work", ty)]) + [("info", "int")]
    declarations = [s.declaration(dtype)] + ([x.declaration(dtype)] if sides else [])
    source = entry_point(f"lu_{mode}", f, ty_params, body, groups, declarations)
    inputs = ["a", "b"] if mode == "solve" else ["a"]
    outputs = [name for name, _ in params if name not in inputs]
    buffers = {**{p: f"in{j}" for j, p in enumerate(inputs)}, **{p: f"out{j}" for j, p in enumerate(outputs)}}
    if not shared[0]:
        buffers["work"] = "scratch1"
    return kernel(source, f"lu_{mode}", groups, f, buffers,
                  scratch=() if shared[0] else ((dtype, groups * n * n),),
                  failure="Singular matrix" if sides else None)
