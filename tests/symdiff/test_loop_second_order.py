"""Forward mode and second order through ``sd.fori_loop`` / ``sd.while_loop``: a loop's tangent is a
loop over the state and its tangent (symdiff.loop_runtime.add_tangent_pass), so jvp and reverse-over-
forward Hessian-vector products go through it; checked against JAX float64 on an ODE integrator (RK4
of a damped pendulum) and a Newton iteration.  Reverse over reverse is refused, naming the loop."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import symdiff as sd
from test_fori_loop import NEWTON_C, NEWTON_X0, _rk4, newton_program, newton_with_jax, skip_on_lavapipe

jax.config.update("jax_enable_x64", True)


def rk4_step(i, s):
    return _rk4(s[0], s[1], np), s[1]


@sd.differentiable_program
def integrate(y: sd.f64[2], p: sd.f64[2]):
    y, p = sd.fori_loop(0, 20, rk4_step, (y, p), checkpoints=3)   # the loop's line
    return y[0] * y[0] + 0.5 * y[1] * p[1]


def integrate_jax(y, p):
    y, p = jax.lax.fori_loop(0, 20, lambda i, s: (_rk4(s[0], s[1], jnp), s[1]), (y, p))
    return y[0] * y[0] + 0.5 * y[1] * p[1]


Y, P = np.array([1.2, -0.3]), np.array([9.81, 0.4])
TY, TP = np.array([0.3, -0.7]), np.array([0.2, 0.1])


def _float64_device(device):
    skip_on_lavapipe(device, "float64 sin is wrong on lavapipe (see test_fori_loop's RK4 test)")
    return device


def test_jvp_through_an_ode_integrator_matches_jax(device):
    value, tangent = integrate.jvp(Y, P, tangents={"y": TY, "p": TP}, device=_float64_device(device))
    want, want_tangent = jax.jvp(jax.jit(integrate_jax), (Y, P), (TY, TP))
    np.testing.assert_allclose(value, want, rtol=1e-12)
    np.testing.assert_allclose(tangent, want_tangent, rtol=1e-10, atol=1e-12)


def test_hessian_vector_product_reverse_over_forward_matches_jax(device):
    hvp = integrate.jvp_program().grad(Y, P, TY, TP, wrt=["y", "p"], device=_float64_device(device))
    want = jax.jit(jax.grad(lambda y, p: jax.jvp(integrate_jax, (y, p), (TY, TP))[1], argnums=(0, 1)))(Y, P)
    np.testing.assert_allclose(hvp["y"], want[0], rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(hvp["p"], want[1], rtol=1e-9, atol=1e-11)


def test_jvp_through_a_while_loop_matches_jax_with_the_same_trip_count():
    cube_root = newton_program()
    x0, c = NEWTON_X0, NEWTON_C
    with_jax, _ = newton_with_jax()

    tc = np.array([1.0, -0.5, 0.25])
    value, tangent = cube_root.jvp(x0, c, tangents={"c": tc}, device="numpy")
    want, want_tangent = jax.jvp(jax.jit(with_jax), (x0, c), (np.zeros(3), tc))
    np.testing.assert_allclose(value, want, rtol=1e-12)
    np.testing.assert_allclose(tangent, want_tangent, rtol=1e-9)


def test_reverse_over_reverse_is_refused_naming_the_loop():
    with pytest.raises(sd.DifferentiationError,
                       match=r"loop0 at test_loop_second_order.py:\d+.*not supported.*jvp_program\(\)\.grad"):
        integrate.grad_program()(Y, P, device="numpy")
