"""PolyBench / NPBench kernels written as a numpy user would, with JAX twins.

Each kernel is written from the published algorithm description (PolyBench 4.2
and the NPBench numpy ports' problem statements), not from anyone's code.  The
numpy body is what symdiff traces (arguments get ``sd.f32``/``sd.f64``
annotations) and also what plain numpy runs in float64 to check the JAX twin's
forward value, so the oracle is checked before it judges symdiff.  Bodies update
their arguments in place as the NPBench kernels do (symdiff copies them; the
suite passes numpy copies).  Every body returns a scalar loss and is
differentiated with respect to all of its float arguments.

Sizes are small (4-7 per axis, 2-3 time steps): Python loops unroll at trace
time, and every program is compiled once per device.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

# -- linear algebra: BLAS-like ---------------------------------------------------------------------------


def gemm(alpha, beta, C, A, B):
    C[:] = alpha * A @ B + beta * C
    return np.sum(C * C)


def gemm_jax(jnp, alpha, beta, C, A, B):
    C = alpha * A @ B + beta * C
    return jnp.sum(C * C)


def gemver(alpha, beta, A, u1, v1, u2, v2, w, x, y, z):
    A += np.outer(u1, v1) + np.outer(u2, v2)
    x += beta * y @ A + z
    w += alpha * A @ x
    return np.sum(w * w) + np.sum(x)


def gemver_jax(jnp, alpha, beta, A, u1, v1, u2, v2, w, x, y, z):
    A = A + jnp.outer(u1, v1) + jnp.outer(u2, v2)
    x = x + beta * y @ A + z
    w = w + alpha * A @ x
    return jnp.sum(w * w) + jnp.sum(x)


def gesummv(alpha, beta, A, B, x):
    return np.sum((alpha * A @ x + beta * B @ x) ** 2)


def gesummv_jax(jnp, alpha, beta, A, B, x):
    return jnp.sum((alpha * A @ x + beta * B @ x) ** 2)


def mvt(x1, x2, y_1, y_2, A):
    x1 += A @ y_1
    x2 += y_2 @ A
    return np.sum(x1 * x1) + np.sum(x2 * x2)


def mvt_jax(jnp, x1, x2, y_1, y_2, A):
    x1 = x1 + A @ y_1
    x2 = x2 + y_2 @ A
    return jnp.sum(x1 * x1) + jnp.sum(x2 * x2)


def syrk(alpha, beta, C, A):
    for i in range(A.shape[0]):
        C[i, :i + 1] *= beta
        C[i, :i + 1] += alpha * A[:i + 1] @ A[i]
    return np.sum(C * C)


def syrk_jax(jnp, alpha, beta, C, A):
    for i in range(A.shape[0]):
        C = C.at[i, :i + 1].set(beta * C[i, :i + 1] + alpha * A[:i + 1] @ A[i])
    return jnp.sum(C * C)


def syr2k(alpha, beta, C, A, B):
    for i in range(A.shape[0]):
        C[i, :i + 1] *= beta
        C[i, :i + 1] += A[:i + 1] @ (alpha * B[i]) + B[:i + 1] @ (alpha * A[i])
    return np.sum(C * C)


def syr2k_jax(jnp, alpha, beta, C, A, B):
    for i in range(A.shape[0]):
        C = C.at[i, :i + 1].set(beta * C[i, :i + 1] + A[:i + 1] @ (alpha * B[i]) + B[:i + 1] @ (alpha * A[i]))
    return jnp.sum(C * C)


def trmm(alpha, A, B):
    # B := alpha * A^T B with A unit lower triangular (the strict lower part is read)
    for i in range(B.shape[0]):
        B[i, :] += A[i + 1:, i] @ B[i + 1:, :]
    B *= alpha
    return np.sum(B * B)


def trmm_jax(jnp, alpha, A, B):
    for i in range(B.shape[0]):
        B = B.at[i, :].add(A[i + 1:, i] @ B[i + 1:, :])
    B = B * alpha
    return jnp.sum(B * B)


def symm(alpha, beta, C, A, B):
    # C := alpha * A B + beta * C, A symmetric, only its lower triangle read
    for i in range(C.shape[0]):
        C[:i, :] += alpha * np.outer(A[i, :i], B[i, :])
        C[i, :] = beta * C[i, :] + alpha * A[i, i] * B[i, :] + alpha * (A[i, :i] @ B[:i, :])
    return np.sum(C * C)


def symm_jax(jnp, alpha, beta, C, A, B):
    for i in range(C.shape[0]):
        C = C.at[:i, :].add(alpha * jnp.outer(A[i, :i], B[i, :]))
        C = C.at[i, :].set(beta * C[i, :] + alpha * A[i, i] * B[i, :] + alpha * (A[i, :i] @ B[:i, :]))
    return jnp.sum(C * C)


def atax(A, x):
    return np.sum(np.sin(A.T @ (A @ x)))


def atax_jax(jnp, A, x):
    return jnp.sum(jnp.sin(A.T @ (A @ x)))


def bicg(A, p, r):
    return np.sum((r @ A) ** 2) + np.sum((A @ p) ** 2)


def bicg_jax(jnp, A, p, r):
    return jnp.sum((r @ A) ** 2) + jnp.sum((A @ p) ** 2)


def k2mm(alpha, beta, A, B, C, D):
    D[:] = alpha * A @ B @ C + beta * D
    return np.sum(D * D)


def k2mm_jax(jnp, alpha, beta, A, B, C, D):
    return jnp.sum((alpha * A @ B @ C + beta * D) ** 2)


def k3mm(A, B, C, D):
    return np.sum(np.tanh((A @ B) @ (C @ D)))


def k3mm_jax(jnp, A, B, C, D):
    return jnp.sum(jnp.tanh((A @ B) @ (C @ D)))


def doitgen(A, C4):
    for r in range(A.shape[0]):
        A[r] = A[r] @ C4
    return np.sum(A * A)


def doitgen_jax(jnp, A, C4):
    return jnp.sum((A @ C4) ** 2)


# -- linear algebra: solvers and decompositions -------------------------------------------------------


def lu(A):
    n = A.shape[0]
    for i in range(n):
        for j in range(i):
            A[i, j] -= A[i, :j] @ A[:j, j]
            A[i, j] /= A[j, j]
        A[i, i:] -= A[i, :i] @ A[:i, i:]
    return np.sum(A * A)


def lu_jax(jnp, A):
    n = A.shape[0]
    for i in range(n):
        for j in range(i):
            A = A.at[i, j].set((A[i, j] - A[i, :j] @ A[:j, j]) / A[j, j])
        A = A.at[i, i:].add(-(A[i, :i] @ A[:i, i:]))
    return jnp.sum(A * A)


def cholesky(A):
    n = A.shape[0]
    A[0, 0] = np.sqrt(A[0, 0])
    for i in range(1, n):
        for j in range(i):
            A[i, j] -= A[i, :j] @ A[j, :j]
            A[i, j] /= A[j, j]
        A[i, i] -= A[i, :i] @ A[i, :i]
        A[i, i] = np.sqrt(A[i, i])
    return np.sum(A)


def cholesky_jax(jnp, A):
    n = A.shape[0]
    A = A.at[0, 0].set(jnp.sqrt(A[0, 0]))
    for i in range(1, n):
        for j in range(i):
            A = A.at[i, j].set((A[i, j] - A[i, :j] @ A[j, :j]) / A[j, j])
        A = A.at[i, i].set(jnp.sqrt(A[i, i] - A[i, :i] @ A[i, :i]))
    return jnp.sum(A)


def trisolv(L, x, b):
    for i in range(x.shape[0]):
        x[i] = (b[i] - L[i, :i] @ x[:i]) / L[i, i]
    return np.sum(x * x)


def trisolv_jax(jnp, L, x, b):
    for i in range(x.shape[0]):
        x = x.at[i].set((b[i] - L[i, :i] @ x[:i]) / L[i, i])
    return jnp.sum(x * x)


def durbin(r):
    n = r.shape[0]
    y = np.empty_like(r)
    alpha = -r[0]
    beta = 1.0
    y[0] = -r[0]
    for k in range(1, n):
        beta *= 1.0 - alpha * alpha
        alpha = -(r[k] + np.dot(np.flip(r[:k]), y[:k])) / beta
        y[:k] += alpha * np.flip(y[:k])
        y[k] = alpha
    return np.sum(y * y)


def durbin_sliced(r):
    """Durbin with the reversals written as negative-step slices instead of np.flip."""
    n = r.shape[0]
    y = np.empty_like(r)
    alpha = -r[0]
    beta = 1.0
    y[0] = -r[0]
    for k in range(1, n):
        beta *= 1.0 - alpha * alpha
        alpha = -(r[k] + r[k - 1::-1] @ y[:k]) / beta
        y[:k] += alpha * y[k - 1::-1]
        y[k] = alpha
    return np.sum(y * y)


def durbin_jax(jnp, r):
    n = r.shape[0]
    y = jnp.zeros_like(r)
    alpha = -r[0]
    beta = 1.0
    y = y.at[0].set(-r[0])
    for k in range(1, n):
        beta = beta * (1.0 - alpha * alpha)
        alpha = -(r[k] + jnp.flip(r[:k]) @ y[:k]) / beta
        y = y.at[:k].add(alpha * jnp.flip(y[:k]))
        y = y.at[k].set(alpha)
    return jnp.sum(y * y)


def gramschmidt(A):
    m, n = A.shape
    Q = np.zeros_like(A)
    R = np.zeros((n, n), dtype=A.dtype)
    for k in range(n):
        R[k, k] = np.sqrt(A[:, k] @ A[:, k])
        Q[:, k] = A[:, k] / R[k, k]
        R[k, k + 1:] = Q[:, k] @ A[:, k + 1:]
        A[:, k + 1:] -= np.outer(Q[:, k], R[k, k + 1:])
    return np.sum(Q) + np.sum(R)


def gramschmidt_jax(jnp, A):
    m, n = A.shape
    Q = jnp.zeros_like(A)
    R = jnp.zeros((n, n), dtype=A.dtype)
    for k in range(n):
        R = R.at[k, k].set(jnp.sqrt(A[:, k] @ A[:, k]))
        Q = Q.at[:, k].set(A[:, k] / R[k, k])
        R = R.at[k, k + 1:].set(Q[:, k] @ A[:, k + 1:])
        A = A.at[:, k + 1:].add(-jnp.outer(Q[:, k], R[k, k + 1:]))
    return jnp.sum(Q) + jnp.sum(R)


# -- data mining --------------------------------------------------------------------------------------


def covariance(data):
    n, m = data.shape
    mean = np.mean(data, axis=0)
    data -= mean
    cov = np.zeros((m, m), dtype=data.dtype)
    for i in range(m):
        cov[i:m, i] = cov[i, i:m] = data[:, i] @ data[:, i:m] / (n - 1.0)
    return np.sum(cov * cov)


def covariance_jax(jnp, data):
    n = data.shape[0]
    d = data - jnp.mean(data, axis=0)
    return jnp.sum((d.T @ d / (n - 1.0)) ** 2)


def correlation(data):
    n, m = data.shape
    mean = np.mean(data, axis=0)
    stddev = np.sqrt(np.mean((data - mean) ** 2, axis=0))
    stddev = np.where(stddev <= 0.1, 1.0, stddev)
    data = (data - mean) / (np.sqrt(float(n)) * stddev)
    corr = np.eye(m, dtype=data.dtype)
    for i in range(m - 1):
        corr[i + 1:m, i] = corr[i, i + 1:m] = data[:, i] @ data[:, i + 1:m]
    return np.sum(corr * corr * corr)


def correlation_npbench(data):
    """As the NPBench port writes it: a boolean-mask store (np.where is the traceable form)."""
    n, m = data.shape
    mean = np.mean(data, axis=0)
    stddev = np.std(data, axis=0)
    stddev[stddev <= 0.1] = 1.0
    data -= mean
    data /= np.sqrt(float(n)) * stddev
    return np.sum((data.T @ data) ** 3)


def correlation_npbench_jax(jnp, data):
    n, m = data.shape
    mean = jnp.mean(data, axis=0)
    stddev = jnp.std(data, axis=0)
    stddev = jnp.where(stddev <= 0.1, 1.0, stddev)
    d = (data - mean) / (jnp.sqrt(float(n)) * stddev)
    return jnp.sum((d.T @ d) ** 3)


def correlation_jax(jnp, data):
    n, m = data.shape
    mean = jnp.mean(data, axis=0)
    stddev = jnp.sqrt(jnp.mean((data - mean) ** 2, axis=0))
    stddev = jnp.where(stddev <= 0.1, 1.0, stddev)
    d = (data - mean) / (jnp.sqrt(float(n)) * stddev)
    corr = d.T @ d
    corr = corr.at[jnp.arange(m), jnp.arange(m)].set(1.0)
    return jnp.sum(corr ** 3)


# -- stencils -------------------------------------------------------------------------------------------


def jacobi_1d(A, B):
    for _ in range(2):
        B[1:-1] = 0.33333 * (A[:-2] + A[1:-1] + A[2:])
        A[1:-1] = 0.33333 * (B[:-2] + B[1:-1] + B[2:])
    return np.sum(A * A) + np.sum(B)


def jacobi_1d_jax(jnp, A, B):
    for _ in range(2):
        B = B.at[1:-1].set(0.33333 * (A[:-2] + A[1:-1] + A[2:]))
        A = A.at[1:-1].set(0.33333 * (B[:-2] + B[1:-1] + B[2:]))
    return jnp.sum(A * A) + jnp.sum(B)


def jacobi_2d(A, B):
    for _ in range(2):
        B[1:-1, 1:-1] = 0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1] + A[:-2, 1:-1])
        A[1:-1, 1:-1] = 0.2 * (B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1] + B[:-2, 1:-1])
    return np.sum(A * A) + np.sum(B)


def jacobi_2d_jax(jnp, A, B):
    for _ in range(2):
        B = B.at[1:-1, 1:-1].set(0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1] + A[:-2, 1:-1]))
        A = A.at[1:-1, 1:-1].set(0.2 * (B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1] + B[:-2, 1:-1]))
    return jnp.sum(A * A) + jnp.sum(B)


def heat_3d(A, B):
    for _ in range(2):
        B[1:-1, 1:-1, 1:-1] = (0.125 * (A[2:, 1:-1, 1:-1] - 2.0 * A[1:-1, 1:-1, 1:-1] + A[:-2, 1:-1, 1:-1])
                               + 0.125 * (A[1:-1, 2:, 1:-1] - 2.0 * A[1:-1, 1:-1, 1:-1] + A[1:-1, :-2, 1:-1])
                               + 0.125 * (A[1:-1, 1:-1, 2:] - 2.0 * A[1:-1, 1:-1, 1:-1] + A[1:-1, 1:-1, :-2])
                               + A[1:-1, 1:-1, 1:-1])
        A[1:-1, 1:-1, 1:-1] = (0.125 * (B[2:, 1:-1, 1:-1] - 2.0 * B[1:-1, 1:-1, 1:-1] + B[:-2, 1:-1, 1:-1])
                               + 0.125 * (B[1:-1, 2:, 1:-1] - 2.0 * B[1:-1, 1:-1, 1:-1] + B[1:-1, :-2, 1:-1])
                               + 0.125 * (B[1:-1, 1:-1, 2:] - 2.0 * B[1:-1, 1:-1, 1:-1] + B[1:-1, 1:-1, :-2])
                               + B[1:-1, 1:-1, 1:-1])
    return np.sum(A * A) + np.sum(B * B)


def _heat_step(X):
    c = X[1:-1, 1:-1, 1:-1]
    return (0.125 * (X[2:, 1:-1, 1:-1] - 2.0 * c + X[:-2, 1:-1, 1:-1])
            + 0.125 * (X[1:-1, 2:, 1:-1] - 2.0 * c + X[1:-1, :-2, 1:-1])
            + 0.125 * (X[1:-1, 1:-1, 2:] - 2.0 * c + X[1:-1, 1:-1, :-2]) + c)


def heat_3d_jax(jnp, A, B):
    for _ in range(2):
        B = B.at[1:-1, 1:-1, 1:-1].set(_heat_step(A))
        A = A.at[1:-1, 1:-1, 1:-1].set(_heat_step(B))
    return jnp.sum(A * A) + jnp.sum(B * B)


def seidel_2d(A):
    n = A.shape[0]
    for _ in range(2):
        for i in range(1, n - 1):
            A[i, 1:-1] += (A[i - 1, :-2] + A[i - 1, 1:-1] + A[i - 1, 2:] + A[i, 2:]
                           + A[i + 1, :-2] + A[i + 1, 1:-1] + A[i + 1, 2:])
            for j in range(1, n - 1):
                A[i, j] += A[i, j - 1]
                A[i, j] /= 9.0
    return np.sum(A * A)


def seidel_2d_jax(jnp, A):
    n = A.shape[0]
    for _ in range(2):
        for i in range(1, n - 1):
            A = A.at[i, 1:-1].add(A[i - 1, :-2] + A[i - 1, 1:-1] + A[i - 1, 2:] + A[i, 2:]
                                  + A[i + 1, :-2] + A[i + 1, 1:-1] + A[i + 1, 2:])
            for j in range(1, n - 1):
                A = A.at[i, j].set((A[i, j] + A[i, j - 1]) / 9.0)
    return jnp.sum(A * A)


def fdtd_2d(ex, ey, hz, fict):
    for t in range(fict.shape[0]):
        ey[0, :] = fict[t]
        ey[1:, :] -= 0.5 * (hz[1:, :] - hz[:-1, :])
        ex[:, 1:] -= 0.5 * (hz[:, 1:] - hz[:, :-1])
        hz[:-1, :-1] -= 0.7 * (ex[:-1, 1:] - ex[:-1, :-1] + ey[1:, :-1] - ey[:-1, :-1])
    return np.sum(hz * hz) + np.sum(ex) + np.sum(ey)


def fdtd_2d_jax(jnp, ex, ey, hz, fict):
    for t in range(fict.shape[0]):
        ey = ey.at[0, :].set(fict[t])
        ey = ey.at[1:, :].add(-0.5 * (hz[1:, :] - hz[:-1, :]))
        ex = ex.at[:, 1:].add(-0.5 * (hz[:, 1:] - hz[:, :-1]))
        hz = hz.at[:-1, :-1].add(-0.7 * (ex[:-1, 1:] - ex[:-1, :-1] + ey[1:, :-1] - ey[:-1, :-1]))
    return jnp.sum(hz * hz) + jnp.sum(ex) + jnp.sum(ey)


def _adi_coefficients(n: int, tsteps: int):
    dx = dy = 1.0 / n
    dt = 1.0 / tsteps
    mul1 = 2.0 * dt / (dx * dx)
    mul2 = 1.0 * dt / (dy * dy)
    a, b = -mul1 / 2.0, 1.0 + mul1
    d, e = -mul2 / 2.0, 1.0 + mul2
    return a, b, a, d, e, d


def adi(u):
    """Alternating-direction implicit: a tridiagonal solve along columns, then rows, per time step;
    each solve vectorised over the interior lines as the NPBench port does."""
    n = u.shape[0]
    tsteps = 1
    a, b, c, d, e, f = _adi_coefficients(n, tsteps)
    v = np.zeros_like(u)
    p = np.zeros_like(u)
    q = np.zeros_like(u)
    for _ in range(tsteps):
        v[0, 1:-1] = 1.0
        p[1:-1, 0] = 0.0
        q[1:-1, 0] = v[0, 1:-1]
        for j in range(1, n - 1):
            p[1:-1, j] = -c / (a * p[1:-1, j - 1] + b)
            q[1:-1, j] = (-d * u[j, :-2] + (1.0 + 2.0 * d) * u[j, 1:-1] - f * u[j, 2:]
                          - a * q[1:-1, j - 1]) / (a * p[1:-1, j - 1] + b)
        v[-1, 1:-1] = 1.0
        for j in range(n - 2, 0, -1):
            v[j, 1:-1] = p[1:-1, j] * v[j + 1, 1:-1] + q[1:-1, j]
        u[1:-1, 0] = 1.0
        p[1:-1, 0] = 0.0
        q[1:-1, 0] = u[1:-1, 0]
        for j in range(1, n - 1):
            p[1:-1, j] = -f / (d * p[1:-1, j - 1] + e)
            q[1:-1, j] = (-a * v[:-2, j] + (1.0 + 2.0 * a) * v[1:-1, j] - c * v[2:, j]
                          - d * q[1:-1, j - 1]) / (d * p[1:-1, j - 1] + e)
        u[1:-1, -1] = 1.0
        for j in range(n - 2, 0, -1):
            u[1:-1, j] = p[1:-1, j] * u[1:-1, j + 1] + q[1:-1, j]
    return np.sum(u * u)


def adi_jax(jnp, u):
    n = u.shape[0]
    tsteps = 1
    a, b, c, d, e, f = _adi_coefficients(n, tsteps)
    v = jnp.zeros_like(u)
    p = jnp.zeros_like(u)
    q = jnp.zeros_like(u)
    for _ in range(tsteps):
        v = v.at[0, 1:-1].set(1.0)
        p = p.at[1:-1, 0].set(0.0)
        q = q.at[1:-1, 0].set(v[0, 1:-1])
        for j in range(1, n - 1):
            p = p.at[1:-1, j].set(-c / (a * p[1:-1, j - 1] + b))
            q = q.at[1:-1, j].set((-d * u[j, :-2] + (1.0 + 2.0 * d) * u[j, 1:-1] - f * u[j, 2:]
                                   - a * q[1:-1, j - 1]) / (a * p[1:-1, j - 1] + b))
        v = v.at[-1, 1:-1].set(1.0)
        for j in range(n - 2, 0, -1):
            v = v.at[j, 1:-1].set(p[1:-1, j] * v[j + 1, 1:-1] + q[1:-1, j])
        u = u.at[1:-1, 0].set(1.0)
        p = p.at[1:-1, 0].set(0.0)
        q = q.at[1:-1, 0].set(u[1:-1, 0])
        for j in range(1, n - 1):
            p = p.at[1:-1, j].set(-f / (d * p[1:-1, j - 1] + e))
            q = q.at[1:-1, j].set((-a * v[:-2, j] + (1.0 + 2.0 * a) * v[1:-1, j] - c * v[2:, j]
                                   - d * q[1:-1, j - 1]) / (d * p[1:-1, j - 1] + e))
        u = u.at[1:-1, -1].set(1.0)
        for j in range(n - 2, 0, -1):
            u = u.at[1:-1, j].set(p[1:-1, j] * u[1:-1, j + 1] + q[1:-1, j])
    return jnp.sum(u * u)


# -- image processing and deep learning --------------------------------------------------------------


def _deriche_coefficients(xp, alpha):
    k = (1.0 - xp.exp(-alpha)) ** 2 / (1.0 + 2.0 * alpha * xp.exp(-alpha) - xp.exp(2.0 * alpha))
    a1 = k
    a2 = k * xp.exp(-alpha) * (alpha - 1.0)
    a3 = k * xp.exp(-alpha) * (alpha + 1.0)
    a4 = -k * xp.exp(-2.0 * alpha)
    b1 = 2.0 ** (-alpha)
    b2 = -xp.exp(-2.0 * alpha)
    return a1, a2, a3, a4, b1, b2


def deriche(alpha, img):
    """Deriche edge filter: causal and anti-causal IIR passes along rows, then along columns."""
    h, w = img.shape
    a1, a2, a3, a4, b1, b2 = _deriche_coefficients(np, alpha)
    y1 = np.zeros_like(img)
    y2 = np.zeros_like(img)
    y1[:, 0] = a1 * img[:, 0]
    y1[:, 1] = a1 * img[:, 1] + a2 * img[:, 0] + b1 * y1[:, 0]
    for j in range(2, w):
        y1[:, j] = a1 * img[:, j] + a2 * img[:, j - 1] + b1 * y1[:, j - 1] + b2 * y1[:, j - 2]
    y2[:, -2] = a3 * img[:, -1]
    for j in range(w - 3, -1, -1):
        y2[:, j] = a3 * img[:, j + 1] + a4 * img[:, j + 2] + b1 * y2[:, j + 1] + b2 * y2[:, j + 2]
    out = y1 + y2
    y1[0, :] = a1 * out[0, :]
    y1[1, :] = a1 * out[1, :] + a2 * out[0, :] + b1 * y1[0, :]
    for i in range(2, h):
        y1[i, :] = a1 * out[i, :] + a2 * out[i - 1, :] + b1 * y1[i - 1, :] + b2 * y1[i - 2, :]
    y2[-1, :] = 0.0
    y2[-2, :] = a3 * out[-1, :]
    for i in range(h - 3, -1, -1):
        y2[i, :] = a3 * out[i + 1, :] + a4 * out[i + 2, :] + b1 * y2[i + 1, :] + b2 * y2[i + 2, :]
    out = y1 + y2
    return np.sum(out * out)


def deriche_jax(jnp, alpha, img):
    h, w = img.shape
    a1, a2, a3, a4, b1, b2 = _deriche_coefficients(jnp, alpha)
    y1 = jnp.zeros_like(img)
    y2 = jnp.zeros_like(img)
    y1 = y1.at[:, 0].set(a1 * img[:, 0])
    y1 = y1.at[:, 1].set(a1 * img[:, 1] + a2 * img[:, 0] + b1 * y1[:, 0])
    for j in range(2, w):
        y1 = y1.at[:, j].set(a1 * img[:, j] + a2 * img[:, j - 1] + b1 * y1[:, j - 1] + b2 * y1[:, j - 2])
    y2 = y2.at[:, -2].set(a3 * img[:, -1])
    for j in range(w - 3, -1, -1):
        y2 = y2.at[:, j].set(a3 * img[:, j + 1] + a4 * img[:, j + 2] + b1 * y2[:, j + 1] + b2 * y2[:, j + 2])
    out = y1 + y2
    y1 = y1.at[0, :].set(a1 * out[0, :])
    y1 = y1.at[1, :].set(a1 * out[1, :] + a2 * out[0, :] + b1 * y1[0, :])
    for i in range(2, h):
        y1 = y1.at[i, :].set(a1 * out[i, :] + a2 * out[i - 1, :] + b1 * y1[i - 1, :] + b2 * y1[i - 2, :])
    y2 = y2.at[-1, :].set(0.0)
    y2 = y2.at[-2, :].set(a3 * out[-1, :])
    for i in range(h - 3, -1, -1):
        y2 = y2.at[i, :].set(a3 * out[i + 1, :] + a4 * out[i + 2, :] + b1 * y2[i + 1, :] + b2 * y2[i + 2, :])
    out = y1 + y2
    return jnp.sum(out * out)


def conv2d(x, weights, bias):
    """NHWC 'valid' convolution with a KxK kernel plus bias, then tanh."""
    k = weights.shape[0]
    n, h, w, _ = x.shape
    out = np.empty((n, h - k + 1, w - k + 1, weights.shape[3]), dtype=x.dtype)
    for i in range(h - k + 1):
        for j in range(w - k + 1):
            out[:, i, j, :] = np.sum(x[:, i:i + k, j:j + k, :, None] * weights[None, :, :, :], axis=(1, 2, 3))
    return np.sum(np.tanh(out + bias))


def conv2d_jax(jnp, x, weights, bias):
    k = weights.shape[0]
    n, h, w, _ = x.shape
    out = jnp.zeros((n, h - k + 1, w - k + 1, weights.shape[3]), dtype=x.dtype)
    for i in range(h - k + 1):
        for j in range(w - k + 1):
            out = out.at[:, i, j, :].set(jnp.sum(x[:, i:i + k, j:j + k, :, None] * weights[None], axis=(1, 2, 3)))
    return jnp.sum(jnp.tanh(out + bias))


def softmax(x):
    tmp_max = np.max(x, axis=-1, keepdims=True)
    tmp_out = np.exp(x - tmp_max)
    tmp_sum = np.sum(tmp_out, axis=-1, keepdims=True)
    out = tmp_out / tmp_sum
    return np.sum(out * out)


def softmax_jax(jnp, x):
    e = jnp.exp(x - jnp.max(x, axis=-1, keepdims=True))
    out = e / jnp.sum(e, axis=-1, keepdims=True)
    return jnp.sum(out * out)


def mlp(x, w1, b1, w2, b2, w3, b3):
    h = np.maximum(x @ w1 + b1, 0.0)
    h = np.maximum(h @ w2 + b2, 0.0)
    logits = h @ w3 + b3
    e = np.exp(logits - np.max(logits, axis=-1, keepdims=True))
    p = e / np.sum(e, axis=-1, keepdims=True)
    return np.sum(p * p)


def mlp_jax(jnp, x, w1, b1, w2, b2, w3, b3):
    h = jnp.maximum(x @ w1 + b1, 0.0)
    h = jnp.maximum(h @ w2 + b2, 0.0)
    logits = h @ w3 + b3
    e = jnp.exp(logits - jnp.max(logits, axis=-1, keepdims=True))
    p = e / jnp.sum(e, axis=-1, keepdims=True)
    return jnp.sum(p * p)


def arc_distance(theta_1, phi_1, theta_2, phi_2):
    temp = np.sin((theta_2 - theta_1) / 2) ** 2 + np.cos(theta_1) * np.cos(theta_2) * np.sin((phi_2 - phi_1) / 2) ** 2
    distance_matrix = 2 * np.arctan2(np.sqrt(temp), np.sqrt(1 - temp))
    return np.sum(distance_matrix)


def arc_distance_jax(jnp, theta_1, phi_1, theta_2, phi_2):
    temp = (jnp.sin((theta_2 - theta_1) / 2) ** 2
            + jnp.cos(theta_1) * jnp.cos(theta_2) * jnp.sin((phi_2 - phi_1) / 2) ** 2)
    return jnp.sum(2 * jnp.arctan2(jnp.sqrt(temp), jnp.sqrt(1 - temp)))


def go_fast(a):
    trace = 0.0
    for i in range(a.shape[0]):
        trace += np.tanh(a[i, i])
    return np.sum((a + trace) ** 2)


def go_fast_jax(jnp, a):
    return jnp.sum((a + jnp.sum(jnp.tanh(jnp.diagonal(a)))) ** 2)


# -- dynamic programming and graphs: non-smooth --------------------------------------------------------


def floyd_warshall(path):
    for k in range(path.shape[0]):
        path[:] = np.minimum(path, path[:, k, None] + path[None, k, :])
    return np.sum(path)


def floyd_warshall_npbench(path):
    """As the NPBench port writes the relaxation: np.add.outer."""
    for k in range(path.shape[0]):
        path[:] = np.minimum(path, np.add.outer(path[:, k], path[k, :]))
    return np.sum(path)


def floyd_warshall_jax(jnp, path):
    for k in range(path.shape[0]):
        path = jnp.minimum(path, path[:, k, None] + path[None, k, :])
    return jnp.sum(path)


def nussinov(w):
    """Nussinov-like folding score: the pairing bonus of (i, j) is a float weight w[i, j]
    instead of a base-pair match, so the table is differentiable almost everywhere."""
    n = w.shape[0]
    table = np.zeros_like(w)
    for i in range(n - 1, -1, -1):
        for j in range(i + 1, n):
            table[i, j] = np.maximum(table[i, j], table[i, j - 1])
            if i + 1 < n:
                table[i, j] = np.maximum(table[i, j], table[i + 1, j])
                bonus = w[i, j] if i < j - 1 else 0.0
                table[i, j] = np.maximum(table[i, j], table[i + 1, j - 1] + bonus)
            for k in range(i + 1, j):
                table[i, j] = np.maximum(table[i, j], table[i, k] + table[k + 1, j])
    return table[0, n - 1]


def nussinov_builtin_max(w):
    """The same recursion with Python's max, as the NPBench port writes it: a branch on traced values."""
    n = w.shape[0]
    table = np.zeros_like(w)
    for i in range(n - 1, -1, -1):
        for j in range(i + 1, n):
            table[i, j] = max(table[i, j], table[i, j - 1])  # refused
    return table[0, n - 1]


def nussinov_jax(jnp, w):
    n = w.shape[0]
    table = jnp.zeros_like(w)
    for i in range(n - 1, -1, -1):
        for j in range(i + 1, n):
            table = table.at[i, j].set(jnp.maximum(table[i, j], table[i, j - 1]))
            if i + 1 < n:
                table = table.at[i, j].set(jnp.maximum(table[i, j], table[i + 1, j]))
                bonus = w[i, j] if i < j - 1 else 0.0
                table = table.at[i, j].set(jnp.maximum(table[i, j], table[i + 1, j - 1] + bonus))
            for k in range(i + 1, j):
                table = table.at[i, j].set(jnp.maximum(table[i, j], table[i, k] + table[k + 1, j]))
    return table[0, n - 1]


# -- more NPBench programs: views, gathers, masks -----------------------------------------------------


def doitgen_view(A, C4):
    """doitgen with the update written through a view of each plane: numpy changes A itself."""
    for r in range(A.shape[0]):
        plane = A[r]
        plane @= C4
    return np.sum(A * A)


def ludcmp(A, b):
    """LU decomposition, then forward substitution (unit lower) and back substitution (upper)."""
    n = A.shape[0]
    x = np.zeros_like(b)
    y = np.zeros_like(b)
    for i in range(n):
        for j in range(i):
            A[i, j] -= A[i, :j] @ A[:j, j]
            A[i, j] /= A[j, j]
        A[i, i:] -= A[i, :i] @ A[:i, i:]
    for i in range(n):
        y[i] = b[i] - A[i, :i] @ y[:i]
    for i in range(n - 1, -1, -1):
        x[i] = (y[i] - A[i, i + 1:] @ x[i + 1:]) / A[i, i]
    return np.sum(x * x)


def ludcmp_jax(jnp, A, b):
    n = A.shape[0]
    for i in range(n):
        for j in range(i):
            A = A.at[i, j].set((A[i, j] - A[i, :j] @ A[:j, j]) / A[j, j])
        A = A.at[i, i:].add(-(A[i, :i] @ A[:i, i:]))
    y = jnp.zeros_like(b)
    x = jnp.zeros_like(b)
    for i in range(n):
        y = y.at[i].set(b[i] - A[i, :i] @ y[:i])
    for i in range(n - 1, -1, -1):
        x = x.at[i].set((y[i] - A[i, i + 1:] @ x[i + 1:]) / A[i, i])
    return jnp.sum(x * x)


def hdiff(in_field, coeff):
    """Horizontal diffusion (COSMO): a Laplacian, fluxes limited where they would sharpen a gradient."""
    I, J, K = coeff.shape
    out_field = np.empty_like(coeff)
    lap_field = 4.0 * in_field[1:I + 3, 1:J + 3, :] - (
        in_field[2:I + 4, 1:J + 3, :] + in_field[0:I + 2, 1:J + 3, :]
        + in_field[1:I + 3, 2:J + 4, :] + in_field[1:I + 3, 0:J + 2, :])
    res = lap_field[1:, 1:J + 1, :] - lap_field[:-1, 1:J + 1, :]
    flx_field = np.where(res * (in_field[2:I + 3, 2:J + 2, :] - in_field[1:I + 2, 2:J + 2, :]) > 0, 0, res)
    res = lap_field[1:I + 1, 1:, :] - lap_field[1:I + 1, :-1, :]
    fly_field = np.where(res * (in_field[2:I + 2, 2:J + 3, :] - in_field[2:I + 2, 1:J + 2, :]) > 0, 0, res)
    out_field[:, :, :] = in_field[2:I + 2, 2:J + 2, :] - coeff * (
        flx_field[1:, :, :] - flx_field[:-1, :, :] + fly_field[:, 1:, :] - fly_field[:, :-1, :])
    return np.sum(out_field * out_field)


def hdiff_jax(jnp, in_field, coeff):
    I, J, K = coeff.shape
    lap = 4.0 * in_field[1:I + 3, 1:J + 3] - (in_field[2:I + 4, 1:J + 3] + in_field[0:I + 2, 1:J + 3]
                                              + in_field[1:I + 3, 2:J + 4] + in_field[1:I + 3, 0:J + 2])
    res = lap[1:, 1:J + 1] - lap[:-1, 1:J + 1]
    flx = jnp.where(res * (in_field[2:I + 3, 2:J + 2] - in_field[1:I + 2, 2:J + 2]) > 0, 0, res)
    res = lap[1:I + 1, 1:] - lap[1:I + 1, :-1]
    fly = jnp.where(res * (in_field[2:I + 2, 2:J + 3] - in_field[2:I + 2, 1:J + 2]) > 0, 0, res)
    out = in_field[2:I + 2, 2:J + 2] - coeff * (flx[1:] - flx[:-1] + fly[:, 1:] - fly[:, :-1])
    return jnp.sum(out * out)


def _nbody_acceleration(xp, pos, mass, softening):
    x, y, z = pos[:, 0:1], pos[:, 1:2], pos[:, 2:3]
    dx, dy, dz = x.T - x, y.T - y, z.T - z
    inv_r3 = (dx ** 2 + dy ** 2 + dz ** 2 + softening ** 2) ** (-1.5)
    return xp.concatenate([(dx * inv_r3) @ mass, (dy * inv_r3) @ mass, (dz * inv_r3) @ mass], axis=1)


def nbody(pos, vel, mass):
    """Leapfrog N-body steps with softened gravity; the loss is kinetic energy plus spread."""
    dt, softening = 0.05, 0.3
    acc = _nbody_acceleration(np, pos, mass, softening)
    for _ in range(2):
        vel += acc * dt / 2.0
        pos += vel * dt
        acc = _nbody_acceleration(np, pos, mass, softening)
        vel += acc * dt / 2.0
    return 0.5 * np.sum(mass * vel ** 2) + np.sum(pos ** 2)


def nbody_npbench(pos, vel, mass):
    """The acceleration stacked with np.hstack, as the NPBench port writes it."""
    x, y, z = pos[:, 0:1], pos[:, 1:2], pos[:, 2:3]
    dx, dy, dz = x.T - x, y.T - y, z.T - z
    inv_r3 = (dx ** 2 + dy ** 2 + dz ** 2 + 0.09) ** (-1.5)
    acc = np.hstack(((dx * inv_r3) @ mass, (dy * inv_r3) @ mass, (dz * inv_r3) @ mass))
    return np.sum(acc * vel)


def nbody_npbench_jax(jnp, pos, vel, mass):
    x, y, z = pos[:, 0:1], pos[:, 1:2], pos[:, 2:3]
    dx, dy, dz = x.T - x, y.T - y, z.T - z
    inv_r3 = (dx ** 2 + dy ** 2 + dz ** 2 + 0.09) ** (-1.5)
    acc = jnp.hstack(((dx * inv_r3) @ mass, (dy * inv_r3) @ mass, (dz * inv_r3) @ mass))
    return jnp.sum(acc * vel)


def nbody_jax(jnp, pos, vel, mass):
    dt, softening = 0.05, 0.3
    acc = _nbody_acceleration(jnp, pos, mass, softening)
    for _ in range(2):
        vel = vel + acc * dt / 2.0
        pos = pos + vel * dt
        acc = _nbody_acceleration(jnp, pos, mass, softening)
        vel = vel + acc * dt / 2.0
    return 0.5 * jnp.sum(mass * vel ** 2) + jnp.sum(pos ** 2)


def cnn_pool(x, w, b):
    """A LeNet-style block: valid 3x3 convolution, ReLU, 2x2 max pooling through a reshape."""
    n, h, wd, _ = x.shape
    k = w.shape[0]
    out = np.zeros((n, h - k + 1, wd - k + 1, w.shape[3]), dtype=x.dtype)
    for i in range(k):
        for j in range(k):
            out += x[:, i:i + h - k + 1, j:j + wd - k + 1, :] @ w[i, j]
    out = np.maximum(out + b, 0.0)
    pooled = np.max(out.reshape(n, (h - k + 1) // 2, 2, (wd - k + 1) // 2, 2, w.shape[3]), axis=(2, 4))
    return np.sum(pooled * pooled)


def cnn_pool_jax(jnp, x, w, b):
    n, h, wd, _ = x.shape
    k = w.shape[0]
    out = jnp.zeros((n, h - k + 1, wd - k + 1, w.shape[3]), dtype=x.dtype)
    for i in range(k):
        for j in range(k):
            out = out + x[:, i:i + h - k + 1, j:j + wd - k + 1, :] @ w[i, j]
    out = jnp.maximum(out + b, 0.0)
    pooled = jnp.max(out.reshape(n, (h - k + 1) // 2, 2, (wd - k + 1) // 2, 2, w.shape[3]), axis=(2, 4))
    return jnp.sum(pooled * pooled)


def azimint(data, radius):
    """Azimuthal integration: the mean of the data in each radial bin, bins masked with np.where."""
    npt = 4
    rmax = np.max(radius)
    res = np.zeros(npt, dtype=data.dtype)
    for i in range(npt):
        r1 = rmax * i / npt
        r2 = rmax * (i + 1) / npt
        mask = np.logical_and(r1 <= radius, radius < r2)
        res[i] = np.sum(np.where(mask, data, 0.0)) / np.maximum(np.sum(np.where(mask, 1.0, 0.0)), 1.0)
    return np.sum(res * res)


def azimint_npbench(data, radius):
    """As the NPBench port writes it: a boolean-mask gather."""
    npt = 4
    rmax = radius.max()
    res = np.zeros(npt, dtype=data.dtype)
    for i in range(npt):
        r1 = rmax * i / npt
        r2 = rmax * (i + 1) / npt
        mask_r12 = np.logical_and((r1 <= radius), (radius < r2))
        values_r12 = data[mask_r12]
        res[i] = values_r12.mean()
    return np.sum(res * res)


def azimint_npbench_jax(jnp, data, radius):
    """The masked mean as numpy computes it: sum over the bin / count of the bin."""
    return _binned_means_jax(jnp, data, radius, least_count=0.0)


def azimint_jax(jnp, data, radius):
    return _binned_means_jax(jnp, data, radius, least_count=1.0)


def _binned_means_jax(jnp, data, radius, least_count):
    """Sum of squares of ``data``'s means over 4 radial bins, each count at least ``least_count``."""
    npt = 4
    rmax = jnp.max(radius)
    res = jnp.zeros(npt, dtype=data.dtype)
    for i in range(npt):
        mask = jnp.logical_and(rmax * i / npt <= radius, radius < rmax * (i + 1) / npt)
        count = jnp.maximum(jnp.sum(mask.astype(data.dtype)), least_count)
        res = res.at[i].set(jnp.sum(jnp.where(mask, data, 0.0)) / count)
    return jnp.sum(res * res)


def spmv_coo(rows, cols, vals, x):
    """Sparse matrix-vector product in coordinate form: a gather of x, a scatter-add into y."""
    y = np.zeros(x.shape[0], dtype=x.dtype)
    np.add.at(y, rows, vals * x[cols])
    return np.sum(np.sin(y))


def spmv_coo_jax(jnp, rows, cols, vals, x):
    y = jnp.zeros(x.shape[0], dtype=x.dtype).at[rows].add(vals * x[cols])
    return jnp.sum(jnp.sin(y))


def spmv_csr(A_row, A_col, A_val, x):
    """CSR as the NPBench port writes it: each row's slice bounds read from A_row."""
    y = np.empty(A_row.size - 1, dtype=A_val.dtype)
    for i in range(A_row.size - 1):
        cols = A_col[A_row[i]:A_row[i + 1]]  # refused
        y[i] = A_val[A_row[i]:A_row[i + 1]] @ x[cols]
    return np.sum(y)


def _sparse(rng):
    rows = np.array([0, 0, 1, 2, 2, 2, 4, 5, 5], np.int32)
    cols = np.array([1, 3, 0, 2, 5, 1, 4, 0, 5], np.int32)
    return {"rows": rows, "cols": cols, "A_row": np.array([0, 2, 3, 6, 6, 7, 9], np.int32), "A_col": cols}


# -- the registry --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Refusal:
    """symdiff must refuse the kernel: ``error`` (a symdiff error type, by name) whose
    message names the body's line marked ``# refused`` and contains ``says``."""
    error: str
    says: str


@dataclass(frozen=True, eq=False)
class Kernel:
    name: str
    body: Callable                         # the numpy program symdiff traces
    jax: Callable | None                   # jax(jnp, *args): the oracle's twin (None where refused)
    shapes: dict[str, tuple]               # argument name -> shape (() for a scalar), in order
    make: Callable | None = None           # make(rng) -> {name: array}: conditioned inputs, all index arguments
    refused: Refusal | None = None
    xfail: dict[str, str] = field(default_factory=dict)   # device ("numpy", "cpu", "vulkan") -> reason
    indices: tuple[str, ...] = ()          # int32 (index) arguments: never differentiated

    @property
    def floats(self) -> list[str]:
        """The arguments differentiated: every float one."""
        return [n for n in self.shapes if n not in self.indices]

    def inputs(self, seed: int = 10) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        made = self.make(rng) if self.make else {}
        return {n: np.asarray(made[n] if n in made else rng.uniform(-1.0, 1.0, s),
                              np.int32 if n in self.indices else np.float64)
                for n, s in self.shapes.items()}


def _scalars(**values):
    return lambda rng: {n: np.array(v) for n, v in values.items()}


def _spd(n: int):
    def make(rng):
        m = rng.uniform(-1.0, 1.0, (n, n))
        return {"A": m @ m.T + n * np.eye(n)}
    return make


def _diagonally_dominant(name: str, n: int):
    def make(rng):
        return {name: rng.uniform(-1.0, 1.0, (n, n)) + n * np.eye(n)}
    return make


def _lower_solve(rng):
    return {"L": rng.uniform(-1.0, 1.0, (5, 5)) * 0.3 + 2.0 * np.eye(5)}


def _geo(rng):
    return {"theta_1": rng.uniform(0.0, 1.2, 8), "phi_1": rng.uniform(0.0, 3.0, 8),
            "theta_2": rng.uniform(0.0, 1.2, 8), "phi_2": rng.uniform(0.0, 3.0, 8)}


def _merge(*makers):
    return lambda rng: {k: v for m in makers for k, v in m(rng).items()}


KERNELS: list[Kernel] = [
    Kernel("gemm", gemm, gemm_jax, {"alpha": (), "beta": (), "C": (4, 5), "A": (4, 3), "B": (3, 5)},
           _scalars(alpha=1.5, beta=1.2)),
    Kernel("gemver", gemver, gemver_jax,
           {"alpha": (), "beta": (), "A": (5, 5), "u1": (5,), "v1": (5,), "u2": (5,), "v2": (5,),
            "w": (5,), "x": (5,), "y": (5,), "z": (5,)}, _scalars(alpha=1.5, beta=1.2)),
    Kernel("gesummv", gesummv, gesummv_jax, {"alpha": (), "beta": (), "A": (5, 5), "B": (5, 5), "x": (5,)},
           _scalars(alpha=1.5, beta=1.2)),
    Kernel("mvt", mvt, mvt_jax, {"x1": (5,), "x2": (5,), "y_1": (5,), "y_2": (5,), "A": (5, 5)}),
    Kernel("syrk", syrk, syrk_jax, {"alpha": (), "beta": (), "C": (4, 4), "A": (4, 3)},
           _scalars(alpha=1.5, beta=1.2)),
    Kernel("syr2k", syr2k, syr2k_jax, {"alpha": (), "beta": (), "C": (4, 4), "A": (4, 3), "B": (4, 3)},
           _scalars(alpha=1.5, beta=1.2)),
    Kernel("trmm", trmm, trmm_jax, {"alpha": (), "A": (4, 4), "B": (4, 3)}, _scalars(alpha=1.5)),
    Kernel("symm", symm, symm_jax, {"alpha": (), "beta": (), "C": (4, 3), "A": (4, 4), "B": (4, 3)},
           _scalars(alpha=1.5, beta=1.2)),
    Kernel("atax", atax, atax_jax, {"A": (5, 4), "x": (4,)}),
    Kernel("bicg", bicg, bicg_jax, {"A": (5, 4), "p": (4,), "r": (5,)}),
    Kernel("2mm", k2mm, k2mm_jax,
           {"alpha": (), "beta": (), "A": (4, 3), "B": (3, 5), "C": (5, 4), "D": (4, 4)},
           _scalars(alpha=1.5, beta=1.2)),
    Kernel("3mm", k3mm, k3mm_jax, {"A": (4, 3), "B": (3, 5), "C": (5, 4), "D": (4, 4)}),
    Kernel("doitgen", doitgen, doitgen_jax, {"A": (3, 2, 4), "C4": (4, 4)}),
    Kernel("lu", lu, lu_jax, {"A": (4, 4)}, _diagonally_dominant("A", 4)),
    Kernel("cholesky", cholesky, cholesky_jax, {"A": (4, 4)}, _spd(4)),
    Kernel("trisolv", trisolv, trisolv_jax, {"L": (5, 5), "x": (5,), "b": (5,)}, _lower_solve),
    Kernel("durbin", durbin, durbin_jax, {"r": (5,)}, lambda rng: {"r": rng.uniform(-0.3, 0.3, 5)}),
    Kernel("durbin_sliced", durbin_sliced, durbin_jax, {"r": (5,)}, lambda rng: {"r": rng.uniform(-0.3, 0.3, 5)}),
    Kernel("gramschmidt", gramschmidt, gramschmidt_jax, {"A": (5, 3)}),
    Kernel("covariance", covariance, covariance_jax, {"data": (6, 4)}),
    Kernel("correlation", correlation, correlation_jax, {"data": (6, 4)}),
    Kernel("correlation_npbench", correlation_npbench, correlation_npbench_jax, {"data": (6, 4)}),
    Kernel("jacobi_1d", jacobi_1d, jacobi_1d_jax, {"A": (8,), "B": (8,)}),
    Kernel("jacobi_2d", jacobi_2d, jacobi_2d_jax, {"A": (5, 5), "B": (5, 5)}),
    Kernel("heat_3d", heat_3d, heat_3d_jax, {"A": (4, 4, 4), "B": (4, 4, 4)}),
    Kernel("seidel_2d", seidel_2d, seidel_2d_jax, {"A": (4, 5)}),
    Kernel("fdtd_2d", fdtd_2d, fdtd_2d_jax, {"ex": (4, 5), "ey": (4, 5), "hz": (4, 5), "fict": (2,)}),
    Kernel("adi", adi, adi_jax, {"u": (5, 5)}),
    Kernel("deriche", deriche, deriche_jax, {"alpha": (), "img": (4, 5)}, _scalars(alpha=0.25)),
    Kernel("conv2d", conv2d, conv2d_jax, {"x": (1, 5, 5, 2), "weights": (3, 3, 2, 3), "bias": (3,)}),
    Kernel("softmax", softmax, softmax_jax, {"x": (2, 3, 4, 4)}),
    Kernel("mlp", mlp, mlp_jax, {"x": (4, 6), "w1": (6, 5), "b1": (5,), "w2": (5, 5), "b2": (5,),
                                 "w3": (5, 3), "b3": (3,)}),
    Kernel("arc_distance", arc_distance, arc_distance_jax,
           {"theta_1": (8,), "phi_1": (8,), "theta_2": (8,), "phi_2": (8,)}, _geo),
    Kernel("go_fast", go_fast, go_fast_jax, {"a": (5, 5)}),
    Kernel("floyd_warshall", floyd_warshall, floyd_warshall_jax, {"path": (5, 5)},
           lambda rng: {"path": rng.uniform(0.1, 2.0, (5, 5))}),
    Kernel("floyd_warshall_npbench", floyd_warshall_npbench, floyd_warshall_jax, {"path": (5, 5)},
           lambda rng: {"path": rng.uniform(0.1, 2.0, (5, 5))}),
    Kernel("nussinov", nussinov, nussinov_jax, {"w": (5, 5)}, lambda rng: {"w": rng.uniform(0.1, 1.0, (5, 5))}),
    Kernel("nussinov_builtin_max", nussinov_builtin_max, None, {"w": (6, 6)},
           refused=Refusal("TracedBranchError", "np.where")),
    Kernel("doitgen_view", doitgen_view, doitgen_jax, {"A": (3, 2, 4), "C4": (4, 4)}),
    Kernel("ludcmp", ludcmp, ludcmp_jax, {"A": (4, 4), "b": (4,)}, _diagonally_dominant("A", 4)),
    Kernel("hdiff", hdiff, hdiff_jax, {"in_field": (7, 7, 2), "coeff": (3, 3, 2)}),
    Kernel("nbody", nbody, nbody_jax, {"pos": (5, 3), "vel": (5, 3), "mass": (5, 1)},
           lambda rng: {"mass": rng.uniform(0.5, 1.5, (5, 1))}),
    Kernel("nbody_npbench", nbody_npbench, nbody_npbench_jax, {"pos": (5, 3), "vel": (5, 3), "mass": (5, 1)},
           lambda rng: {"mass": rng.uniform(0.5, 1.5, (5, 1))}),
    Kernel("cnn_pool", cnn_pool, cnn_pool_jax, {"x": (1, 6, 6, 2), "w": (3, 3, 2, 3), "b": (3,)}),
    Kernel("azimint", azimint, azimint_jax, {"data": (12,), "radius": (12,)},
           lambda rng: {"radius": rng.uniform(0.0, 1.0, 12)}),
    Kernel("azimint_npbench", azimint_npbench, azimint_npbench_jax, {"data": (12,), "radius": (12,)},
           lambda rng: {"radius": rng.uniform(0.0, 1.0, 12)}),
    Kernel("spmv_coo", spmv_coo, spmv_coo_jax, {"rows": (9,), "cols": (9,), "vals": (9,), "x": (6,)}, _sparse,
           indices=("rows", "cols")),
    Kernel("spmv_csr", spmv_csr, None, {"A_row": (7,), "A_col": (9,), "A_val": (9,), "x": (6,)}, _sparse,
           refused=Refusal("UnsupportedOperationError", "slice bounds"), indices=("A_row", "A_col")),
]
