"""Device kernels for ``np.linalg``'s library ops (``ir.library.linalg``):
Cholesky, triangular solves, LU with partial pivoting (solve, inv, det,
slogdet) and Householder QR, one workgroup per matrix (``workgroup``), and
Jacobi ``eigh`` and ``svd``, one thread per matrix.

Each builder takes the node's concrete shapes and returns None, so that the
node stays a host step (numpy's LAPACK), where:

* a matrix is larger than ``Tuning.linalg_max_n`` (64): one workgroup per matrix
  suits small matrices only, and no multi-workgroup (blocked) kernel is
  written;
* on a target whose buffers are host memory that numpy computes in
  (``Target.host_blas``: the CPU device), a matrix is larger than
  ``Tuning.linalg_host_lapack_n`` (16): there the host step is LAPACK reading the piece's
  buffers in place, and one thread per matrix loses to it past tiny sizes
  (value_and_grad, 1 BLAS thread: solve 64 x 32 x 32 5.2 ms against 2.1 ms,
  one 64 x 64 0.60 against 0.49 ms; 256 x 8 x 8 0.94 against 1.17 ms, and
  Cholesky's 64 x 16 x 16 1.05 against 3.8 ms: docs/guide.md);
* for ``eigh`` and ``svd``, whose Jacobi kernels run a matrix on one thread,
  a matrix is larger than ``Tuning.linalg_jacobi_n`` (16; ``linalg_host_lapack_jacobi_n``, 8, on
  the CPU device): one thread's sweeps over a larger matrix lose to the
  host step (value_and_grad of eigvalsh on lavapipe, one 64 x 64: 39.7 ms
  against 1.3 ms; 16 x 16: 1.6 against 1.0 ms; on the CPU device 64 x 16 x 16:
  8.0 against 4.9 ms, 64 x 8 x 8: 0.82 against 0.74, svdvals' 0.77 against
  0.92 ms); a batch of small matrices is where they pay;
* the batch has more matrices than two dispatch axes of workgroups hold;
* slogdet is float64 on a target whose double ``log`` is wrong (lavapipe,
  ``Target.float64_transcendentals``).

"""
from __future__ import annotations

import math

from ...targets import Target
from ..registry import Kernel, Spec, register
from . import cholesky, eigh, lu, qr, svd, triangular
from .workgroup import MAX_GROUPS


def _fits(target: Target, batch: tuple[int, ...], n: int, jacobi: bool = False) -> bool:
    tuning = target.tuning
    if jacobi:
        limit = tuning.linalg_host_lapack_jacobi_n if target.host_blas else tuning.linalg_jacobi_n
    else:
        limit = tuning.linalg_host_lapack_n if target.host_blas else tuning.linalg_max_n
    return n <= limit and math.prod(batch) <= MAX_GROUPS * MAX_GROUPS


def _cholesky(target: Target, inputs: tuple[Spec, ...], outputs: tuple[Spec, ...], params: dict) -> Kernel | None:
    ((shape, dtype),) = inputs
    return cholesky.build(target, shape[:-2], shape[-1], dtype) if _fits(target, shape[:-2], shape[-1]) else None


def _qr(target: Target, inputs: tuple[Spec, ...], outputs: tuple[Spec, ...], params: dict) -> Kernel | None:
    ((shape, dtype),) = inputs
    m, n = shape[-2:]
    return qr.build(target, shape[:-2], m, n, dtype) if _fits(target, shape[:-2], max(m, n)) else None


def _svd(target: Target, inputs: tuple[Spec, ...], outputs: tuple[Spec, ...], params: dict) -> Kernel | None:
    ((shape, dtype),) = inputs
    m, n = shape[-2:]
    return svd.build(target, shape[:-2], m, n, dtype) if _fits(target, shape[:-2], max(m, n), True) else None


def _eigh(target: Target, inputs: tuple[Spec, ...], outputs: tuple[Spec, ...], params: dict) -> Kernel | None:
    ((shape, dtype),) = inputs
    if not _fits(target, shape[:-2], shape[-1], True):
        return None
    return eigh.build(target, shape[:-2], shape[-1], dtype, params.get("UPLO", "L").upper() == "L")


def _solves(triangular_: bool):
    def build(target: Target, inputs: tuple[Spec, ...], outputs: tuple[Spec, ...], params: dict) -> Kernel | None:
        ((a_shape, dtype), (b_shape, _)), ((x_shape, _),) = inputs, outputs
        n, k = x_shape[-2:]
        if not _fits(target, x_shape[:-2], n):
            return None
        if triangular_:
            return triangular.build(target, a_shape[:-2], b_shape[:-2], x_shape[:-2], n, k, dtype,
                                    params.get("lower", True))
        return lu.build(target, "solve", a_shape[:-2], n, dtype, b_shape[:-2], x_shape[:-2], k)
    return build


def _factorised(mode: str):
    def build(target: Target, inputs: tuple[Spec, ...], outputs: tuple[Spec, ...], params: dict) -> Kernel | None:
        ((shape, dtype),) = inputs
        return lu.build(target, mode, shape[:-2], shape[-1], dtype) if _fits(target, shape[:-2], shape[-1]) else None
    return build


register("linalg.cholesky", _cholesky)
register("linalg.qr", _qr)
register("linalg.eigh", _eigh)
register("linalg.svd", _svd)
register("linalg.solve_triangular", _solves(True))
register("linalg.solve", _solves(False))
for _mode in ("inv", "det", "slogdet"):
    register(f"linalg.{_mode}", _factorised(_mode))
