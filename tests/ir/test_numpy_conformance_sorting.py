"""sort, argsort, the quantiles and histogram (issue 31's selections) against
jax.numpy float64: value and VJP on the numpy device, over numpy's argument
forms, with ties (the gradient follows the stable order, as jax.lax.sort)
and NaNs; then one combined program on the Slang devices."""
import numpy as np
import pytest

from numpy_oracle import SLANG_DEVICES, arrays, check, need, program, refused

X, Y = arrays((3, 5), (3, 5), seed=11)
D = arrays((2, 3, 4), seed=12)[0]
V = arrays((7,), seed=13)[0]
S = arrays((), seed=14)[0]
Q = np.array([0.2, 0.9])
TIES = np.array([[1.0, 2.0, 1.0, 3.0, 2.0, 1.0], [0.5, 0.5, 0.5, 0.5, -1.0, 2.0]])
XN = X.copy()
XN[0, 1] = XN[2, 3] = XN[2, 0] = np.nan
XN_ROW = XN.copy()
XN_ROW[1, :] = np.nan
SAMPLES = np.array([0.0, 0.5, 1.0, 1.0, 2.0, 3.0, -1.0, 0.25, 2.5])   # on edges, outside the range, repeated
EDGES = np.array([-0.5, 0.0, 0.5, 1.0, 2.5])

# several functions per program: each program costs JAX op-by-op compiles, so the cases are grouped
CASES = {
    "sort": (lambda xp, x, d, s: (xp.sort(x), xp.sort(x, axis=0), xp.sort(d, axis=-2, stable=True),
                                  xp.sort(x, axis=None), xp.sort(s, axis=None)), X, D, S),
    "sort_ties_and_ints": (lambda xp, t: (xp.sort(t, axis=1), xp.sort((t * 2).astype(np.int32)) * 1.0 + t), TIES),
    "argsort": (lambda xp, x, t, y: (xp.take_along_axis(x, xp.argsort(x, axis=-2), -2) * 2,
                                     xp.take_along_axis(y * t, xp.argsort(t), 1),     # ties: the stable order
                                     xp.ravel(x)[xp.argsort(x, axis=None)[:3]]), X, TIES, arrays((2, 6), seed=15)[0]),
    "median": (lambda xp, x, d, t, s, xn: (xp.median(x), xp.median(d, axis=(0, 2), keepdims=True),
                                           xp.median(t, axis=1), xp.median(s), xp.median(xn, axis=1)),
               X, D, TIES, S, XN),
    "quantile": (lambda xp, x, d, t: (xp.quantile(x, 0.3, axis=1),
                                      xp.quantile(d, np.array([0.1, 0.5, 1.0]), axis=-1, keepdims=True),
                                      xp.quantile(t, 0.45), xp.percentile(d, 40.0, axis=(-1, 0)),
                                      xp.percentile(x[0], np.array([25.0, 75.0]))), X, D, TIES),
    "quantile_methods_traced_q": (lambda xp, x, q: (xp.quantile(x, q, axis=1),
                                                    xp.quantile(x, 0.3, axis=1, method="lower"),
                                                    xp.quantile(x, 0.3, axis=1, method="higher"),
                                                    xp.quantile(x, np.array([0.3, 0.5]), axis=0, method="midpoint"),
                                                    xp.quantile(x, 0.3, axis=1, method="nearest")), X, Q),
    "nan_forms": (lambda xp, x, r: (xp.nanmedian(x, axis=1), xp.nanquantile(x, 0.4, axis=0, keepdims=True),
                                    xp.nanpercentile(r, 30.0, axis=1)), XN, XN_ROW),   # r: an all-NaN slice
    "histogram": (lambda xp, v, e: (xp.histogram(v, EDGES, weights=v[::-1] ** 2)[0],
                                    xp.histogram(v, e, weights=v * v, density=True)[0]), SAMPLES, EDGES),
}


@pytest.mark.parametrize("name", list(CASES))
def test_sorting_matches_jax(name):
    body, *inputs = CASES[name]
    check(body, *inputs)


@pytest.mark.parametrize("args", [(4, (0.0, 2.0), False), (EDGES, None, False), (1, None, False),
                                  (3, (1.0, 1.0), False), (5, None, True)], ids=str)
def test_histogram_against_numpy(args):
    """Counts (int32, no gradient), numpy's closed last bin, the edges, and a
    density with edges from the data, against numpy's own histogram."""
    import symdiff as sd
    bins, range_, density = args
    prog = sd.differentiable_program(lambda v: np.histogram(v, bins, range=range_, density=density))
    for data in (SAMPLES, X):
        got, want = prog(data, device="numpy"), np.histogram(data, bins, range=range_, density=density)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12)
        assert got[0].dtype == (np.float64 if density else np.int32)


def test_sort_kind_is_accepted():
    """numpy's kind= (JAX refuses it): every sort here is stable."""
    check(lambda xp, x: (xp.sort(x, kind="heapsort"), xp.argsort(x, kind="quicksort")), TIES,
          jax_body=lambda xp, x: (xp.sort(x), xp.argsort(x, stable=True)), grad=False)


def test_sort_and_quantile_jvp_match_jax():
    """The library node's JVP (a gather through the permutation) against jax.jvp, ties included."""
    import jax
    import jax.numpy as jnp
    body = lambda xp, t: xp.sort(t, axis=0) * 2.0 + xp.quantile(t, 0.35, axis=1, keepdims=True)  # noqa: E731
    tangent = arrays(TIES.shape, seed=16)[0]
    value, out = program(body, 1).jvp(TIES, tangents={"a0": tangent}, device="numpy")
    want, want_out = jax.jvp(jax.jit(lambda t: body(jnp, t)), (jnp.asarray(TIES),), (jnp.asarray(tangent),))
    np.testing.assert_allclose(value, want, rtol=1e-12)
    np.testing.assert_allclose(out, want_out, rtol=1e-12, atol=1e-14)


def test_sorting_refusals():
    refused(lambda xp, x: xp.quantile(x, 1.5), X, match=r"must lie in \[0, 1\]")
    refused(lambda xp, x: xp.quantile(x, 0.5, method="hazen"), X, match="method='hazen' is not supported")
    refused(lambda xp, x: xp.sort(x, axis=(0, 1)), X, match="must be an int or None")
    refused(lambda xp, s: xp.sort(s), S, match="out of bounds|axis")
    refused(lambda xp, x: xp.histogram(x, "auto"), X, match="data-dependent")
    refused(lambda xp, x: xp.histogram(x, 3, range=(x[0, 0], 2.0)), X, match="pass the edges")
    refused(lambda xp, x: xp.bincount(x.astype(np.int32).ravel()), X, match="np.add.at")


def combined(xp, x, y):
    """The sort node as a host step between kernels, its gathers as kernels."""
    return xp.sort(x, axis=0) + xp.take_along_axis(y, xp.argsort(x, axis=1), 1), xp.median(x, axis=1)


@pytest.mark.parametrize("device", SLANG_DEVICES)
def test_sorting_on_slang_devices(device):
    need(device)
    check(combined, X, Y, device=device)
