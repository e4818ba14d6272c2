"""fuzz.check.compare: where JAX float32 is not finite, the bound stays finite unless
float64 says the value really is not finite."""
import numpy as np

from fuzz.check import FLOOR32, compare

REF64 = {"value": np.array(3.0e38 * 2.0), "grad:x": np.array([1.0, -2.0, 0.5])}


def test_a_float32_overflow_in_jax_does_not_make_the_bound_infinite():
    """JAX float32 overflowed where float64 is finite: symdiff's overflow is wrong too."""
    ref32 = {"value": np.array(np.inf), "grad:x": np.array([1.0, -2.0, 0.5])}
    got = {"value": np.array(np.inf), "grad:x": np.array([1.0, -2.0, 0.5])}
    ok, worst = compare(got, REF64, ref32)
    assert not ok and worst["quantity"] == "value" and np.isfinite(worst["tol"]), worst


def test_a_gradient_beside_the_overflow_is_still_judged():
    ref32 = {"value": np.array(6.0e38), "grad:x": np.array([1.0, np.inf, 0.5])}
    got = {"value": np.array(6.0e38), "grad:x": np.array([1.0, -2.0, 0.6])}
    ok, worst = compare(got, REF64, ref32)
    assert not ok and worst["quantity"] == "grad:x" and worst["at"] == [2], worst


def test_matching_float64_where_jax_float32_overflowed_passes():
    ref32 = {"value": np.array(np.inf), "grad:x": np.array([1.0, -2.0, 0.5])}
    got = {"value": REF64["value"] * (1 + FLOOR32 / 10), "grad:x": REF64["grad:x"].copy()}
    assert compare(got, REF64, ref32)[0]


def test_a_value_float64_says_is_infinite_must_be_infinite():
    ref64 = {"value": np.array(np.inf), "grad:x": np.array([1.0, -2.0, 0.5])}
    ref32 = {"value": np.array(np.inf), "grad:x": np.array([1.0, -2.0, 0.5])}
    assert compare({"value": np.array(np.inf), "grad:x": ref64["grad:x"]}, ref64, ref32)[0]
    assert not compare({"value": np.array(1e30), "grad:x": ref64["grad:x"]}, ref64, ref32)[0]


def test_a_sixteen_bit_result_may_be_off_by_its_rounding_and_no_more():
    """A "+f16" variant's results are rounded once: half a spacing of float16 is allowed at
    each element, a whole one (a truncation, or rounding twice) is not."""
    ref64 = {"value": np.array(1.0 / 3.0), "grad:x": np.array([1000.1, -2.0e-3, 0.7])}
    ref32 = {k: v.astype(np.float32).astype(np.float64) for k, v in ref64.items()}
    rounded = {k: v.astype(np.float16).astype(np.float64) for k, v in ref64.items()}
    assert compare(rounded, ref64, ref32, storage="float16")[0]
    assert not compare(rounded, ref64, ref32)[0]  # without the allowance, float32's bound
    off = dict(rounded, **{"grad:x": np.nextafter(ref64["grad:x"].astype(np.float16), np.float16(np.inf))
                           .astype(np.float64)})
    assert not compare(off, ref64, ref32, storage="float16")[0]
