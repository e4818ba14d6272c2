"""``linalg.eigh`` (symmetric eigendecomposition, LAPACK ``syevd`` through
numpy: eigenvalues ascending) and ``linalg.svd`` (``gesdd``: ``a = U diag(s)
Vh``, singular values descending, ``full_matrices=False``).

Both rules need ``F[i, j] = 1 / (l_j - l_i)`` over pairs of distinct
eigenvalues ``l`` (squared singular values for the SVD), 0 where they are
equal.  **Where two eigenvalues (singular values) coincide the
eigenvectors (singular vectors) are not unique and their derivative does not
exist**; the rule then drops that pair's term (as JAX does), which is right
only for a function of the eigenvectors that does not depend on the choice
inside the repeated eigenspace (a projector).  Eigenvalues alone
(``eigvalsh``, ``svdvals``, norms) are differentiable everywhere except a
zero singular value of a non-square matrix.

eigh, with ``w, V = eigh(A)`` and ``A`` taken symmetric (JAX's convention):

* JVP: ``M = V^T sym(dA) V``; ``dw = diag(M)``, ``dV = V (F * M)``;
* VJP: ``A_bar = sym(V (diag(w_bar) + F * (V^T V_bar)) V^T)``.

svd, with ``dS = U^T dA V``, ``D = diag(s)``:

* JVP: ``ds = diag(dS)``, ``dU = U (F * (dS D + D dS^T))``, ``dV = V (F *
  (D dS + dS^T D))``, plus ``(I - U U^T) dA V D^-1`` on ``dU`` for a tall
  matrix and ``(I - V V^T) dA^T U D^-1`` on ``dV`` for a wide one;
* VJP: the transpose of that map, ``A_bar = U (diag(s_bar) + (J + J^T) D +
  D (K + K^T)) V^T`` with ``J = F * (U^T U_bar)``, ``K = F * (V^T V_bar)``,
  plus the two projections' transposes.
"""
from __future__ import annotations

import numpy as np

from ...tracer.errors import UnsupportedOperationError
from ..emit import call
from ..registry import LibraryOp, register
from .algebra import add, diag_embed, diagonal, mT, sym
from .shapes import matrix, smaller, square


def _gaps(values):
    """``F[..., i, j] = 1 / (v_j - v_i)``, 0 where ``v_i == v_j`` (the diagonal too)."""
    diff = values[..., None, :] - values[..., :, None]
    tie = diff == 0
    return np.where(tie, 0.0, 1.0 / np.where(tie, 1.0, diff))


# -- eigh ---------------------------------------------------------------------------------
def _eigh_shapes(specs, params):
    ((shape, dtype),) = specs
    b, n = square("numpy.linalg.eigh", shape, dtype)
    return [(b + (n,), dtype), (shape, dtype)]


def _eigh_numpy(a: np.ndarray, UPLO: str = "L") -> tuple:  # noqa: N803 (numpy's keyword)
    w, v = np.linalg.eigh(a, UPLO=UPLO)
    return w, v


def _eigh_jvp(params, inputs, outputs, tangents):
    (da,) = tangents
    if da is None:
        return [None, None]
    w, v = outputs
    m = mT(v) @ sym(da) @ v
    return [diagonal(m), v @ (_gaps(w) * m)]


def _eigh_vjp(params, inputs, outputs, cotangents):
    gw, gv = cotangents
    if gw is None and gv is None:
        return [None]
    w, v = outputs
    inner = add(None if gw is None else diag_embed(gw), None if gv is None else _gaps(w) * (mT(v) @ gv))
    return [sym(v @ inner @ mT(v))]


EIGH = register(LibraryOp("linalg.eigh", _eigh_shapes, _eigh_numpy, _eigh_vjp, _eigh_jvp,
                          doc="eigenvalues (ascending) and eigenvectors of a symmetric matrix (stack)"))


def eigh(a, UPLO: str = "L"):  # noqa: N803
    return call("linalg.eigh", a, UPLO=str(UPLO))


# -- svd ----------------------------------------------------------------------------------
def _svd_shapes(specs, params):
    ((shape, dtype),) = specs
    b, m, n = matrix("numpy.linalg.svd", shape, dtype)
    k = smaller(m, n)
    return [(b + (m, k), dtype), (b + (k,), dtype), (b + (k, n), dtype)]


def _svd_numpy(a: np.ndarray) -> tuple:
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    return u, s, vh


def _sides(a):
    m, n = a.sym_shape[-2:]
    return bool((m - n).is_positive), bool((n - m).is_positive)


def _svd_jvp(params, inputs, outputs, tangents):
    (da,) = tangents
    if da is None:
        return [None, None, None]
    (a,), (u, s, vh) = inputs, outputs
    tall, wide = _sides(a)
    v = mT(vh)
    ds = mT(u) @ da @ v
    f = _gaps(s * s)
    row, col = s[..., None, :], s[..., :, None]
    du = u @ (f * (ds * row + col * mT(ds)))
    dv = v @ (f * (col * ds + mT(ds) * row))
    if tall:
        dav = da @ v
        du = du + (dav - u @ (mT(u) @ dav)) / row
    if wide:
        dau = mT(da) @ u
        dv = dv + (dau - v @ (mT(v) @ dau)) / row
    return [du, diagonal(ds), mT(dv)]


def _svd_vjp(params, inputs, outputs, cotangents):
    gu, gs, gvh = cotangents
    if gu is None and gs is None and gvh is None:
        return [None]
    (a,), (u, s, vh) = inputs, outputs
    tall, wide = _sides(a)
    v = mT(vh)
    gv = None if gvh is None else mT(gvh)
    f = _gaps(s * s)
    row, col = s[..., None, :], s[..., :, None]
    j = None if gu is None else f * (mT(u) @ gu)
    k = None if gv is None else f * (mT(v) @ gv)
    core = add(None if gs is None else diag_embed(gs), None if j is None else (j + mT(j)) * row,
               None if k is None else col * (k + mT(k)))
    out = u @ core @ vh
    if tall and gu is not None:
        out = out + ((gu - u @ (mT(u) @ gu)) / row) @ vh
    if wide and gv is not None:
        out = out + u @ mT((gv - v @ (mT(v) @ gv)) / row)
    return [out]


SVD = register(LibraryOp("linalg.svd", _svd_shapes, _svd_numpy, _svd_vjp, _svd_jvp,
                         doc="a = U diag(s) Vh, full_matrices=False; s descending"))


def svd(a, full_matrices: bool = True, compute_uv: bool = True):
    """numpy's ``svd``; a traced one is the reduced form (``full_matrices``
    must be False unless the matrix is square, where both agree)."""
    if full_matrices and compute_uv:
        m, n = a.sym_shape[-2:] if hasattr(a, "sym_shape") else np.shape(a)[-2:]
        if m != n:
            raise UnsupportedOperationError("numpy.linalg.svd", "full_matrices=True of a non-square matrix "
                                            "is not supported (its extra singular vectors are not unique); "
                                            "pass full_matrices=False")
    u, s, vh = call("linalg.svd", a)
    return (u, s, vh) if compute_uv else s
