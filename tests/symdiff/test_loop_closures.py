"""``sd.fori_loop`` / ``sd.while_loop`` bodies that read arrays of the enclosing
program (closures, as in JAX; symdiff.loop_closures): values and gradients
against ``jax.lax`` float64 on the numpy device, one program on cpu and
vulkan.  A closure array's gradient is the sum over the iterations."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import symdiff as sd
from symdiff import lowering
from symdiff.ir import TraceError

jax.config.update("jax_enable_x64", True)

X = np.linspace(0.1, 1.0, 5)
K = np.linspace(1.0, 2.0, 5)


def _compare(program, jax_fn, *args, device="numpy", rtol=1e-9, atol=1e-12, names=("x", "k")):
    """Value and the gradients of the float arguments ``names`` (the first ones) against JAX."""
    value, grads = program.value_and_grad(*args, device=device)
    floats = args[:len(names)]
    want, want_grads = jax.jit(jax.value_and_grad(lambda *f: jax_fn(*f, *args[len(names):]),
                                          argnums=tuple(range(len(names)))))(*floats)
    np.testing.assert_allclose(value, want, rtol=rtol, atol=atol)
    for name, w in zip(names, want_grads):
        np.testing.assert_allclose(grads[name], w, rtol=rtol, atol=atol, err_msg=f"gradient of {name}")


def spring(xp, loop, x, k):
    """The issue's spring chain: the body reads the stiffness k from outside the loop."""
    def step(i, s):
        return s - 0.1 * k * s + 0.05 * xp.roll(s, 1) * k[0]
    return xp.sum(loop(0, 4, step, x) ** 2)


@sd.differentiable_program
def spring_program(x: sd.f64[5], k: sd.f64[5]):
    return spring(np, sd.fori_loop, x, k)


def test_fori_loop_body_reads_an_outer_array():
    _compare(spring_program, lambda x, k: spring(jnp, jax.lax.fori_loop, x, k), X, K)


def test_closures_over_views_computed_arrays_and_several_state_elements():
    def body_of(xp, k):
        damp = xp.exp(-k)                    # computed before the loop
        tail = k[1:]                         # a view

        def step(i, state):
            a, b = state
            return a * damp + 0.1 * b, b - 0.2 * xp.sum(tail) * a + damp * damp[::-1]
        return step

    @sd.differentiable_program
    def prog(x: sd.f64[5], k: sd.f64[5]):
        a, b = sd.fori_loop(0, 3, body_of(np, k), (x, x * 0.5))
        return np.sum(a * b) + np.sum(k)

    def ref(x, k):
        a, b = jax.lax.fori_loop(0, 3, body_of(jnp, k), (x, x * 0.5))
        return jnp.sum(a * b) + jnp.sum(k)

    _compare(prog, ref, X, K)


def test_while_loop_condition_and_body_read_outer_arrays():
    def parts(xp, k, tol):
        return (lambda s: xp.max(xp.abs(s)) > tol[0]), (lambda s: s * 0.5 * k)

    @sd.differentiable_program
    def prog(x: sd.f64[5], k: sd.f64[5], tol: sd.f64[1]):
        cond, body = parts(np, k, tol)
        return np.sum(sd.while_loop(cond, body, x, max_iters=50) * k)

    tol = np.array([0.05])
    cond, body = parts(np, K * 0.8, tol)
    trips = 0
    s = X
    while cond(s):
        s, trips = body(s), trips + 1
    assert trips > 2

    def ref(x, k, tol):   # JAX cannot reverse a while_loop: the same trip count as a fori_loop
        _, body = parts(jnp, k, tol)
        return jnp.sum(jax.lax.fori_loop(0, trips, lambda i, s: body(s), x) * k)

    _compare(prog, ref, X, K * 0.8, tol)


def test_nested_loops_read_the_program_s_array():
    def nested(xp, fori, x, k):
        def inner(j, s):
            return xp.sin(s) * k + 0.1 * s

        def outer(i, s):
            return fori(0, 2, inner, s) * k[::-1]
        return xp.sum(fori(0, 3, outer, x))

    @sd.differentiable_program
    def prog(x: sd.f64[5], k: sd.f64[5]):
        return nested(np, sd.fori_loop, x, k)

    _compare(prog, lambda x, k: nested(jnp, jax.lax.fori_loop, x, k), X, K * 0.5)


def test_closure_over_an_index_array_gathers():
    idx = np.array([4, 0, 1, 1, 2], dtype=np.int32)

    @sd.differentiable_program
    def prog(x: sd.f64[5], k: sd.f64[5], idx: sd.i32[5]):
        return np.sum(sd.fori_loop(0, 3, lambda i, s: s[idx] * k + 0.1, x))

    def ref(x, k):
        return jnp.sum(jax.lax.fori_loop(0, 3, lambda i, s: s[idx] * k + 0.1, x))

    _compare(prog, lambda x, k, idx: ref(x, k), X, K, idx)


def test_body_writing_into_an_outer_array_is_refused_naming_the_line():
    def program(a, w):
        def step(i, s):
            w[0] = 1.0                      # w is not in the state
            return s * w
        return np.sum(sd.fori_loop(0, 3, step, a))

    with pytest.raises(TraceError, match=r"test_loop_closures.py:\d+.*carry that array in the loop state"):
        sd.trace(program, sd.f64[4], sd.f64[4])


@pytest.mark.parametrize("device", [pytest.param("cpu"), pytest.param("vulkan", marks=[pytest.mark.vulkan])])
def test_closure_on_slang_devices(device):
    if device not in lowering.available_devices():
        pytest.skip(f"no {device} device here")
    if device == "vulkan":
        @sd.differentiable_program
        def prog32(x: sd.f32[5], k: sd.f32[5]):
            return spring(np, sd.fori_loop, x, k)
        args = (X.astype(np.float32), K.astype(np.float32))
        value, grads = prog32.value_and_grad(*args, device=device)
        want, (gx, gk) = jax.jit(jax.value_and_grad(lambda x, k: spring(jnp, jax.lax.fori_loop, x, k), argnums=(0, 1)))(X, K)
        np.testing.assert_allclose(value, want, rtol=2e-5)
        np.testing.assert_allclose(grads["k"], gk, rtol=2e-4, atol=2e-5)
        return
    _compare(spring_program, lambda x, k: spring(jnp, jax.lax.fori_loop, x, k), X, K, device=device)
