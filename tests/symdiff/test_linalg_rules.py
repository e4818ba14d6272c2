"""np.linalg through library nodes on the numpy device: value, VJP and JVP
against jax.numpy.linalg in float64 at rtol 1e-9, unbatched and batched."""
from __future__ import annotations

import numpy as np
import pytest

from linalg_oracle import check, general, spd

rng = np.random.default_rng(7)


@pytest.mark.parametrize("shapes", [((1, 1), (1, 1)), ((4, 4), (4, 3)), ((5, 5), (5,)),
                                    ((2, 3, 3), (2, 3, 2)), ((2, 3, 3), (3, 2)), ((3, 3), (2, 3, 4))])
def test_solve(shapes):
    a_shape, b_shape = shapes
    check(lambda xp, a, b: xp.linalg.solve(a, b), general(rng, *a_shape), rng.normal(size=b_shape))


@pytest.mark.parametrize("n", [1, 3, 6])
def test_inv_det_slogdet(n):
    a = general(rng, 2, n, n)
    check(lambda xp, a: xp.linalg.inv(a), a)
    check(lambda xp, a: xp.linalg.det(a), a)
    check(lambda xp, a: tuple(xp.linalg.slogdet(a))[1], a)


def test_slogdet_sign_has_no_derivative():
    a = general(rng, 3, 3)
    check(lambda xp, a: tuple(xp.linalg.slogdet(-a)), a)


@pytest.mark.parametrize("shape", [(1, 1), (4, 4), (2, 5, 5)])
def test_cholesky(shape):
    check(lambda xp, a: xp.linalg.cholesky(a), spd(rng, *shape))


def test_cholesky_upper():
    check(lambda xp, a: xp.linalg.cholesky(a, upper=True), spd(rng, 4, 4))


@pytest.mark.parametrize("shape", [(4, 4), (6, 3), (2, 5, 2)])
def test_qr(shape):
    check(lambda xp, a: tuple(xp.linalg.qr(a)), general(rng, *shape))


@pytest.mark.parametrize("shape", [(1, 1), (4, 4), (2, 3, 3)])
def test_eigh(shape):
    # eigenvectors are defined up to sign: v * v is not, and still tests their derivative
    check(lambda xp, a: (xp.linalg.eigh(a)[0], xp.linalg.eigh(a)[1] ** 2), spd(rng, *shape), rtol=1e-8)
    check(lambda xp, a: xp.linalg.eigvalsh(a), spd(rng, *shape))


@pytest.mark.parametrize("shape", [(4, 4), (6, 3), (3, 5), (2, 4, 3)])
def test_svd(shape):
    def fn(xp, a):
        u, s, vh = xp.linalg.svd(a, full_matrices=False)
        return u * u, s, vh * vh      # singular vectors are defined up to a shared sign
    check(fn, general(rng, *shape), rtol=1e-8)
    check(lambda xp, a: xp.linalg.svd(a, compute_uv=False), general(rng, *shape))
    check(lambda xp, a: xp.linalg.svdvals(a), general(rng, *shape))


@pytest.mark.parametrize("shape", [(4, 4), (5, 3), (3, 5)])
def test_pinv(shape):
    check(lambda xp, a: xp.linalg.pinv(a), general(rng, *shape))


def test_lstsq():
    a, b = general(rng, 6, 3), rng.normal(size=(6, 2))
    check(lambda xp, a, b: xp.linalg.lstsq(a, b)[0], a, b)
    check(lambda xp, a, b: xp.linalg.lstsq(a, b)[1], a, b)


@pytest.mark.parametrize("power", [0, 1, 3, -2])
def test_matrix_power(power):
    check(lambda xp, a: xp.linalg.matrix_power(a, power), general(rng, 2, 3, 3))


@pytest.mark.parametrize("order", [2, -2, "nuc"])
def test_norms(order):
    check(lambda xp, a: xp.linalg.norm(a, order), general(rng, 4, 3))
    check(lambda xp, a: xp.linalg.norm(a, order, axis=(0, 2), keepdims=True), general(rng, 3, 2, 4))


@pytest.mark.parametrize("p", [None, 2, -2, "fro", 1])
def test_cond(p):
    check(lambda xp, a: xp.linalg.cond(a, p), general(rng, 2, 3, 3))


@pytest.mark.parametrize("name", ["solve", "cholesky", "eigvalsh", "det"])
def test_size_64(name):
    fns = {"solve": (lambda xp, a, b: xp.linalg.solve(a, b), (general(rng, 64, 64), rng.normal(size=(64, 3)))),
           "cholesky": (lambda xp, a: xp.linalg.cholesky(a), (spd(rng, 64, 64),)),
           "eigvalsh": (lambda xp, a: xp.linalg.eigvalsh(a), (spd(rng, 64, 64),)),
           "det": (lambda xp, a: xp.linalg.slogdet(a)[1], (general(rng, 64, 64),))}
    fn, args = fns[name]
    check(fn, *args, rtol=1e-8, atol=1e-9)


def test_lstsq_forms_match_numpy():
    import symdiff as sd
    f = sd.differentiable_program(lambda a, b: np.linalg.lstsq(a, b))
    for shape in ((3, 5), (5, 3)):
        a, b = rng.normal(size=shape), rng.normal(size=shape[0])
        for got, want in zip(f(a, b, device="numpy"), np.linalg.lstsq(a, b)):
            assert np.shape(got) == np.shape(want)
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_symbolic_sizes():
    import symdiff as sd
    n = sd.symbol("N")

    @sd.differentiable_program
    def f(a: sd.f64[n, n], b: sd.f64[n]):
        return np.sum(np.linalg.solve(a, b) ** 2)
    for size in (2, 5):
        a, b = general(rng, size, size), rng.normal(size=size)
        np.testing.assert_allclose(f(a, b, device="numpy"), np.sum(np.linalg.solve(a, b) ** 2), rtol=1e-12)
        sd.gradcheck(f, a, b)
