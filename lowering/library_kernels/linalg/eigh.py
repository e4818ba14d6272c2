"""Symmetric eigendecomposition (``linalg.eigh``) by cyclic Jacobi, one
thread per matrix.

Sweeps of plane rotations over every pair ``p < q`` (``J^T A J`` zeroes
``A[p, q]``, ``V J`` collects the eigenvectors) until the off-diagonal part's
squared norm is below ``eps^2`` times the matrix's (quadratic convergence:
a handful of sweeps at these sizes; at most ``SWEEPS``), then eigenvalues
sorted ascending with their vectors, as numpy's.  ``UPLO`` names the
triangle read, as numpy's.  Eigenvectors come out with their own signs,
not LAPACK's: a function of them that depends on the sign (rather than on
the eigenspace) differs from numpy's value, on every device as between
numpy and JAX (docs/guide.md).

One thread per matrix on every target, Vulkan and CUDA included
(``workgroup.Form`` with ``matrices``): the cooperative (round-robin
parallel Jacobi) form is not written, so on a GPU a batch of small matrices
is spread over threads, not a matrix over a workgroup.  Only square roots
and divisions: lavapipe's double precision does them right.
"""
from __future__ import annotations

import math

from ...targets import Target
from ..registry import Kernel
from .workgroup import Form, Matrix, entry_point, kernel, literal, scalar

SWEEPS = 30
EPS = {"float32": 2.0 ** -23, "float64": 2.0 ** -52}


def build(target: Target, batch: tuple[int, ...], n: int, dtype: str, lower: bool) -> Kernel:
    f = Form(1, False, 1 if target.sequential else target.tuning.linalg_matrices)
    groups = math.prod(batch)
    a = Matrix("", n, n, False, "work", f"g * {n * n}")
    v = Matrix("", n, n, False, "v", f"g * {n * n}")
    ty, zero, one = scalar(dtype), literal(0.0, dtype), literal(1.0, dtype)
    tol = literal(EPS[dtype] ** 2, dtype)
    read = "i >= j" if lower else "i <= j"

    def rotate(m: Matrix, columns: bool) -> str:
        """Columns ``p`` and ``q`` of ``m`` (rows, if not ``columns``) to ``(c x - s y, s x + c y)``."""
        at = (lambda r: (m.at("k", r))) if columns else (lambda r: m.at(r, "k"))
        return f"""[loop] for (int k = 0; k < {n}; k++)
            {{
                {ty} x = {at("p")}, y = {at("q")};
                {at("p")} = c * x - s * y;
                {at("q")} = s * x + c * y;
            }}"""

    body = f"""
    [loop] for (int e = 0; e < {n * n}; e++)
    {{
        int i = e / {n}, j = e % {n};
        {a.flat("e")} = {read} ? a[g * {n * n} + e] : a[g * {n * n} + j * {n} + i];
        {v.flat("e")} = i == j ? {one} : {zero};
    }}
    [loop] for (int sweep = 0; sweep < {SWEEPS}; sweep++)
    {{
        {ty} off = {zero}, all = {zero};
        [loop] for (int e = 0; e < {n * n}; e++)
        {{
            {ty} x = {a.flat("e")} * {a.flat("e")};
            all = all + x;
            off = off + ((e / {n}) == (e % {n}) ? {zero} : x);
        }}
        if (!(off > {tol} * all)) break;
        [loop] for (int p = 0; p < {n - 1}; p++) [loop] for (int q = p + 1; q < {n}; q++)
        {{
            {ty} apq = {a.at("p", "q")};
            if (apq == {zero}) continue;
            {ty} theta = ({a.at("q", "q")} - {a.at("p", "p")}) / (apq + apq);
            {ty} t = {one} / (abs(theta) + sqrt(theta * theta + {one}));
            t = theta < {zero} ? -t : t;
            {ty} c = {one} / sqrt(t * t + {one}), s = t * c;
            {rotate(a, True)}
            {rotate(a, False)}
            {rotate(v, True)}
            {a.at("p", "q")} = {zero};
            {a.at("q", "p")} = {zero};
        }}
    }}
    [loop] for (int i = 0; i < {n}; i++)
    {{
        int best = i;
        [loop] for (int j = i + 1; j < {n}; j++) best = {a.at("j", "j")} < {a.at("best", "best")} ? j : best;
        {ty} d = {a.at("best", "best")};
        {a.at("best", "best")} = {a.at("i", "i")};
        {a.at("i", "i")} = d;
        w[g * {n} + i] = d;
        [loop] for (int k = 0; k < {n}; k++)
        {{
            {ty} x = {v.at("k", "i")};
            {v.at("k", "i")} = {v.at("k", "best")};
            {v.at("k", "best")} = x;
        }}
    }}
    info[g] = 0;
"""
    params = [("a", ty), ("w", ty), ("v", ty), ("work", ty), ("info", "int")]
    source = entry_point("jacobi_eigh", f, params, body, groups, [])
    return kernel(source, "jacobi_eigh", groups, f, {"a": "in0", "w": "out0", "v": "out1", "work": "scratch1"},
                  scratch=((dtype, groups * n * n),))
