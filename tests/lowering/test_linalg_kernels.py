"""np.linalg's device kernels (lowering.library_kernels.linalg) launched on
their own, on device arrays, against numpy's LAPACK (scipy's for triangular
solves): a GPU's cooperative workgroup per matrix on lavapipe (groupshared
memory, or device memory past its size), one thread per matrix on the CPU
device.  Whole
programs through them: tests/symdiff/test_linalg_device_kernels.py."""
from __future__ import annotations

import numpy as np
import pytest

from symdiff.lowering import backends, library_kernels, runtime
from symdiff.lowering.library_kernels.launch import Launch

scipy_linalg = pytest.importorskip("scipy.linalg")
rng = np.random.default_rng(5)


def _launch(kind: str, op: str, inputs: list[np.ndarray], outputs: list[tuple], params: dict | None = None):
    """On lavapipe the kernels of a GPU's Vulkan (cooperative workgroups, which lavapipe's own target
    leaves for one thread per matrix: the whole programs run that form there)."""
    specs = [(a.shape, str(a.dtype)) for a in inputs]
    target = backends.vulkan.TARGET if kind == "vulkan" else backends.of(kind).target()
    kernel = library_kernels.build(op, target, specs, outputs, params or {})
    assert kernel is not None, f"{op} has no kernel for {specs}"
    return [o.numpy() for o in Launch(kind, kernel, outputs)([runtime.asarray(a, kind) for a in inputs])]


def _spd(*shape, dtype="float64"):
    x = rng.normal(size=shape)
    return (x @ np.swapaxes(x, -1, -2) / shape[-1] + np.eye(shape[-1])).astype(dtype)


def _pivoting(*shape, dtype="float64"):
    """Matrices whose leading entries are zero: LU without row swaps fails on them."""
    a = rng.normal(size=shape)
    a[..., 0, 0] = 0.0
    return a.astype(dtype)


def _zero_below(a):
    """Column 1 zero below the diagonal: LAPACK makes no reflection there (its sign stays)."""
    a[2:, 1], a[1, 1] = 0.0, -2.0
    return a


def _tol(dtype):
    return dict(rtol=2e-4, atol=2e-5) if dtype == "float32" else dict(rtol=1e-10, atol=1e-12)


# (op, inputs, params): sizes 1 and 64, float64 at 64 past groupshared memory (device memory), a
# broadcast batch; each kernel compiles once per device and is shared with the singular cases below
CASES = {
    "cholesky_1": ("linalg.cholesky", lambda: [_spd(1, 1)], {}),
    "cholesky_64_f64": ("linalg.cholesky", lambda: [_spd(64, 64)], {}),
    "cholesky_batch_f32": ("linalg.cholesky", lambda: [_spd(2, 3, 9, 9, dtype="float32")], {}),
    "lower": ("linalg.solve_triangular", lambda: [_spd(3, 6, 6), rng.normal(size=(1, 6, 2))], {"lower": True}),
    "upper": ("linalg.solve_triangular", lambda: [_spd(6, 6), rng.normal(size=(3, 6, 2))], {"lower": False}),
    "solve_batch": ("linalg.solve", lambda: [_pivoting(3, 7, 7), rng.normal(size=(7, 3))], {}),
    "solve_64_f64": ("linalg.solve", lambda: [_pivoting(64, 64), rng.normal(size=(64, 5))], {}),
    "inv": ("linalg.inv", lambda: [_pivoting(2, 5, 5)], {}),
    "det": ("linalg.det", lambda: [_pivoting(2, 5, 5)], {}),
    "slogdet_f32": ("linalg.slogdet", lambda: [_pivoting(2, 5, 5, dtype="float32")], {}),
    "qr_tall": ("linalg.qr", lambda: [_zero_below(rng.normal(size=(7, 4)))], {}),
    "qr_wide_f32": ("linalg.qr", lambda: [rng.normal(size=(2, 3, 5)).astype("float32")], {}),
}
ON_CPU = ("cholesky_batch_f32", "solve_batch", "qr_tall")   # one thread per matrix: the same steps; g++ compiles each


def _numpy(op: str, inputs: list[np.ndarray], params: dict) -> list[np.ndarray]:
    a = inputs[0].astype(np.float64)
    if op == "linalg.solve_triangular":
        batch = np.broadcast_shapes(a.shape[:-2], inputs[1].shape[:-2])
        b = np.broadcast_to(inputs[1], batch + inputs[1].shape[-2:])
        a = np.broadcast_to(a, b.shape[:-2] + a.shape[-2:])
        pairs = zip(a.reshape(-1, *a.shape[-2:]), b.reshape(-1, *b.shape[-2:]))
        solved = [scipy_linalg.solve_triangular(x, y, lower=params["lower"]) for x, y in pairs]
        return [np.stack(solved).reshape(b.shape)]
    if op == "linalg.solve":
        return [np.linalg.solve(a, inputs[1])]
    out = getattr(np.linalg, op.split(".")[1])(a)
    return list(out) if op in ("linalg.slogdet", "linalg.qr") else [out]


def _device_cases():
    return [pytest.param(kind, name, marks=[pytest.mark.vulkan] if kind == "vulkan" else [], id=f"{kind}-{name}")
            for kind in ("vulkan", "cpu") for name in CASES if kind == "vulkan" or name in ON_CPU]


def _present(kind: str) -> None:
    if kind not in backends.available_devices() and kind != "cpu":
        pytest.skip(f"no {kind} device here")


@pytest.mark.parametrize("kind, name", _device_cases())
def test_kernel_against_lapack(kind, name):
    _present(kind)
    op, make, params = CASES[name]
    inputs = make()
    want = _numpy(op, inputs, params)
    got = _launch(kind, op, inputs, [(w.shape, str(inputs[0].dtype)) for w in want], params)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, **_tol(str(inputs[0].dtype)))


@pytest.mark.vulkan
@pytest.mark.parametrize("name", ["cholesky_batch_f32", "lower", "solve_batch", "inv"])
def test_one_singular_matrix_in_a_batch_raises(name):
    """numpy's LinAlgError, as the host step raises it: one bad matrix of the batch is enough."""
    _present("vulkan")
    op, make, params = CASES[name]
    inputs = make()
    shapes = [(w.shape, str(inputs[0].dtype)) for w in _numpy(op, inputs, params)]
    inputs[0][(1,) * (inputs[0].ndim - 2)] = 0.0 if name != "cholesky_batch_f32" else -np.eye(9)
    with pytest.raises(np.linalg.LinAlgError):
        _launch("vulkan", op, inputs, shapes, params)


@pytest.mark.vulkan
def test_jacobi_eigh_against_lapack():
    """Eigenvalues as numpy's; eigenvectors up to sign (orthonormal, reconstructing the matrix
    read from the named triangle, the projector of a simple eigenvalue as numpy's)."""
    _present("vulkan")
    x = rng.normal(size=(3, 9, 9))
    a = x + np.swapaxes(x, -1, -2)
    a[..., 0, 8] += 5.0    # junk in the triangle UPLO="L" does not read
    want_w, want_v = np.linalg.eigh(a)
    w, v = _launch("vulkan", "linalg.eigh", [a], [(want_w.shape, "float64"), (want_v.shape, "float64")],
                   {"UPLO": "L"})
    np.testing.assert_allclose(w, want_w, rtol=1e-12, atol=1e-12)
    vt = np.swapaxes(v, -1, -2)
    np.testing.assert_allclose(v @ vt, np.broadcast_to(np.eye(9), v.shape), atol=1e-13)
    np.testing.assert_allclose(v @ (w[..., None] * vt), np.tril(a) + np.swapaxes(np.tril(a, -1), -1, -2), atol=1e-12)
    np.testing.assert_allclose(v[..., :, :1] * v[..., None, :, 0], want_v[..., :, :1] * want_v[..., None, :, 0],
                               atol=1e-12)


@pytest.mark.vulkan
@pytest.mark.parametrize("shape", [(7, 4), (2, 3, 5)])
def test_jacobi_svd_against_lapack(shape):
    """Singular values as numpy's; vectors up to sign (orthonormal, reconstructing ``a``), a zero
    column's missing left vector completed (tall) and a wide batch through its transpose."""
    _present("vulkan")
    a = rng.normal(size=shape)
    a[..., 1] = 0.0
    want_u, want_s, want_vh = np.linalg.svd(a, full_matrices=False)
    u, s, vh = _launch("vulkan", "linalg.svd", [a], [(x.shape, "float64") for x in (want_u, want_s, want_vh)])
    np.testing.assert_allclose(s, want_s, atol=1e-13)
    np.testing.assert_allclose(u @ (s[..., None] * vh), a, atol=1e-13)
    for x in (np.swapaxes(u, -1, -2) @ u, vh @ np.swapaxes(vh, -1, -2)):
        np.testing.assert_allclose(x, np.broadcast_to(np.eye(s.shape[-1]), x.shape), atol=1e-13)


@pytest.mark.vulkan
def test_singular_determinants_are_numpys():
    _present("vulkan")
    a = _pivoting(2, 5, 5)
    a[1, :, 3] = 0.0    # a zero column: a zero pivot, exactly
    (det,) = _launch("vulkan", "linalg.det", [a], [((2,), "float64")])
    sign, logabs = _launch("vulkan", "linalg.slogdet", [a.astype(np.float32)], [((2,), "float32")] * 2)
    want_sign, want_log = np.linalg.slogdet(a)
    assert det[1] == 0.0 and sign[1] == want_sign[1] == 0.0 and logabs[1] == want_log[1] == -np.inf
    np.testing.assert_allclose(det[0], np.linalg.det(a[0]), rtol=1e-10)


def test_host_steps_past_the_kernels_limits():
    """None (the node stays a host step): past linalg_max_n, past linalg_host_lapack_n on the CPU
    device, past linalg_jacobi_n for eigh (``targets.Tuning``), and slogdet in float64 where double log
    is wrong."""
    cpu, vulkan, cuda = backends.cpu.TARGET, backends.vulkan.TARGET, backends.cuda.TARGET
    small = cpu.tuning.linalg_host_lapack_n + 1
    assert library_kernels.build("linalg.cholesky", cpu, [((small, small), "float32")],
                                 [((small, small), "float32")], {}) is None
    n = vulkan.tuning.linalg_max_n + 1
    assert library_kernels.build("linalg.solve", vulkan, [((n, n), "float64"), ((n, 1), "float64")],
                                 [((n, 1), "float64")], {}) is None
    assert library_kernels.build("linalg.inv", cpu, [((n, n), "float32")], [((n, n), "float32")], {}) is None
    jacobi = cuda.tuning.linalg_jacobi_n + 1    # one thread per matrix: smaller limits
    assert library_kernels.build("linalg.eigh", cuda, [((jacobi, jacobi), "float32")],
                                 [((jacobi,), "float32"), ((jacobi, jacobi), "float32")], {}) is None
    spec = [((4, 4), "float64")]
    assert library_kernels.build("linalg.slogdet", backends.vulkan.LAVAPIPE, spec, [((), "float64")] * 2, {}) is None
    assert library_kernels.build("linalg.slogdet", backends.vulkan.TARGET, spec, [((), "float64")] * 2, {}) is not None


def test_workgroup_forms():
    """Groupshared memory and barriers where threads cooperate; neither on the CPU device."""
    spec = [((8, 8), "float32")]
    gpu = library_kernels.build("linalg.cholesky", backends.cuda.TARGET, spec, spec, {})
    cpu = library_kernels.build("linalg.cholesky", backends.cpu.TARGET, spec, spec, {})
    assert "groupshared" in gpu.source and "GroupMemoryBarrierWithGroupSync" in gpu.source
    assert "groupshared" not in cpu.source and "Barrier" not in cpu.source
    assert gpu.dispatches[0].threads == (backends.cuda.TARGET.tuning.linalg_threads, 1, 1) and cpu.dispatches[0].threads == (1, 1, 1)
    batch = [((40, 8, 8), "float32")]   # lavapipe: one thread per matrix, 32 to a workgroup
    lavapipe = library_kernels.build("linalg.cholesky", backends.vulkan.LAVAPIPE, batch, batch, {})
    assert "Barrier" not in lavapipe.source and lavapipe.dispatches[0].threads == (
        2 * backends.vulkan.LAVAPIPE.tuning.linalg_matrices, 1, 1)
    big = [((64, 64), "float64")]   # 32 KiB: past the 16 KiB groupshared budget
    on_device = library_kernels.build("linalg.inv", backends.cuda.TARGET, big, big, {})
    assert "groupshared" not in on_device.source and "AllMemoryBarrierWithGroupSync" in on_device.source
    assert on_device.scratch[1] == ("float64", 64 * 64)


def test_cuda_text_compiles():
    """The CUDA target's kernels pass Slang's CUDA back end (no GPU needed)."""
    slang_compiler = pytest.importorskip("slang_compiler")
    specs = {"linalg.solve": ([((3, 6, 6), "float64"), ((6, 2), "float64")], [((3, 6, 2), "float64")]),
             "linalg.cholesky": ([((64, 64), "float64")], [((64, 64), "float64")]),
             "linalg.qr": ([((5, 3), "float32")], [((5, 3), "float32"), ((3, 3), "float32")]),
             "linalg.svd": ([((2, 4), "float64")], [((2, 2), "float64"), ((2,), "float64"), ((2, 4), "float64")])}
    for op, (inputs, outputs) in specs.items():
        kernel = library_kernels.build(op, backends.cuda.TARGET, inputs, outputs, {})
        slang_compiler.compile_source(kernel.source, "cuda", [kernel.dispatches[0].entry])
