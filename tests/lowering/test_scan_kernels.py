"""The scans' device kernels (``lowering.library_kernels.scans``) against JAX
in float64: every strategy (the CPU device's loop in memory order, with and
without a trailing axis, and its worker threads; lavapipe's thread per line
for small integer and float64 scans, and its thread per piece of a long line;
the workgroup reduce-then-scan of Vulkan and CUDA, run on lavapipe), forward
and reversed, for add, multiply and the linear recurrence cumprod's gradient
runs; and that the programs run no host step.  Also that a scan's graph stays
O(n): one library node each way, no triangular sum."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import symdiff as sd
from symdiff.ir.library import library_nodes

jax.config.update("jax_enable_x64", True)

DEVICES = [pytest.param(d, marks=[pytest.mark.vulkan] if d == "vulkan" else []) for d in ("cpu", "vulkan")]


def _scans(x, y, xp=np):
    """cumsum and cumprod both ways (the gradient of a cumprod is a reversed linear recurrence), a scan
    along the leading axis, and the differences and trapezoid rule (index maps) in the same program."""
    return (xp.cumsum(x, axis=1) + xp.cumprod(y, axis=1)[:, ::-1] + xp.cumsum(x[:, ::-1], axis=1),
            xp.cumsum(y, axis=0), xp.trapezoid(xp.diff(x, n=2, axis=1, prepend=0.5), dx=0.5, axis=1))


def _reference(x, y, cts):
    """Values and the VJP of ``_scans`` by JAX in float64."""
    @jax.jit   # one XLA compile: run op by op, JAX's scans' VJPs cost 3 s of CPU here
    def values_and_vjp(x, y, cts):
        values, pullback = jax.vjp(jax.jit(lambda x, y: _scans(x, y, jnp)), x, y)
        return values, *pullback(cts)
    return values_and_vjp(x.astype(np.float64), y.astype(np.float64), tuple(ct.astype(np.float64) for ct in cts))


@pytest.mark.parametrize("device", DEVICES)
def test_scan_kernels_match_float64(device):
    """On lavapipe lines of 1500 go in pieces of 256; the CPU device's loop is one either way."""
    if device not in sd.available_devices():
        pytest.skip(f"{device} is not available here")
    n = 1500
    rng = np.random.default_rng(n)
    x = rng.standard_normal((3, n)).astype(np.float32)
    y = rng.uniform(0.995, 1.005, size=(3, n)).astype(np.float32)
    y[1, 4] = 0.0                                   # a zero: cumprod's gradient without division
    cts = tuple(rng.standard_normal(s).astype(np.float32) for s in [(3, n), (3, n), (3,)])
    prog = sd.differentiable_program(lambda x, y: _scans(x, y))
    values, grads = prog.vjp(x, y, cotangent=cts, device=device)
    want_values, want_x, want_y = _reference(x, y, cts)
    for got, want in zip(values, want_values):
        np.testing.assert_allclose(got, want, rtol=3e-6, atol=3e-6 * np.abs(want).max())
    np.testing.assert_allclose(grads["x"], want_x, rtol=3e-6, atol=3e-6 * np.abs(want_x).max())
    np.testing.assert_allclose(grads["y"], want_y, rtol=3e-5, atol=3e-5 * np.abs(want_y).max())
    assert all(s["host_steps"] == 0 and s["library_kernels"] > 0 for s in prog.stats().values())


@pytest.mark.vulkan
def test_integer_scans_and_float64_on_lavapipe():
    """lavapipe's thread per line in int32 and float64 (the CPU device's loop is one template for every dtype)."""
    device = "vulkan"
    if device not in sd.available_devices():
        pytest.skip(f"{device} is not available here")
    ints = np.arange(-6, 18, dtype=np.int32).reshape(4, 6)
    wide = np.linspace(0.5, 1.5, 24).reshape(4, 6)
    prog = sd.differentiable_program(lambda i, w: (np.cumsum(i, axis=0), np.cumprod(i[:, :3], axis=1),
                                                   np.cumprod(w, axis=0)))
    got = prog(ints, wide, device=device)
    np.testing.assert_array_equal(got[0], np.cumsum(ints, 0))
    np.testing.assert_array_equal(got[1], np.cumprod(ints[:, :3], 1))
    np.testing.assert_allclose(got[2], np.cumprod(wide, 0), rtol=1e-14)
    assert got[0].dtype == np.int32
    assert all(s["host_steps"] == 0 for s in prog.stats().values())


def test_a_scan_is_one_node_of_linear_size():
    """cumsum's value and gradient: one scan node each way, and no tasklet with more points than elements."""
    n = 4096
    prog = sd.differentiable_program(lambda x: np.sum(np.cumsum(x) ** 2))
    prog(np.ones(n))
    graph = prog.backward_graph()
    assert sorted(node.op for node in library_nodes(graph)) == ["scan.add", "scan.add"]
    for t in graph.tasklets():
        points = int(np.prod([int(end) - int(begin) for _, begin, end in t.domain]))
        assert points <= n, f"{t.name} runs over {points} points"


def test_without_a_kernel_the_node_is_a_host_step():
    """An op with no device kernel for its dtype (the scan of bools is cast first, so take a user op)
    still runs, as a host step, and says so in stats()."""
    double = sd.library_node("test.scan_fallback_double", shape=lambda x: x, numpy=lambda x: 2 * x)
    prog = sd.differentiable_program(lambda x: np.cumsum(double(x)))
    x = np.arange(5.0)
    np.testing.assert_allclose(prog(x, device="cpu"), np.cumsum(2 * x))
    (stats,) = prog.stats().values()
    assert stats["host_steps"] == 1 and stats["library_kernels"] == 1


def test_cuda_text_compiles():
    """Every scan strategy's CUDA module passes Slang's CUDA back end (no GPU needed): a thread per line,
    and the three workgroup entry points of the reduce-then-scan, for add and the linear recurrence."""
    slang_compiler = pytest.importorskip("slang_compiler")
    from symdiff.lowering import backends, library_kernels
    for op, arity in (("scan.add", 1), ("scan.linear", 2)):
        for shape in ((4096, 3), (2, 100000)):
            spec = [(shape, "float32")] * arity
            kernel = library_kernels.build(op, backends.cuda.TARGET, spec, spec[:1], {"axis": 1, "reverse": True})
            entries = sorted({d.entry for d in kernel.dispatches})
            assert len(entries) == (1 if shape[0] > 2 else 3)
            slang_compiler.compile_source(kernel.source, "cuda", entries)


def _long_scan(x: sd.f64[2, 3000]):
    return np.cumsum(x, axis=1)


def test_worker_threads_give_the_same_bits_for_any_count(monkeypatch):
    """On the CPU device, long contiguous lines go to more than two worker threads in pieces; the pieces do
    not depend on the worker count, so neither do the bits.  Checked against float64 numpy, with the
    thresholds lowered so that lines of 3000 take the workers."""
    if "cpu" not in sd.available_devices():
        pytest.skip("cpu is not available here")
    from dataclasses import replace
    from symdiff.lowering import backends, library_kernels
    lowered = lambda t: replace(t, tuning=replace(t.tuning, scan_on_workers=1000, scan_cpu_chunk=100))  # noqa: E731
    x = np.random.default_rng(7).uniform(0.9999, 1.0001, size=(2, 3000))
    graph = sd.differentiable_program(_long_scan).graph
    (name,) = graph.meta.get("result_names", graph.results)
    results = {}
    for workers in ("3", "8"):
        monkeypatch.setenv("SYMDIFF_CPU_THREADS", workers)
        with backends.targets_changed(lowered):
            kernel = library_kernels.build("scan.add", backends.of("cpu").target(), [((2, 3000), "float64")], [],
                                           {"axis": 1})
            assert kernel.dispatches[0].entry == "scan_workers"
            results[workers] = sd.lowering.compile(graph, device="cpu")({"x": x})[name]
        np.testing.assert_allclose(results[workers], np.cumsum(x, 1), rtol=1e-14)
    np.testing.assert_array_equal(results["3"], results["8"])


@pytest.mark.vulkan
@pytest.mark.parametrize("op", ["scan.multiply", "scan.linear"])
def test_the_workgroup_scan_on_lavapipe(op):
    """Vulkan's and CUDA's workgroup reduce-then-scan (lavapipe itself takes pieces, its barriers being slow),
    run on lavapipe: three blocks a line and a reversed line, against a float64 loop."""
    if "vulkan" not in sd.available_devices():
        pytest.skip("vulkan is not available here")
    from symdiff.lowering import backends, library_kernels, runtime
    from symdiff.lowering.library_kernels.launch import Launch
    rng = np.random.default_rng(3)
    arrays = [rng.uniform(0.999, 1.001, size=(2, 5000)).astype(np.float32) for _ in range(2 if op == "scan.linear"
                                                                                         else 1)]
    specs = [((2, 5000), "float32")] * len(arrays)
    kernel = library_kernels.build(op, backends.vulkan.TARGET, specs, specs[:1], {"axis": 1, "reverse": True})
    assert [d.entry for d in kernel.dispatches] == ["block_totals", "scan_totals", "block_outputs"]
    (got,) = Launch("vulkan", kernel, specs[:1])([runtime.asarray(a, "vulkan") for a in arrays])
    a, b = (arrays[0].astype(np.float64), arrays[1].astype(np.float64) if len(arrays) > 1 else None)
    want, y = np.zeros_like(a), np.zeros(2) if b is not None else np.ones(2)
    for k in range(a.shape[1] - 1, -1, -1):   # y_k = a_k y_{k+1} + b_k, or y_k = y_{k+1} * a_k
        y = a[:, k] * y + (b[:, k] if b is not None else 0)
        want[:, k] = y
    np.testing.assert_allclose(got.numpy(), want, rtol=2e-6)
