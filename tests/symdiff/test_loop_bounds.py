"""``sd.fori_loop`` bounds given as size symbols (``sd.symbol``), bound by the arguments' shapes at
each call: checked against ``jax.lax.fori_loop`` (float64) for two bindings in one process, and the
body is planned and compiled once for both trip counts."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import symdiff as sd
from symdiff.ir import GraphError, TraceError
from test_fori_loop import _dtype, _spec, _tol, jacobi_1d_jax, jacobi_1d_step

jax.config.update("jax_enable_x64", True)

T = sd.symbol("T")
N = sd.symbol("N")


def decay(i, s):
    return np.sin(s) * 0.5 + s * 0.3 + 0.01 * i


def decay_jax(i, s):
    return jnp.sin(s) * 0.5 + s * 0.3 + 0.01 * i


def test_trip_count_from_a_size_symbol_matches_jax_for_two_bindings(device):
    spec = _spec(device)

    @sd.differentiable_program
    def program(a: spec[4], w: spec[T]):          # T: the length of w, and the trip count
        a = sd.fori_loop(1, T + 1, decay, a)
        return np.sum(a * a) + np.sum(w * w)

    def with_jax(a, w):
        a = jax.lax.fori_loop(1, w.shape[0] + 1, decay_jax, a)
        return jnp.sum(a * a) + jnp.sum(w * w)

    a = np.linspace(0.1, 0.9, 4)
    body_compiles = []
    for steps in (3, 7):
        w = np.linspace(-1, 1, steps)
        value, grads = program.value_and_grad(a.astype(_dtype(device)), w.astype(_dtype(device)), device=device)
        want, (ga, gw) = jax.jit(jax.value_and_grad(with_jax, argnums=(0, 1)))(a, w)
        np.testing.assert_allclose(value, want, **_tol(device))
        np.testing.assert_allclose(grads["a"], ga, **_tol(device))
        np.testing.assert_allclose(grads["w"], gw, **_tol(device))
        (stats,) = program.stats().values()
        body = stats["loops"]["loop0"]
        body_compiles.append((body["compiles"], body["compile_time"]))
    assert body_compiles[0] == body_compiles[1]   # the new trip count planned and compiled nothing


def test_state_of_symbolic_size_and_a_trip_count_from_it_match_jax(device):
    spec = _spec(device)

    @sd.differentiable_program
    def jacobi_1d(A: spec[N], B: spec[N]):
        A, B = sd.fori_loop(0, N // 2, jacobi_1d_step, (A, B))
        return np.sum(A * A) + np.sum(np.sin(B))

    for n in (8, 11):
        rng = np.random.default_rng(n)
        A, B = rng.uniform(-1, 1, n), rng.uniform(-1, 1, n)
        value, grads = jacobi_1d.value_and_grad(A.astype(_dtype(device)), B.astype(_dtype(device)), device=device)
        want, (gA, gB) = jax.jit(jax.value_and_grad(jacobi_1d_jax, argnums=(0, 1)), static_argnums=2)(A, B, n // 2)
        np.testing.assert_allclose(value, want, **_tol(device))
        np.testing.assert_allclose(grads["A"], gA, **_tol(device))
        np.testing.assert_allclose(grads["B"], gB, **_tol(device))


def test_a_nested_loop_bound_by_the_enclosing_programs_size():
    def outer(i, s):
        return sd.fori_loop(0, T, decay, s) * 0.9      # T is bound by the program's argument w

    @sd.differentiable_program
    def nested(a: sd.f64[3], w: sd.f64[T]):
        return np.sum(sd.fori_loop(0, 2, outer, a) * np.sum(w))

    def with_jax(a, w):
        def outer_jax(i, s):
            return jax.lax.fori_loop(0, w.shape[0], decay_jax, s) * 0.9
        return jnp.sum(jax.lax.fori_loop(0, 2, outer_jax, a) * jnp.sum(w))

    a = np.array([0.2, -0.4, 0.7])
    for steps in (2, 5):
        w = np.linspace(0.5, 1.5, steps)
        value, grads = nested.value_and_grad(a, w, device="numpy")
        want, (ga, gw) = jax.jit(jax.value_and_grad(with_jax, argnums=(0, 1)))(a, w)
        np.testing.assert_allclose(value, want, rtol=1e-12)
        np.testing.assert_allclose(grads["a"], ga, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(grads["w"], gw, rtol=1e-10, atol=1e-12)


def test_a_size_symbol_no_argument_binds_is_an_error_naming_the_line():
    @sd.differentiable_program
    def unbound(a: sd.f64[3]):
        return np.sum(sd.fori_loop(0, T, decay, a))    # no argument has size T

    with pytest.raises(GraphError, match=r"test_loop_bounds.py:\d+.*\['T'\].*no argument's shape binds"):
        unbound(np.ones(3), device="numpy")


def test_bounds_that_are_not_integer_size_expressions_are_refused():
    with pytest.raises(TraceError, match=r"test_loop_bounds.py:\d+.*N/2 is not an integer expression"):
        sd.trace(lambda a: np.sum(sd.fori_loop(0, N / 2, decay, a)), sd.f64[N])
    with pytest.raises(TraceError, match=r"test_loop_bounds.py:\d+.*outside a traced program pass Python ints"):
        sd.fori_loop(0, T, decay, np.ones(3))
