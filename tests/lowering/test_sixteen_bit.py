"""float16 and bfloat16 arrays on every device: exact conversions, and results
that are the float32 program's rounded once to 16 bits (``ir.storage``).

The oracle is JAX in float64 on the same (16-bit) inputs.  A 16-bit result
rounded once from float32 arithmetic is within half a 16-bit spacing of it, plus
the float32 arithmetic's own error (far below that spacing here); arithmetic
rounded to 16 bits after each operation, or a conversion that truncates
instead of rounding to nearest even, is not.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import symdiff as sd
from float_bounds import within_half_spacing

jax.config.update("jax_enable_x64", True)

HALVES = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
DEVICES = ["numpy", "cpu", pytest.param("vulkan", marks=pytest.mark.vulkan), "cuda"]


@pytest.fixture(params=DEVICES)
def any_device(request) -> str:
    if request.param != "numpy" and request.param not in sd.available_devices():
        pytest.skip(f"no {request.param} device here")
    return request.param


def _specials(dtype) -> np.ndarray:
    """float32 values whose rounding to ``dtype`` is hard to get right: ties to even
    (in the subnormal range too), overflow to infinity, NaN, signed zeros."""
    rng = np.random.default_rng(3)
    half = np.dtype(dtype)
    grid = rng.standard_normal(2000).astype(half).astype(np.float32)
    step = np.abs(grid) * np.float32(2.0 ** -(11 if half == np.float16 else 8))
    tiny = np.float32(2.0 ** -24 if half == np.float16 else 2.0 ** -133)
    ties = np.concatenate([grid + step / 2, grid - step / 4, grid + step * 0.75,
                           (rng.integers(-1024, 1024, 500) + 0.5).astype(np.float32) * tiny])
    finite = float(ml_dtypes.finfo(dtype).max)
    edges = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, finite, -finite, finite * 1.0009765625, 1e-30, -1e-40],
                     np.float32)
    scattered = (rng.standard_normal(3000) * 2.0 ** rng.integers(-30, 18, 3000)).astype(np.float32)
    return np.concatenate([ties.astype(np.float32), edges, scattered])


def _bits_equal(got: np.ndarray, want: np.ndarray) -> bool:
    """Equal bit for bit, any NaN matching any NaN (payloads are not kept)."""
    nan = np.isnan(want.astype(np.float32))
    same = got.view(f"u{got.itemsize}") == want.view(f"u{want.itemsize}")
    return bool(np.all(np.where(nan, np.isnan(got.astype(np.float32)), same)))


@pytest.mark.parametrize("name", sorted(HALVES))
def test_stores_round_to_nearest_even(any_device, name):
    dtype = HALVES[name]
    values = _specials(dtype)

    @sd.differentiable_program
    def narrow(x):
        return x.astype(dtype)
    got = narrow(values, device=any_device)
    assert got.dtype == np.dtype(dtype)
    assert _bits_equal(got, values.astype(dtype))


@pytest.mark.parametrize("name", sorted(HALVES))
def test_loads_widen_every_bit_pattern(any_device, name):
    dtype = HALVES[name]
    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(dtype)

    @sd.differentiable_program
    def widen(x):
        return x.astype(np.float32)
    got = widen(every, device=any_device)
    assert got.dtype == np.float32
    assert _bits_equal(got, every.astype(np.float32))


def _oracle(f, args, wrt):
    wide = [jnp.asarray(np.asarray(a, np.float64)) if np.asarray(a).dtype.kind != "i" else jnp.asarray(a)
            for a in args]
    value, grads = jax.jit(jax.value_and_grad(f, wrt))(*wide)
    return np.asarray(value), [np.asarray(g) for g in grads]


@pytest.mark.parametrize("name", sorted(HALVES))
def test_mlp_layer(any_device, name):
    dtype = HALVES[name]
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((12, 7)).astype(dtype), (rng.standard_normal((7, 5)) * 0.4).astype(dtype)

    @sd.differentiable_program
    def layer(x, w):
        h = np.tanh(x @ w)
        return np.sum(h * h) + np.sum(x[1:] * 0.5)
    value, grads = layer.value_and_grad(x, w, device=any_device)
    want, (gx, gw) = _oracle(lambda x, w: jnp.sum(jnp.tanh(x @ w) ** 2) + jnp.sum(x[1:] * 0.5), (x, w), (0, 1))
    within_half_spacing(np.asarray(value), want, dtype)
    within_half_spacing(grads["x"], gx, dtype)
    within_half_spacing(grads["w"], gw, dtype)


@pytest.mark.parametrize("name", sorted(HALVES))
def test_gather_scatters_gradient_in_float32(any_device, name):
    """The gradient of a gather sums repeated rows: in float32, rounded once (16-bit
    sums of 40 contributions would be several spacings off)."""
    dtype = HALVES[name]
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 6)).astype(dtype)
    idx = rng.integers(0, 4, 40).astype(np.int32)
    scale = rng.standard_normal((40, 6)).astype(dtype)

    @sd.differentiable_program
    def gathered(x, idx, scale):
        return np.sum(np.exp(x[idx] * scale) * 0.1)
    value, grads = gathered.value_and_grad(x, idx, scale, device=any_device, wrt=["x", "scale"])
    want, (gx, gs) = _oracle(lambda x, idx, s: jnp.sum(jnp.exp(x[idx] * s) * 0.1), (x, idx, scale), (0, 2))
    within_half_spacing(np.asarray(value), want, dtype)
    within_half_spacing(grads["x"], gx, dtype)
    within_half_spacing(grads["scale"], gs, dtype)


@pytest.mark.parametrize("name", sorted(HALVES))
def test_library_nodes_compute_in_float32_too(any_device, name):
    """A scan and a solve (library nodes: kernels or host steps between compiled pieces)
    see float32 values, so their results too are rounded once (a cumsum of 40 bfloat16
    steps rounded at each was 2 spacings off)."""
    dtype = HALVES[name]
    rng = np.random.default_rng(6)
    x = rng.standard_normal(40).astype(dtype)
    a = (rng.standard_normal((5, 5)) + 4 * np.eye(5)).astype(dtype)

    @sd.differentiable_program
    def scans(x, a):
        return np.sum(np.cumsum(x) ** 2) + np.sum(np.linalg.solve(a, x[:5]) ** 2)
    value, grads = scans.value_and_grad(x, a, device=any_device)
    want, (gx, ga) = _oracle(lambda x, a: jnp.sum(jnp.cumsum(x) ** 2) + jnp.sum(jnp.linalg.solve(a, x[:5]) ** 2),
                             (x, a), (0, 1))
    within_half_spacing(np.asarray(value), want, dtype)
    within_half_spacing(grads["x"], gx, dtype)
    within_half_spacing(grads["a"], ga, dtype)


def test_float16_with_bfloat16_computes_float32(any_device):
    """As in JAX: neither 16-bit format holds the other, so their product is float32
    (and exact: 11 by 8 significant bits fit float32's 24)."""
    rng = np.random.default_rng(2)
    a = rng.standard_normal(64).astype(np.float16)
    b = rng.standard_normal(64).astype(ml_dtypes.bfloat16)

    @sd.differentiable_program
    def mixed(a, b):
        return a * b
    got = mixed(a, b, device=any_device)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, a.astype(np.float64) * b.astype(np.float64))


@pytest.mark.parametrize("name", sorted(HALVES))
def test_large_results_are_views_of_their_buffers(name):
    """On the CPU device a result over a megabyte is handed over as a view of its
    buffer, bfloat16 too (numpy's array interface has no bfloat16: viewed through its bits)."""
    if "cpu" not in sd.available_devices():
        pytest.skip("no cpu device here")
    dtype = HALVES[name]
    x = np.random.default_rng(7).standard_normal(1 << 20).astype(np.float32)

    @sd.differentiable_program
    def halve(x):
        return (x * 0.5).astype(dtype)
    got = halve(x, device="cpu")
    assert got.dtype == np.dtype(dtype) and not got.flags.owndata
    np.testing.assert_array_equal(got.astype(np.float32), (x * 0.5).astype(dtype).astype(np.float32))


def test_python_scalars_keep_sixteen_bits():
    @sd.differentiable_program
    def scaled(x: sd.f16[3]):
        return np.sum(x * 2.5 + 1)
    assert scaled.graph.containers[scaled.graph.results[0]].dtype == "float16"


def test_a_graph_not_computed_in_float32_is_refused_where_it_would_update_16_bits():
    """Only ``ir.storage``'s copies write 16-bit elements (plainly); a lowering handed a
    graph whose scatter accumulates into one says so instead of adding raw bits."""
    from symdiff.lowering import backends
    from symdiff.lowering.codegen import generate
    from symdiff.lowering.plan import plan
    from symdiff.lowering.plan_types import LoweringError

    @sd.differentiable_program
    def gathered(x: sd.f16[6], idx: sd.i32[9]):
        return np.sum(x[idx])
    target = backends.of("vulkan").target() if "vulkan" in sd.available_devices() else None
    with pytest.raises(LoweringError, match="16-bit"):
        generate(plan(gathered.backward_graph(wrt=["x"]), {}, target), target or "vulkan")
