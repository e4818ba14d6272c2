"""Comparisons sympy cannot canonicalise stably (tests/comparison_cases.py) are
traced and differentiated on the numpy device (float64): values as numpy's,
gradients as JAX's; they recursed inside sympy (fuzzer seeds 101315, 101997)."""
import numpy as np
import pytest

import symdiff as sd
from comparison_cases import CASES, check


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_comparison_of_computed_values_differentiates_like_jax(case):
    check(sd, case, "numpy", sd.f64, np.float64, rtol=1e-10)


def test_second_order_through_minimum_like_jax():
    """The partials of Min hold the comparison; differentiating them again rebuilds it."""
    import jax
    import jax.numpy as jnp
    from comparison_cases import NAMES, inputs, program
    case = next(c for c in CASES if c.name == "minimum")
    xs = inputs(np.float64)
    ct = np.random.default_rng(7).standard_normal(xs[0].shape)
    value, grads = program(sd, case, sd.f64).grad_program(wrt=["a"]).vjp(*xs, cotangent=ct, wrt=list(NAMES),
                                                                         device="numpy")
    jax.config.update("jax_enable_x64", True)
    inner = jax.grad(lambda *a: jnp.sum(case.body(jnp, *a)), argnums=0)
    ref_value, pullback = jax.vjp(jax.jit(inner), *(jnp.asarray(x) for x in xs))
    np.testing.assert_allclose(value, np.asarray(ref_value), rtol=1e-10, atol=1e-12)
    for n, ref in zip(NAMES, pullback(jnp.asarray(ct))):
        np.testing.assert_allclose(grads[n], np.asarray(ref), rtol=1e-10, atol=1e-12, err_msg=n)
