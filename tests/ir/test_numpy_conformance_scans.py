"""Scans and differences (issue 31): cumsum, cumprod, nancumsum, nancumprod,
cumulative_sum/prod, diff, ediff1d, trapezoid against jax.numpy float64, value
and VJP on the numpy device, over numpy's argument forms; then second
derivatives and forward mode through the scan ops' rules."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import symdiff as sd
from numpy_oracle import arrays, check, refused

X, Y = arrays((3, 4), (3, 4), seed=41)
D = arrays((2, 3, 4), seed=42)[0]
V = arrays((6,), seed=43)[0]
S = arrays((), seed=44)[0]
Z = X.copy()
Z[1, 1] = Z[2, 1] = Z[0, 3] = 0.0      # zeros: cumprod's gradient without dividing by x
XN = X.copy()
XN[0, 1] = XN[2, 3] = np.nan
XS = np.sort(np.abs(V))                 # sample points for trapezoid's x=

CASES = {
    "cumsum": (lambda xp, x, d: (xp.cumsum(x), xp.cumsum(d, axis=0), xp.cumsum(d, axis=1) * xp.cumsum(d, axis=-1),
                                 x.cumsum(1), xp.cumsum(x.astype(np.float32), axis=0, dtype=np.float64)), X, D),
    "cumsum_empty": (lambda xp, x: xp.cumsum(x[:, :0], axis=1).sum() + xp.cumsum(x[:0]).sum() + x, X),
    "cumprod_with_zeros": (lambda xp, z, d: (xp.cumprod(z), xp.cumprod(z, axis=0) + xp.cumprod(z, axis=-1),
                                             d.cumprod(axis=1)), Z, D),
    "nan_and_cumulative": (lambda xp, xn, x, z: (xp.nancumsum(xn, axis=1) + xp.nancumprod(xn, axis=0),
                                                 xp.nancumsum(xn), xp.cumulative_sum(x, axis=1, include_initial=True),
                                                 xp.cumulative_prod(z, axis=0, include_initial=True),
                                                 xp.cumulative_sum(x[0])), XN, X, Z),
    "diff": (lambda xp, d, x: (xp.diff(d), xp.diff(d, axis=0), xp.diff(x, n=2), xp.diff(x, n=0),
                               xp.diff(x, n=3, axis=0)), D, X),
    "diff_prepend_append": (lambda xp, x, y, v: (xp.diff(x, prepend=0.5, append=y[:, :1]),
                                                 xp.diff(x, axis=0, prepend=y[:1], append=1.0),
                                                 xp.diff(v, n=2, prepend=v[-1], append=v[:2] * 3)), X, Y, V),
    "ediff1d": (lambda xp, x, v: (xp.ediff1d(x), xp.ediff1d(v, to_end=v[:2] ** 2, to_begin=-1.5),
                                  xp.ediff1d(v, to_end=np.array([1, 2.5]))), X, V),
    "trapezoid": (lambda xp, x, y, d, v: (xp.trapezoid(x), xp.trapezoid(x, dx=0.25, axis=0),
                                          xp.trapezoid(d, x=v[:4] * xp.arange(1, 5)), xp.trapezoid(d, v[:2], axis=0),
                                          xp.trapezoid(x, y, axis=0), xp.trapezoid(x[:, :2], np.array([0.0, 2.0]))),
                  X, Y, D, XS),
}


@pytest.mark.parametrize("name", list(CASES))
def test_scans_match_jax(name):
    body, *inputs = CASES[name]
    jitted = jax.jit(lambda *arrays: body(jnp, *arrays))   # one XLA compile instead of one per JAX op
    check(body, *inputs, jax_body=lambda xp, *arrays: jitted(*arrays))


def test_scans_of_a_0d_array_are_1d():
    """numpy scans a 0-d array as 1-d, also with axis=0 (JAX refuses that axis: its oracle omits it)."""
    check(lambda xp, s, x: (xp.cumsum(s), xp.cumprod(s, axis=0), xp.cumsum(x[:1], axis=0)), S, X,
          jax_body=lambda xp, s, x: (xp.cumsum(s), xp.cumprod(s), xp.cumsum(x[:1], axis=0)))


def test_integer_and_bool_scans_stay_integers():
    ints = np.array([[3, -1, 4], [1, 5, 9]], dtype=np.int32)
    check(lambda xp, i, x: (xp.cumsum(i, axis=1), xp.cumprod(i, axis=0), xp.cumsum(x > 0), xp.diff(i),
                            xp.diff(x > 0, axis=0), xp.cumsum(i, dtype=np.float64)), ints, X, grad=False)


def test_scan_refusals():
    refused(lambda xp, x: xp.cumsum(x, axis=2), X, match="out of range")
    refused(lambda xp, s: xp.cumsum(s, axis=1), S, match="out of range")
    refused(lambda xp, x: xp.diff(x, n=-1), X, match="non-negative")
    refused(lambda xp, s: xp.diff(s), S, match="at least one dimensional")
    refused(lambda xp, x: xp.cumulative_sum(x), X, match="axis must be given")
    refused(lambda xp, x: xp.diff(x, prepend=x[0, 0:1][None, None]), X, match="dimensions")


def _loss(xp, x, y):
    return xp.sum(xp.cumprod(x, axis=1) * xp.cumsum(y * x[::-1], axis=0))


def test_second_derivatives_and_forward_mode_through_the_scan_rules():
    """Hessian-vector products both ways (reverse over reverse: the VJP rules
    traced again; forward over reverse: the JVP rules of the rules' scans) and
    a JVP, against JAX, at inputs with zeros."""
    f = sd.differentiable_program(lambda x, y: _loss(np, x, y))
    v = arrays((3, 4), seed=45)[0]

    def jf(x, y):
        return _loss(jnp, x, y)
    want_grad, want_hvp = jax.jit(lambda x, y: jax.jvp(jax.jit(lambda x: jax.grad(jf)(x, y)), (x,), (v,)))(Z, Y)
    grad_x = f.grad_program(wrt="x")
    np.testing.assert_allclose(grad_x(Z, Y, device="numpy"), want_grad, rtol=1e-9, atol=1e-12)
    _, hvp = grad_x.vjp(Z, Y, cotangent=v, wrt="x", device="numpy")
    np.testing.assert_allclose(hvp["x"], want_hvp, rtol=1e-9, atol=1e-12)
    _, hvp_forward = grad_x.jvp(Z, Y, tangents={"x": v}, device="numpy")
    np.testing.assert_allclose(hvp_forward, want_hvp, rtol=1e-9, atol=1e-12)
    _, tangent = f.jvp(Z, Y, tangents={"x": v, "y": np.ones_like(Y)}, device="numpy")
    want_tangent = jax.jit(lambda x, y: jax.jvp(jax.jit(jf), (x, y), (v, np.ones_like(Y)))[1])(Z, Y)
    np.testing.assert_allclose(tangent, want_tangent, rtol=1e-9)
