"""The CPU device's float32 maths helpers (lowering.cpu_math) against numpy in float64.

Bound: 2 ulp of the exact value over dense sweeps (sin and cos for
|x| < 2^32, where their argument reduction is exact).  Measured maxima were
0.95 (exp), 0.74 (log), 1.2 (tanh) and 1.5 (sin, cos) ulp, against 1.3-2.3 for
numpy's own float32 routines on the same points, so 2 leaves no room for a
real regression.  Plus the edge values the programs rely on: inf, NaN, -0,
subnormals, overflow and saturation.
"""
from __future__ import annotations

import numpy as np
import pytest

from symdiff.lowering import backends, cpu_math, devices

spy = pytest.importorskip("slangpy")

KERNEL = """
[shader("compute")]
[numthreads(64, 1, 1)]
void apply(uint3 tid: SV_DispatchThreadID, RWStructuredBuffer<float> x, RWStructuredBuffer<float> x2,
           RWStructuredBuffer<float> y, uniform int n)
{
    int first = int(tid.x) * 1024;
    for (int i = first; i < min(first + 1024, n); i++)
        y[i] = FN;
}
"""

REFERENCE = {"exp": np.exp, "log": np.log, "log2": np.log2, "log10": np.log10, "sin": np.sin, "cos": np.cos,
             "tanh": np.tanh, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh,
             "cosh": np.cosh, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh}
# two arguments, in the order the helper takes them
REFERENCE2 = {"atan2": np.arctan2, "pow": np.power}


# where the polynomials are used: the CPU device, and lavapipe (its built-in
# log and tanh are ~100x less accurate); run on any Vulkan driver present
KINDS = {"cpu": backends.cpu.TARGET, "vulkan": backends.vulkan.LAVAPIPE}


@pytest.fixture(params=sorted(KINDS))
def kind(request) -> str:
    if request.param not in backends.available_devices():
        pytest.skip(f"no {request.param} device here")
    return request.param


def run(name: str, x: np.ndarray, kind: str = "cpu", x2: np.ndarray | None = None) -> np.ndarray:
    """``name``'s helper applied to float32 ``x`` (and ``x2``, its second
    argument where it has one) on the device ``kind``."""
    try:
        device = backends.of(kind).device()
    except devices.DeviceUnavailable as exc:
        pytest.skip(str(exc))
    x = np.ascontiguousarray(x, np.float32)
    x2 = np.ascontiguousarray(x if x2 is None else x2, np.float32)
    call = f"{cpu_math.FUNCTIONS[name]}(x[i], x2[i])" if name in REFERENCE2 else f"{cpu_math.FUNCTIONS[name]}(x[i])"
    source = cpu_math.source(KINDS[kind]) + KERNEL.replace("FN", call)
    module = device.load_module_from_source(f"cpu_math_{name}_{kind}", source)
    kernel = device.create_compute_kernel(device.link_program([module], [module.entry_point("apply")]))
    usage = spy.BufferUsage.shader_resource | spy.BufferUsage.unordered_access
    xb = device.create_buffer(data=x, usage=usage)
    x2b = device.create_buffer(data=x2, usage=usage)
    yb = device.create_buffer(size=4 * x.size, usage=usage)
    kernel.dispatch(thread_count=[-(-x.size // 1024), 1, 1], x=xb, x2=x2b, y=yb, n=x.size)
    return yb.to_numpy().view(np.float32)[:x.size]


def ulps(got: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """|got - exact| in units of the float32 spacing at the exact value (subnormal spacing at least)."""
    spacing = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
    return np.abs(got.astype(np.float64) - exact) / np.maximum(spacing, 2.0 ** -149)


def sweep(lo: float, hi: float, n: int = 400_000) -> np.ndarray:
    """Dense linear sweep plus a log-spaced one over both signs, in float32."""
    lin = np.linspace(lo, hi, n)
    mag = np.geomspace(1e-38, max(abs(lo), abs(hi)), n)
    both = np.concatenate([lin, mag, -mag]).astype(np.float32)
    return both[(both >= np.float32(lo)) & (both <= np.float32(hi))]


SWEEPS = {
    "exp": lambda: sweep(-104.0, 89.0),
    "tanh": lambda: sweep(-20.0, 20.0),
    "log": lambda: np.concatenate([sweep(1e-45, 3e38), np.linspace(0.5, 2.0, 200_001, dtype=np.float32),
                                   np.float32(2.0) ** np.arange(-149, 128, dtype=np.float32)]),
    "sin": lambda: np.concatenate([sweep(-4.0e9, 4.0e9), sweep(-100.0, 100.0), np.float32(2.0) ** np.arange(-149, 32)]),
}
SWEEPS["cos"] = SWEEPS["sin"]
SWEEPS["log2"] = SWEEPS["log10"] = SWEEPS["log"]
SWEEPS.update({
    "asin": lambda: sweep(-1.0, 1.0), "acos": lambda: sweep(-1.0, 1.0), "atanh": lambda: sweep(-0.99999994, 0.99999994),
    "atan": lambda: sweep(-3e38, 3e38), "asinh": lambda: sweep(-3e38, 3e38), "acosh": lambda: sweep(1.0, 3e38),
    "sinh": lambda: sweep(-89.4, 89.4), "cosh": lambda: sweep(-89.4, 89.4)})


def pairs(n: int = 300_000) -> tuple[np.ndarray, np.ndarray]:
    """Random float32 pairs over every sign and magnitude, plus small integers
    (atan2 at equal magnitudes, pow at integer exponents)."""
    rng = np.random.default_rng(7)
    def values():
        return (rng.choice([-1.0, 1.0], n) * 10.0 ** rng.uniform(-38, 38, n)).astype(np.float32)
    small = rng.integers(-20, 21, (2, n // 10)).astype(np.float32)
    return np.concatenate([values(), small[0]]), np.concatenate([values(), small[1]])


def two_argument_sweep(name: str) -> tuple[np.ndarray, np.ndarray]:
    a, b = pairs()
    if name == "pow":  # the helper's contract: x >= 0 (lowering.printer's ``power`` passes |x|)
        a = np.abs(a)
        b = b / np.float32(1e36)  # exponents in about [-100, 100]: results over the whole float32 range
        b[-a.size // 10:] = np.float32(np.rint(b[-a.size // 10:] * 1e36))
        a = np.where(a > 1e-30, a, np.float32(1.5))
    return a, b


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_within_two_ulp(name: str, kind: str) -> None:
    x = SWEEPS[name]()
    exact = REFERENCE[name](x.astype(np.float64))
    finite = np.abs(exact) < np.finfo(np.float32).max
    assert ulps(run(name, x, kind)[finite], exact[finite]).max() <= 2.0


@pytest.mark.parametrize("name", sorted(REFERENCE2))
def test_two_arguments_within_two_ulp(name: str, kind: str) -> None:
    a, b = two_argument_sweep(name)
    with np.errstate(over="ignore"):
        exact = REFERENCE2[name](a.astype(np.float64), b.astype(np.float64))
    finite = np.abs(exact) < np.finfo(np.float32).max
    assert ulps(run(name, a, kind, b)[finite], exact[finite]).max() <= 2.0


def test_sin_of_tiny_is_exact(kind: str) -> None:
    tiny = np.float32([1e-30, -1e-30, 2.0 ** -149])
    np.testing.assert_array_equal(run("sin", tiny, kind), tiny)


EDGES = np.float32([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 88.72283, 88.72284, -87.33655, -103.9,
                    -104.5, 3.0e38, -3.0e38, 1.0, -1.0, 4294967296.0])


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_edge_values(name: str, kind: str) -> None:
    with np.errstate(all="ignore"):
        exact = REFERENCE[name](EDGES).astype(np.float32)
    got = run(name, EDGES, kind)
    if name in ("sin", "cos"):  # past 2^32 the helpers give NaN (cpu_math's docstring)
        exact = np.where(np.abs(EDGES) < 2.0 ** 32, exact, np.nan).astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(exact))
    ok = ~np.isnan(exact)
    close = np.isclose(got[ok], exact[ok], rtol=3e-7, atol=0.0)
    assert close.all(), (EDGES[ok][~close], got[ok][~close], exact[ok][~close])
    zero = ok & (exact == 0)  # exp(-inf) = +0, log(1) = +0, sin(-0) = tanh(-0) = -0
    np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(exact[zero]))


SPECIAL = np.float32([0.0, -0.0, 1.0, -1.0, 2.0, 0.5, np.inf, -np.inf, np.nan, 1e-45, 3e38])


@pytest.mark.parametrize("name", sorted(REFERENCE2))
def test_two_argument_edge_values(name: str, kind: str) -> None:
    """Every pair of special values (for pow only x >= 0, the helper's contract;
    lowering.printer's ``power`` covers 1**y and x**0 at NaN)."""
    a, b = (grid.ravel() for grid in np.meshgrid(SPECIAL, SPECIAL))
    if name == "pow":
        keep = ~np.signbit(a) & (a != 1.0) & (b != 0.0)
        a, b = a[keep], b[keep]
    with np.errstate(all="ignore"):
        exact = REFERENCE2[name](a, b).astype(np.float32)
    got = run(name, a, kind, b)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(exact))
    ok = ~np.isnan(exact)
    np.testing.assert_allclose(got[ok], exact[ok], rtol=3e-7, atol=0.0)
    np.testing.assert_array_equal(np.signbit(got[ok]), np.signbit(exact[ok]))
