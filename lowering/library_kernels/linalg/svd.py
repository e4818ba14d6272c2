"""Singular value decomposition (``linalg.svd``, reduced: ``U`` m x k, ``s``
descending, ``Vh`` k x n) by one-sided Jacobi, one thread per matrix.

Hestenes' method on the taller orientation (``a``, or ``a^T`` for a wide
matrix): sweeps of plane rotations over column pairs ``p < q`` of ``B``
until every pair is orthogonal to ``eps`` of its norms (``V`` collects the
rotations), at most ``eigh.SWEEPS``; then the singular values are the column
norms, sorted descending, and ``U``'s columns the normalised columns.  A zero
singular value leaves a zero column: its ``U`` column is completed from unit
vectors orthogonalised against the others, so ``U`` stays orthonormal as
numpy's.  Singular vectors carry their own signs, not LAPACK's (docs/guide.md,
as for ``eigh``).  One thread per matrix on every target (``eigh``'s reasons).
"""
from __future__ import annotations

import math

from ...targets import Target
from ..registry import Kernel
from .eigh import EPS, SWEEPS
from .workgroup import Form, entry_point, kernel, literal, scalar


def build(target: Target, batch: tuple[int, ...], m: int, n: int, dtype: str) -> Kernel:
    f = Form(1, False, 1 if target.sequential else target.tuning.linalg_matrices)
    groups, rows, cols = math.prod(batch), max(m, n), min(m, n)
    wide = m < n
    ty, zero, one = scalar(dtype), literal(0.0, dtype), literal(1.0, dtype)
    eps = literal(EPS[dtype], dtype)
    base_b, base_u, base_vh = f"g * {rows * cols}", f"g * {m * cols}", f"g * {cols * n}"

    def b(i: str, j: str) -> str:        # B = a (tall) or a^T (wide): rows x cols, in scratch
        return f"work[{base_b} + ({i}) * {cols} + ({j})]"

    def v(i: str, j: str) -> str:        # V (cols x cols): U itself for a wide matrix, else Vh transposed
        return f"u[{base_u} + ({i}) * {cols} + ({j})]" if wide else f"vh[{base_vh} + ({j}) * {cols} + ({i})]"

    def out(i: str, j: str) -> str:      # the normalised B: U for a tall matrix, Vh transposed for a wide one
        return f"vh[{base_vh} + ({j}) * {n} + ({i})]" if wide else f"u[{base_u} + ({i}) * {cols} + ({j})]"

    def rotate(at) -> str:
        return f"""[loop] for (int k = 0; k < {rows if at is b else cols}; k++)
                {{
                    {ty} x = {at("k", "p")}, y = {at("k", "q")};
                    {at("k", "p")} = c * x - s * y;
                    {at("k", "q")} = s * x + c * y;
                }}"""

    def swap(at, count: int) -> str:
        return f"""[loop] for (int k = 0; k < {count}; k++)
            {{
                {ty} x = {at("k", "j")};
                {at("k", "j")} = {at("k", "best")};
                {at("k", "best")} = x;
            }}"""

    load = f"a[g * {m * n} + j * {n} + i]" if wide else f"a[g * {m * n} + i * {n} + j]"
    body = f"""
    [loop] for (int i = 0; i < {rows}; i++) [loop] for (int j = 0; j < {cols}; j++) {b("i", "j")} = {load};
    [loop] for (int i = 0; i < {cols}; i++) [loop] for (int j = 0; j < {cols}; j++)
        {v("i", "j")} = i == j ? {one} : {zero};
    [loop] for (int sweep = 0; sweep < {SWEEPS}; sweep++)
    {{
        bool rotated = false;
        [loop] for (int p = 0; p < {cols - 1}; p++) [loop] for (int q = p + 1; q < {cols}; q++)
        {{
            {ty} alpha = {zero}, beta = {zero}, gamma = {zero};
            [loop] for (int k = 0; k < {rows}; k++)
            {{
                {ty} x = {b("k", "p")}, y = {b("k", "q")};
                alpha = alpha + x * x;
                beta = beta + y * y;
                gamma = gamma + x * y;
            }}
            if (!(abs(gamma) > {eps} * sqrt(alpha * beta))) continue;
            rotated = true;
            {ty} zeta = (beta - alpha) / (gamma + gamma);
            {ty} t = {one} / (abs(zeta) + sqrt(zeta * zeta + {one}));
            t = zeta < {zero} ? -t : t;
            {ty} c = {one} / sqrt(t * t + {one}), s = t * c;
            {rotate(b)}
            {rotate(v)}
        }}
        if (!rotated) break;
    }}
    [loop] for (int j = 0; j < {cols}; j++)
    {{
        {ty} norm2 = {zero};
        [loop] for (int k = 0; k < {rows}; k++) norm2 = norm2 + {b("k", "j")} * {b("k", "j")};
        sv[g * {cols} + j] = sqrt(norm2);
    }}
    [loop] for (int j = 0; j < {cols}; j++)
    {{
        int best = j;
        [loop] for (int i = j + 1; i < {cols}; i++) best = sv[g * {cols} + i] > sv[g * {cols} + best] ? i : best;
        {ty} d = sv[g * {cols} + best];
        sv[g * {cols} + best] = sv[g * {cols} + j];
        sv[g * {cols} + j] = d;
        {swap(b, rows)}
        {swap(v, cols)}
        [loop] for (int k = 0; k < {rows}; k++) {out("k", "j")} = d > {zero} ? {b("k", "j")} / d : {zero};
        if (d > {zero}) continue;
        [loop] for (int e = 0; e < {rows}; e++)    // a zero singular value: the first unit vector that stays long
        {{
            [loop] for (int k = 0; k < {rows}; k++) {out("k", "j")} = k == e ? {one} : {zero};
            [loop] for (int l = 0; l < j; l++)
            {{
                {ty} dot = {out("e", "l")};
                [loop] for (int k = 0; k < {rows}; k++) {out("k", "j")} = {out("k", "j")} - dot * {out("k", "l")};
            }}
            {ty} norm2 = {zero};
            [loop] for (int k = 0; k < {rows}; k++) norm2 = norm2 + {out("k", "j")} * {out("k", "j")};
            if (norm2 > {literal(0.25, dtype)})
            {{
                {ty} r = {one} / sqrt(norm2);
                [loop] for (int k = 0; k < {rows}; k++) {out("k", "j")} = {out("k", "j")} * r;
                break;
            }}
        }}
    }}
    info[g] = 0;
"""
    params = [("a", ty), ("u", ty), ("sv", ty), ("vh", ty), ("work", ty), ("info", "int")]
    source = entry_point("jacobi_svd", f, params, body, groups, [])
    return kernel(source, "jacobi_svd", groups, f, {"a": "in0", "u": "out0", "sv": "out1", "vh": "out2",
                                                     "work": "scratch1"}, scratch=((dtype, groups * rows * cols),))
