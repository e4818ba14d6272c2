"""Householder QR ``a = Q R`` (``linalg.qr``, reduced: ``Q`` m x k, ``R`` k x n,
``k = min(m, n)``) as one workgroup per matrix.

LAPACK's ``geqr2`` then ``org2r``, with its conventions, so that the values
are numpy's up to rounding: step ``j`` makes the reflector ``H_j = I - tau v
v^T`` that zeroes column ``j`` below the diagonal (``dlarfg``: ``beta =
-sign(alpha) |(alpha, x)|``, so ``R``'s diagonal may be negative; no
reflection, ``tau = 0``, where the column below is already zero) and applies
it to the columns to its right, each thread taking whole columns.  ``Q`` is
then ``H_0 ... H_{k-1}`` applied to the first ``k`` columns of the identity,
last reflector first.  Only square roots and divisions: lavapipe's double
precision does them right.  Nothing here can fail (a rank-deficient matrix
gets a zero on ``R``'s diagonal, as in numpy).
"""
from __future__ import annotations

import math

from ...targets import Target
from ..registry import Kernel
from .workgroup import Matrix, entry_point, form, kernel, literal, place, scalar


def build(target: Target, batch: tuple[int, ...], m: int, n: int, dtype: str) -> Kernel:
    f = form(target)
    groups, k = math.prod(batch), min(m, n)
    shared_s, shared_q = place(f, dtype, [m * n, m * k])
    s = Matrix("SA", m, n, shared_s, "work", f"g * {m * n}")
    q = Matrix("SQ", m, k, shared_q, "q", f"g * {m * k}")
    bar = f.barrier(shared_s)
    ty, zero, one = scalar(dtype), literal(0.0, dtype), literal(1.0, dtype)
    tau = f"groupshared {ty} TAU[{k}];" if f.concurrent else ""
    tau_of = "TAU[j]" if f.concurrent else "taus[j]"
    local_tau = "" if f.concurrent else f"\n    {ty} taus[{k}];"

    def reflect(target_: Matrix, cols: tuple[str, str]) -> str:
        """Apply ``H_j`` (``v`` below the diagonal of ``s``'s column ``j``, an implicit 1 on it) to columns ``cols``."""
        return f"""{f.spread("c", cols[0], cols[1])}
        {{
            {ty} w = {target_.at("j", "c")};
            [loop] for (int i = j + 1; i < {m}; i++) w = w + {s.at("i", "j")} * {target_.at("i", "c")};
            w = w * {tau_of};
            {target_.at("j", "c")} = {target_.at("j", "c")} - w;
            [loop] for (int i = j + 1; i < {m}; i++)
                {target_.at("i", "c")} = {target_.at("i", "c")} - {s.at("i", "j")} * w;
        }}"""

    body = f"""
    {f.spread("e", "0", str(m * n))}
        {s.flat("e")} = a[g * {m * n} + e];
    {bar}{local_tau}
    [loop] for (int j = 0; j < {k}; j++)
    {{
        {ty} alpha = {s.at("j", "j")}, xnorm2 = {zero};
        [loop] for (int i = j + 1; i < {m}; i++) xnorm2 = xnorm2 + {s.at("i", "j")} * {s.at("i", "j")};
        {ty} tau_ = {zero}, scale = {zero}, beta = alpha;
        if (xnorm2 != {zero})
        {{
            beta = sqrt(alpha * alpha + xnorm2);
            beta = alpha >= {zero} ? -beta : beta;
            tau_ = (beta - alpha) / beta;
            scale = {one} / (alpha - beta);
        }}
        {bar}
        if (t == 0) {{ {tau_of} = tau_; {s.at("j", "j")} = beta; }}
        {f.spread("i", "j + 1", str(m))}
            {s.at("i", "j")} = {s.at("i", "j")} * scale;
        {bar}
        {reflect(s, ("j + 1", str(n)))}
        {bar}
    }}
    {f.spread("e", "0", str(m * k))}
        {q.flat("e")} = (e / {k}) == (e % {k}) ? {one} : {zero};
    {bar}
    [loop] for (int j = {k - 1}; j >= 0; j--)
    {{
        {reflect(q, ("j", str(k)))}
        {bar}
    }}
    {f.spread("e", "0", str(k * n))}
        r[g * {k * n} + e] = (e % {n}) >= (e / {n}) ? {s.flat("e")} : {zero};
    if (t == 0) info[g] = 0;
"""
    if shared_q:
        body += f"""    {f.spread("e", "0", str(m * k))}
        q[g * {m * k} + e] = {q.flat("e")};
"""
    params = [("a", ty), ("q", ty), ("r", ty)] + ([] if shared_s else [("work", ty)]) + [("info", "int")]
    source = entry_point("householder_qr", f, params, body, groups, [s.declaration(dtype), q.declaration(dtype), tau])
    buffers = {"a": "in0", "q": "out0", "r": "out1", **({} if shared_s else {"work": "scratch1"})}
    return kernel(source, "householder_qr", groups, f, buffers, scratch=() if shared_s else ((dtype, groups * m * n),))
