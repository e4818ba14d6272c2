"""``np.floor`` of float data inside comparisons, on the numpy interpreter and
every Slang device, values and gradients against JAX in float64.

sympy calls ``floor(x)`` integer-valued, so the code generator once typed it
as index arithmetic: a shared subexpression ``floor(x)`` became an ``int``
temporary printed as ``x`` (truncation toward zero: ``floor(-0.7)`` read 0)
and a comparison ``floor(x) == floor(y)`` was printed as ``x == y``, silently wrong on
cpu and vulkan (fuzzer seed 40022)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sympy

import symdiff as sd
from symdiff.lowering.printer import is_index_valued, print_expr

jax.config.update("jax_enable_x64", True)

# fractions on both sides of 0 (floor and truncation toward zero differ below
# 0), equal floors of unequal numbers, and floors past int32's range
C = np.array([0.3, -0.7, -1.5, 0.999, -3.25, 2.5, 3.0e9, -3.0e9], dtype=np.float32)
E = np.array([0.9, -0.2, -1.2, 1.5, -3.9, 2.75, 3.0e9, -3.5e9], dtype=np.float32)
# x1[i - 1] between floor(x3[j - 1]) and its truncation, with x1[i] > 0 or not
X1 = np.array([-0.5, 1.0, -1.2, 1.0, 0.7, 0.1], dtype=np.float32)


@sd.differentiable_program
def floor_compared(c: sd.f32[8], e: sd.f32[8], d: sd.f32[8]):
    out = np.zeros(8)
    for i in sd.map[0:8]:  # one tasklet: the comparison and both floors in one expression
        out[i] = np.where(np.floor(c[i]) == np.floor(e[i]), d[i] * d[i], 3 * d[i])
    return np.sum(out)


def _jax_floor_compared(c, e, d):
    return jnp.sum(jnp.where(jnp.floor(c) == jnp.floor(e), d * d, 3 * d))


@sd.differentiable_program
def floor_in_map(x1: sd.f32[6], x2: sd.f32[4], x3: sd.f32[8]):
    # the fuzzer's program minimised: sympy splits the condition into two
    # comparisons sharing floor(x3[j - 1]), which cse makes a temporary
    v1 = np.zeros((6, 6))
    for i, j in sd.map[1:4, 2:6]:
        v1[j - 2, i + 1] = np.where(((x1[i] > 0) * x1[i - 1]) < np.floor(x3[j - 1]), 1.0, x2[i] * x2[i])
    return np.sum(v1)


def _jax_floor_in_map(x1, x2, x3):
    cond = (x1[1:4, None] > 0) * x1[0:3, None] < jnp.floor(x3[None, 1:5])
    return jnp.sum(jnp.where(cond, 1.0, (x2[1:4] * x2[1:4])[:, None]))


def _inputs(prog):
    rng = np.random.default_rng(5)
    if prog is floor_compared:
        return C, E, rng.standard_normal(8).astype(np.float32)
    return X1, rng.standard_normal(4).astype(np.float32), C


CASES = {"floor_compared": (floor_compared, _jax_floor_compared), "floor_in_map": (floor_in_map, _jax_floor_in_map)}


def _check(case: str, device: str) -> None:
    prog, ref = CASES[case]
    args = _inputs(prog)
    value, grads = prog.value_and_grad(*args, device=device)
    argnums = tuple(range(len(args)))
    ref_value, ref_grads = jax.jit(jax.value_and_grad(ref, argnums=argnums))(*(jnp.asarray(a, jnp.float64) for a in args))
    np.testing.assert_allclose(float(value), float(ref_value), rtol=1e-5, atol=1e-5)
    for name, ref_grad in zip(grads, ref_grads):
        np.testing.assert_allclose(grads[name], np.asarray(ref_grad), rtol=1e-5, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("case", sorted(CASES))
def test_floor_of_data_matches_jax(case, device):
    _check(case, device)


@pytest.mark.parametrize("case", sorted(CASES))
def test_floor_of_data_matches_jax_numpy(case):
    _check(case, "numpy")


def test_floor_of_data_is_not_index_arithmetic():
    x = sympy.Symbol("x", real=True)  # a float datum
    n = sympy.Symbol("n", integer=True)
    assert is_index_valued(sympy.floor(n / 3) + 1) and not is_index_valued(sympy.floor(x))
    floor_positive = sympy.Gt(sympy.floor(x), 0, evaluate=False)
    assert print_expr(floor_positive) == print_expr(floor_positive, "int") == "(floor(x) > 0.0f)"
    assert print_expr(sympy.floor(x), "int") == "int(floor(x))"
