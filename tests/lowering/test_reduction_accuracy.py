"""float32 sums are rounded once per stage however long (``kernels.writer.WIDE_ACCUMULATORS``):
the places a sum runs (a two-stage reduction, one thread per output row, a row
kernel) on every device, against float64, and the hardening issue's program
against JAX float32's own error.  ``bench/reduction_accuracy.py`` measures the
same up to 2**28 elements.

Before the wide accumulators (float32 accumulators over 256-8192 points per
thread) every test here failed on cpu and vulkan: the 2**20 sum was off by
1.5e-7 and 8.6e-7 (bound 6e-8), the 4096 row sums by 5.4e-8 and 2.2e-7
(bound 3e-8), the row log-sum-exp gradient 6x JAX float32's error, and the
issue program's gradient at the argmax (``1 - sum(softmax)``, 0 in exact
arithmetic) by 4U and 8U."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import symdiff as sd

jax.config.update("jax_enable_x64", True)

U = 2.0 ** -24  # float32's unit roundoff: half an ulp of 1
N = sd.symbol("N")
R = sd.symbol("R")


def rel(a, ref) -> float:
    a, ref = np.asarray(a, np.float64), np.asarray(ref, np.float64)
    return float(np.linalg.norm((a - ref).ravel()) / np.linalg.norm(ref.ravel()))


@functools.lru_cache(maxsize=None)
def jax_results(fn, x_key: tuple, dtype) -> tuple[np.ndarray, np.ndarray]:
    """JAX's value and gradient (of the sum, for a non-scalar output) of ``fn``
    at ``inputs(*x_key)`` in ``dtype``, once per session for all devices."""
    x = jnp.asarray(inputs(*x_key), dtype)
    value = np.asarray(jax.jit(lambda a: fn(jnp, a))(x))
    return value, np.asarray(jax.jit(jax.grad(lambda a: jnp.sum(fn(jnp, a))))(x))


def inputs(shape: tuple, seed: int, normal: bool) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape, dtype=np.float32) if normal else rng.random(shape, dtype=np.float32)
    x[x == 0] = 0.5  # abs'(0) is a convention (JAX: 1), not what these tests are about
    return x


@functools.lru_cache(maxsize=None)
def program(fn, shape):
    def f(x: sd.f32[shape]):
        return fn(np, x)
    return sd.differentiable_program(f)


# (fn, shape, bound on the relative error in units of U): a sum rounded once is within U/2 of
# the exact one; the partial sums of a two-stage reduction are rounded once more (U in all)
SUMS = {
    "two_stage": (lambda xp, x: xp.sum(x), (1 << 20,), 1.0),
    "thread_per_row": (lambda xp, x: xp.sum(x, axis=1), (4096, 256), 0.5),
}


@pytest.mark.parametrize("case", SUMS)
def test_sums_are_rounded_once(case, device):
    fn, shape, units = SUMS[case]
    key = (shape, 0, False)  # positive: no cancellation
    got = program(fn, (R, N) if len(shape) == 2 else N)(inputs(*key), device=device)
    want = jax_results(fn, key, np.float64)[0]
    error = rel(got, want)
    assert error <= units * U * 1.01, f"{case} on {device}: {error:.2e}"
    assert error <= 10 * max(rel(jax_results(fn, key, np.float32)[0], want), U / 2)


def row_lse(xp, x):
    m = xp.max(x, axis=1, keepdims=True)
    return xp.sum(xp.log(xp.sum(xp.exp(x - m), axis=1)) + m[:, 0])


def test_row_log_sum_exp_gradient_as_accurate_as_jax(device):
    """Rows of 256 in a row kernel.  Each row's argmax gets 1 - sum(softmax),
    0 only if that sum rounds to exactly 1: exactly rounded sums miss as often
    as JAX does (by the rounding of 1 / sum), float32 ones 6x more (measured)."""
    key = ((4096, 256), 1, True)
    _, grads = program(row_lse, (R, N)).value_and_grad(inputs(*key), device=device)
    want = jax_results(row_lse, key, np.float64)[1]
    assert rel(grads["x"], want) <= 2 * rel(jax_results(row_lse, key, np.float32)[1], want)


def issue10(xp, x):
    m = xp.max(x)
    return xp.log(xp.sum(xp.exp(x - m))) + m + xp.mean(xp.log1p(xp.exp(-xp.abs(x))) + xp.maximum(x, 0))


def test_issue_program_at_scale(device):
    """The hardening issue's program at 2**20.  At the argmax the gradient's
    max term is 1 - sum(softmax), 0 in exact arithmetic: exactly rounded sums
    leave at most the rounding of 1 / sum (that sum is 1 or a float32 step
    away: an error of 0, U or 2U, as in JAX); elsewhere the error is within
    10x of JAX float32's."""
    key = ((1 << 20,), 2, True)
    x = inputs(*key)
    value, grads = program(issue10, N).value_and_grad(x, device=device)
    want_value, want = jax_results(issue10, key, np.float64)
    jax_value, jax_grad = jax_results(issue10, key, np.float32)
    assert rel(value, want_value) <= 10 * max(rel(jax_value, want_value), U)
    g, top = grads["x"].astype(np.float64), int(np.argmax(x))
    assert abs(g[top] - want[top]) <= 2 * U * 1.01, f"argmax on {device}: {g[top] - want[top]:.2e}"
    rest, want_rest = np.delete(g, top), np.delete(want, top)
    assert rel(rest, want_rest) <= 10 * rel(np.delete(jax_grad, top), want_rest)
