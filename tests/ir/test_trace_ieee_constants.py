"""Literal zeros, infinities and NaNs in traced arithmetic on the numpy device
(the reference interpreter): numpy's values, JAX's gradients; the cases are
tests/ieee_cases.py, which tests/lowering runs on the Slang devices."""
import numpy as np
import pytest
import sympy

from symdiff import ir
import symdiff as sd
from ieee_cases import CASES, N, X, check_map, integer_program
from symdiff.ir.tracer import UnsupportedOperationError
from nan_cases import check


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_ieee_constants_values_like_numpy_and_gradients_like_jax(case):
    check(sd, case, "numpy")


def test_ieee_constants_in_a_map_body():
    check_map(sd, "numpy")


def test_integer_division_by_zero_is_zero_as_numpy():
    with np.errstate(divide="ignore"):
        want = np.concatenate([N // 0, N % 0, N * 0])
    got = integer_program(sd)(N, device="numpy")
    assert got.dtype == want.dtype and np.array_equal(got, want)


def log_of_folded_zero(a: sd.f32[4]):
    out = np.zeros_like(a)
    for i in sd.map[0:4]:
        v = a[i]
        out[i] = np.log(v - v)
    return out


def test_a_value_sympy_folds_to_complex_infinity_is_refused_at_its_line():
    """``v - v`` is 0 to sympy, so ``log`` of it is complex infinity (numpy:
    -inf): refused, naming the line, rather than printed as ``zoo``."""
    with pytest.raises(UnsupportedOperationError) as info:
        ir.trace(log_of_folded_zero, sd.f32[4])
    message = str(info.value)
    assert f"test_trace_ieee_constants.py:{log_of_folded_zero.__code__.co_firstlineno + 4}" in message, message
    assert "complex infinity" in message


def reciprocal_of_folded_zero(a: sd.f32[3]):
    out = np.zeros_like(a)
    for i in sd.map[0:3]:
        v = a[i]
        out[i] = np.reciprocal(v - v) + a[i]
    return out


def test_reciprocal_of_zero_is_inf():
    got = sd.differentiable_program(reciprocal_of_folded_zero)(X[:3], device="numpy")
    np.testing.assert_array_equal(got, np.full(3, np.inf, np.float32))


def finite_with_infinite_constants(x: sd.f32[5]):
    return np.sum(np.minimum(x * x, np.inf) + np.exp(x - np.inf) + np.where(x > 10.0, -np.inf, x) * 0.5)


def test_reverse_pass_through_infinite_constants():
    """The constants survive differentiation as constants (no sympy zoo/oo/nan in
    any forward or backward body) and the gradients pass central differences."""
    x = np.linspace(-1, 1, 5).astype(np.float32)
    grads = sd.gradcheck(finite_with_infinite_constants, x)
    np.testing.assert_allclose(grads["x"], 2 * x + 0.5, rtol=1e-6)
    graph = sd.differentiable_program(finite_with_infinite_constants).backward_graph(wrt=["x"])
    for node in graph.tasklets():
        for expr in node.body.values():
            assert not expr.has(sympy.zoo, sympy.oo, -sympy.oo, sympy.nan), (node.name, expr)
