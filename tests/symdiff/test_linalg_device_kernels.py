"""Programs whose np.linalg nodes run as device kernels
(lowering.library_kernels.linalg): no host step, value and gradient against
JAX float64, over sizes 1-64 and batches, on the CPU device and lavapipe.  The
kernels alone against LAPACK: tests/lowering/test_linalg_kernels.py."""
from __future__ import annotations

import numpy as np
import pytest

import symdiff as sd
from linalg_oracle import general, spd

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy
rng = np.random.default_rng(17)
B, N = sd.symbol("B"), sd.symbol("N")


def full(xp, a, s, b):
    """solve (its gradient: a solve with a transposed), cholesky (two upper triangular solves),
    inv, det and qr (a triangular solve), all float64 without transcendentals (lavapipe's double
    exp/log are wrong)."""
    x = xp.linalg.solve(a, b)
    chol = xp.linalg.cholesky(s)
    q, r = xp.linalg.qr(s - a)
    return xp.sum(x * x) + xp.sum(chol * chol * chol) + xp.sum(xp.linalg.inv(a) * a[..., :1, :]) \
        + xp.sum(xp.linalg.det(a) ** 2) + xp.sum(q * r)


def spectral(xp, a, s, b):
    """eigvalsh and the singular values (the Jacobi kernels, n <= 16): gradients that do not depend
    on the vectors' signs."""
    return xp.sum(xp.linalg.eigvalsh(s) ** 2) + xp.sum(xp.linalg.svd(a, compute_uv=False) * b[:, :1].T)


def solve_only(xp, a, s, b):
    """The CPU device's check: one kernel to compile with g++ (the CPU device's kernels alone:
    tests/lowering/test_linalg_kernels.py)."""
    x = xp.linalg.solve(a + s, b)
    return xp.sum(x * x)


LOSSES = {"full": full, "spectral": spectral, "solve_only": solve_only}
# (device, loss, batch, n): 1 and 64 (float64 past groupshared memory) batched on lavapipe
CASES = [("vulkan", "full", 1, 1), ("vulkan", "full", 2, 64), ("vulkan", "spectral", 3, 6),
         ("cpu", "solve_only", 3, 5)]


@pytest.fixture(scope="module")
def programs():
    made = {}
    for name, fn in LOSSES.items():
        def f(a: sd.f64[B, N, N], s: sd.f64[B, N, N], b: sd.f64[N, 2], fn=fn):
            return fn(np, a, s, b)
        made[name] = sd.differentiable_program(f)
    return made


@pytest.mark.parametrize("device, name, batch, n", [pytest.param(*c, marks=[pytest.mark.vulkan] if c[0] == "vulkan"
                                                                 else [], id=f"{c[0]}-{c[1]}-{c[2]}x{c[3]}")
                                                    for c in CASES])
def test_value_and_grad_on_device_kernels(programs, device, name, batch, n):
    if device not in sd.available_devices():
        pytest.skip(f"no {device} device here")
    program = programs[name]
    a, s, b = general(rng, batch, n, n), spd(rng, batch, n, n), rng.normal(size=(n, 2))
    value, grads = program.value_and_grad(a, s, b, device=device)
    want, want_grads = jax.jit(jax.value_and_grad(lambda *xs: LOSSES[name](jnp, *xs), argnums=(0, 1, 2)))(a, s, b)
    np.testing.assert_allclose(value, want, rtol=1e-9)
    for arg, w in zip("asb", want_grads):
        np.testing.assert_allclose(grads[arg], np.asarray(w), rtol=1e-8, atol=1e-10, err_msg=arg)
    stats = [st for st in program.stats().values() if st["device"] == device and "host_steps" in st]
    assert stats and all(st["host_steps"] == 0 for st in stats) and any(st["library_kernels"] for st in stats)


def test_past_the_workgroup_size_the_node_is_a_host_step():
    f = sd.differentiable_program(lambda a: np.linalg.inv(a))   # no compiled piece: nothing to wait for
    a = general(rng, 65, 65)
    np.testing.assert_allclose(f(a, device="cpu"), np.linalg.inv(a), rtol=1e-10)
    (stats,) = [st for st in f.stats().values() if st["device"] == "cpu"]
    assert stats["host_steps"] == 1 and stats["library_kernels"] == 0
