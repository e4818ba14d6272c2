"""Elementwise functions and norms (issue 31) against jax.numpy float64:
value and VJP on the numpy device.  Inputs avoid the points where JAX's
gradient convention and symdiff's may differ: ties of |x| at 0 (abs), ties
of max/min (inf norms), rounding ties (x.5, where both give 0 anyway)."""
import numpy as np
import pytest

from numpy_oracle import arrays, check, refused

X, Y = arrays((3, 4), (3, 4))
POS = np.abs(X) + 0.1
ROUNDING = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -1.26, 1.74, 0.049, -0.051, 3.0, 1234.5678])
SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -1.5, 2.0])

CASES = {
    "round": (lambda xp, x: xp.round(x) * x, ROUNDING),
    "round_decimals": (lambda xp, x: xp.round(x, 2) + xp.round(x, 1), ROUNDING),
    "round_negative_decimals": (lambda xp, x: xp.round(x, -1) + xp.around(x * 100, -2), ROUNDING),
    "around": (lambda xp, x: xp.around(x), ROUNDING),
    "rint": (lambda xp, x: xp.rint(x) + x, ROUNDING),
    "trunc": (lambda xp, x: xp.trunc(x) + x * xp.trunc(x), ROUNDING),
    "fix": (lambda xp, x: (xp.fix if xp is np else xp.trunc)(x) * x, ROUNDING),  # jnp.fix is deprecated
    "fmod": (lambda xp, x, y: xp.fmod(x * 3, y), X, Y),
    "fmod_scalar": (lambda xp, x: xp.fmod(x * 3, 0.7) + xp.fmod(2.5, x), X),
    "copysign": (lambda xp, x, y: xp.copysign(x, y), X, Y),
    "copysign_broadcast": (lambda xp, x, y: xp.copysign(x, y[0]) * 2, X, Y),
    "logaddexp": (lambda xp, x, y: xp.logaddexp(x, y), X, Y),
    "logaddexp_tie": (lambda xp, x: xp.logaddexp(x, x[:, ::-1] * 0 + x), X),
    "logaddexp_broadcast": (lambda xp, x, y: xp.logaddexp(x, y[:1] * 30), X, Y),
    "logaddexp2": (lambda xp, x, y: xp.logaddexp2(x, y), X, Y),
    "float_power": (lambda xp, x, y: xp.float_power(x, y), POS, Y),
    "float_power_int_exponent": (lambda xp, x: xp.float_power(x, 3), X),
    "sinc": (lambda xp, x: xp.sinc(x), X),
    "sinc_at_zero": (lambda xp, x: xp.sinc(x * 0.0) + x, X),
    "deg2rad": (lambda xp, x: xp.deg2rad(x) + xp.radians(x * 2), X),
    "rad2deg": (lambda xp, x: xp.rad2deg(x) + xp.degrees(x * 2), X),
    "nan_to_num": (lambda xp, x: xp.nan_to_num(x) * 1.0, SPECIAL),
    "nan_to_num_values": (lambda xp, x: xp.nan_to_num(x * 2, nan=-1.0, posinf=9.0, neginf=-9.0), SPECIAL),
    "heaviside": (lambda xp, x, y: xp.heaviside(x * (x > 1), y), X, Y),
    "isnan": (lambda xp, x: xp.isnan(x), SPECIAL),
    "isinf": (lambda xp, x: xp.isinf(x), SPECIAL),
    "isfinite": (lambda xp, x: xp.isfinite(x), SPECIAL),
    "signbit": (lambda xp, x: xp.signbit(x), SPECIAL[1:]),
    "real_conj_imag": (lambda xp, x: xp.real(x) * 2 + xp.conj(x) + xp.conjugate(x) + xp.imag(x), X),
    "norm": (lambda xp, x: xp.linalg.norm(x), X),
    "norm_keepdims": (lambda xp, x: xp.linalg.norm(x, keepdims=True), arrays((2, 3, 2))[0]),
    "norm_vector_orders": (lambda xp, v: xp.stack([xp.linalg.norm(v, o) for o in (None, 1, 2, 3, 0.5, np.inf,
                                                                                   -np.inf, -1)]), X[0]),
    "norm_vector_zero_order": (lambda xp, v: xp.linalg.norm(v, 0) * v, X[0]),
    "norm_axis": (lambda xp, x: xp.linalg.norm(x, axis=-1), X),
    "norm_axis_ord": (lambda xp, x: xp.linalg.norm(x, 3, axis=0, keepdims=True), X),
    "norm_fro": (lambda xp, x: xp.linalg.norm(x, "fro"), X),
    "norm_matrix_orders": (lambda xp, x: xp.stack([xp.linalg.norm(x, o) for o in (1, -1, np.inf, -np.inf)]), X),
    "norm_matrix_axes": (lambda xp, x: xp.linalg.norm(x, np.inf, axis=(2, 0), keepdims=True),
                         arrays((2, 3, 4))[0]),
    "vector_norm": (lambda xp, x: xp.linalg.vector_norm(x) + xp.linalg.vector_norm(x, ord=1), X),
    "vector_norm_axes": (lambda xp, x: xp.linalg.vector_norm(x, axis=(0, 2), ord=np.inf, keepdims=True),
                         arrays((2, 3, 4))[0]),
    "matrix_norm": (lambda xp, x: xp.linalg.matrix_norm(x) + xp.linalg.matrix_norm(x, ord=1),
                    arrays((2, 3, 4))[0]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_elementwise_matches_jax(name):
    body, *inputs = CASES[name]
    check(body, *inputs)


def test_an_unknown_matrix_norm_is_refused_with_its_reason():
    # ord 2, -2 and 'nuc' take singular values from a library node (tests/symdiff/test_linalg_rules.py)
    refused(lambda xp, x: xp.linalg.norm(x, 3), X, match="not a matrix norm order")
