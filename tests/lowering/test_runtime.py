"""Devices, caching, device arrays, float64 policy."""
import re

import numpy as np
import pytest
import sympy

import symdiff as sd
from symdiff import ir
from symdiff import lowering
from symdiff.lowering import backends
from symdiff.lowering.printer import prelude
from lowering_graphs import G, chain, histogram, i, symbolic_scale


def test_available_devices_always_has_cpu_and_numpy():
    avail = lowering.available_devices()
    assert "cpu" in avail and "numpy" in avail


def test_numpy_device_is_the_interpreter():
    g, inputs = chain(50)
    exe = lowering.compile(g, device="numpy")
    assert exe.device == "numpy" and exe.source is None
    np.testing.assert_array_equal(exe(inputs)["y"], ir.run(g, inputs)["y"])


def test_environment_variable_overrides_the_default_but_not_an_explicit_device(monkeypatch):
    g, _ = chain(50)
    monkeypatch.setenv("SYMDIFF_DEVICE", "numpy")
    assert lowering.compile(g).device == "numpy"
    assert lowering.compile(g, device="cpu").device == "cpu"
    monkeypatch.setenv("SYMDIFF_DEVICE", "tpu")
    with pytest.raises(ValueError, match="unknown device"):
        lowering.compile(g)


def test_auto_prefers_a_hardware_gpu_then_the_measured_order(monkeypatch):
    monkeypatch.delenv("SYMDIFF_DEVICE", raising=False)
    if "cuda" not in lowering.available_devices() and not (
            "vulkan" in lowering.available_devices() and not backends.of("vulkan").is_software()):
        assert backends.resolve("auto") == "cpu"  # before lavapipe: measured, lowering.backends.cpu


def test_second_call_compiles_and_allocates_nothing(device):
    g, inputs = histogram("sum", n=1000)
    exe = lowering.compile(g, device=device)
    first = exe(inputs)
    before = exe.stats()
    second = exe(inputs)  # the histogram is re-zeroed: accumulation starts from the identity each call
    after = exe.stats()
    np.testing.assert_array_equal(first["h"], second["h"])
    assert after["compiles"] == before["compiles"] and after["buffers_allocated"] == before["buffers_allocated"]
    assert after["dispatches"] == before["dispatches"] >= after["kernels"] == 1
    assert after["bytes_moved"] == 1000 * 4 * 2 + 4 * 4
    # a new executable of the same program reuses the compiled module
    assert lowering.compile(g, device=device).stats()["compiles"] == 0


def test_each_size_binding_compiles_once(device):
    g, _ = symbolic_scale()
    exe = lowering.compile(g, device=device)
    assert exe.source is None  # nothing known until a call binds N
    for n in (5, 7, 5):
        np.testing.assert_array_equal(exe({"x": np.ones(n, np.float32)})["y"], np.full(n, 3, np.float32))
    assert exe.stats()["compiles"] <= 2
    # the source shown is the latest binding's (N = 5); the helpers' constants before it do not count
    kernels = exe.source.split(prelude(backends.of(device).target()))[-1]  # lavapipe has its own helpers
    assert re.search(r"\b5\b", kernels) and not re.search(r"\b7\b", kernels)


def test_device_arrays_stay_on_the_device(device):
    g, inputs = chain(100, ops=2)
    exe = lowering.compile(g, device=device)
    x = lowering.asarray(inputs["x"], device=device)
    assert isinstance(x, lowering.DeviceArray) and x.shape == (100,) and x.device == device
    out = exe({"x": x}, return_device_arrays=True)
    assert isinstance(out["y"], lowering.DeviceArray) and exe.stats()["bytes_moved"] == 0
    again = exe({"x": out["y"]}, return_device_arrays=True)  # feed a result back in, no copy to host
    once = ir.run(g, inputs)["y"]
    np.testing.assert_allclose(np.asarray(out["y"]), once, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(again["y"]), ir.run(g, {"x": once})["y"], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(out["y"]), once, rtol=1e-6)  # not overwritten by the next call
    with pytest.raises(ValueError, match="float64"):
        exe({"x": lowering.asarray(inputs["x"].astype(np.float64), device=device)})


def test_each_call_uploads_its_own_values(device):
    """Host arguments are written through views of their buffers kept
    between calls (``Executable._upload``): each call computes on its own
    values, also after a call that bound a device array instead.  Results vs
    the interpreter."""
    g, inputs = chain(100, ops=2)
    exe = lowering.compile(g, device=device)
    for k in range(4):
        x = inputs["x"] + np.float32(k)
        value = lowering.asarray(x, device=device) if k == 2 else x
        np.testing.assert_allclose(exe({"x": value})["y"], ir.run(g, {"x": x})["y"], rtol=1e-6)


def test_a_0d_array_stays_0d_on_the_device(device):
    """``np.ascontiguousarray`` makes a 0-d array 1-d: uploads keep the shape."""
    x = lowering.asarray(np.float32(2.5), device=device)
    assert x.shape == () and float(np.asarray(x)) == 2.5


def test_a_callers_device_array_is_let_go_when_dropped(device):
    """Launches are bound through kept root shader objects, one per set of
    buffers; one binding a caller's device array goes when the caller drops
    the array, so it does not keep the array's memory.  Results vs the
    interpreter."""
    import gc
    g, inputs = chain(100, ops=2)
    exe = lowering.compile(g, device=device)
    x = lowering.asarray(inputs["x"], device=device)
    buffer_id = id(x.buffer)
    first = exe({"x": x})
    (inst,) = exe._instances.values()
    assert any(id(b) == buffer_id for _, buffers in inst.bound.values() for b in buffers)
    del x
    gc.collect()
    assert not any(id(b) == buffer_id for _, buffers in inst.bound.values() for b in buffers)
    y = lowering.asarray(inputs["x"] * 2, device=device)
    np.testing.assert_allclose(first["y"], ir.run(g, inputs)["y"], rtol=1e-6)
    np.testing.assert_allclose(exe({"x": y})["y"], ir.run(g, {"x": inputs["x"] * 2})["y"], rtol=1e-6)


def test_float64_is_exact_where_the_backend_is(device):
    g, inputs = chain(200, dtype="float64")
    if device == "vulkan" and backends.of("vulkan").is_software():
        with pytest.raises(lowering.UnsupportedOnDevice, match="op1"):
            lowering.compile(g, device=device)
        return
    got = lowering.compile(g, device=device)(inputs)["y"]
    np.testing.assert_allclose(got, ir.run(g, inputs)["y"], rtol=1e-13)


def test_float64_arithmetic_runs_on_every_device(device):
    b = G("rational", "float64").c("x", (300,), "argument").c("y", (300,), "result")
    x = b.s("x", "x")
    b.t("poly", [(i, 0, 300)], (x ** 3 + sympy.sqrt(x)) / (1 + x * x), {"x": ("x", (i,))}, ("y", (i,)))
    inputs = {"x": np.linspace(0.01, 3, 300)}
    got = lowering.compile(b.g, device=device)(inputs)["y"]
    np.testing.assert_allclose(got, ir.run(b.g, inputs)["y"], rtol=1e-14)


@pytest.mark.vulkan
def test_auto_routes_double_transcendentals_away_from_lavapipe(monkeypatch):
    if "vulkan" not in lowering.available_devices() or not backends.of("vulkan").is_software():
        pytest.skip("no lavapipe here")
    monkeypatch.delenv("SYMDIFF_DEVICE", raising=False)
    g, inputs = chain(20, ops=3, dtype="float64")
    exe = lowering.compile(g, device="auto")
    assert exe.device != "vulkan"
    np.testing.assert_allclose(exe(inputs)["y"], ir.run(g, inputs)["y"], rtol=1e-13)


@pytest.mark.parametrize("kind", ["numpy", *[d for d in ("cpu", "vulkan") if d in lowering.available_devices()]])
def test_one_executable_called_from_several_threads_returns_each_callers_result(kind):
    """Calls reuse the executable's buffers: without the per-executable lock 1-7%
    of these calls returned another thread's gradient (lavapipe and cpu)."""
    import threading

    import symdiff as sd

    @sd.differentiable_program(device=kind)
    def f(x: sd.f32[64], w: sd.f32[64]):
        return np.sum(np.tanh(x * w) ** 2)

    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(64).astype(np.float32) for _ in range(4)]
    w = rng.standard_normal(64).astype(np.float32)
    expected = [f.value_and_grad(x, w, device="numpy") for x in xs]
    wrong: list[int] = []

    def work(k: int) -> None:
        for _ in range(100):
            value, grads = f.value_and_grad(xs[k], w)
            if not (np.allclose(value, expected[k][0], rtol=1e-4)
                    and np.allclose(grads["x"], expected[k][1]["x"], rtol=1e-3, atol=1e-5)
                    and np.allclose(grads["w"], expected[k][1]["w"], rtol=1e-3, atol=1e-5)):
                wrong.append(k)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong, f"{len(wrong)} of 400 calls returned another thread's result"


def test_probing_devices_from_several_threads_keeps_stdout():
    """The CUDA probe points fd 1 at /dev/null for a moment; two threads probing
    at once restored each other's /dev/null and the process lost its stdout."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import threading, time
        import slangpy as spy
        from symdiff.lowering import backends
        enumerate_adapters = spy.Device.enumerate_adapters
        def slow(kind):  # widen the window in which fd 1 is redirected
            time.sleep(0.05)
            return enumerate_adapters(kind)
        spy.Device.enumerate_adapters = slow
        threads = [threading.Thread(target=backends.available_devices) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print("stdout alive")
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and "stdout alive" in run.stdout, run.stderr[-2000:]


@pytest.mark.parametrize("device_name", ["numpy", "cpu"])
def test_compile_refuses_a_graph_that_breaks_the_ir_rules(device_name):
    """A hand-built plain write of out[floor(i/2)] over i in [0, 8) collides;
    compile used to accept it and every device ran it last-writer-wins."""
    x = sympy.Symbol("x")
    g = ir.DataflowGraph("colliding")
    g.add_container("a", (8,), "float32", "argument")
    g.add_container("out", (4,), "float32", "result")
    g.add_tasklet("spread", [(i, 0, 8)], {"o": x}, {"x": (g.access("a"), (i,))},
                  {"o": (g.new_version("out"), (sympy.floor(i / 2),))})
    with pytest.raises(ir.GraphError, match="spread"):
        lowering.compile(g, device=device_name)


def _unrolled(x: sd.f32[16]):
    """Sixteen in-place steps over a short vector: many kernels, few points (g++ -O0)."""
    for i in range(1, 16):
        x[i] = x[i] * 0.5 + x[i - 1] * x[i - 1]
    return np.sum(x * x)


def test_a_hot_program_is_compiled_again_at_full_optimisation(monkeypatch, tmp_path):
    """A module of many kernels over few points compiles at g++ -O0; once its
    calls have run for ``HOT_RECOMPILE`` times its compile (here at once) it
    is compiled at -O3 and calls go on bit for bit as before, caller's
    device arrays bound as before; the on-disk cache remembers it, so a later
    process compiles it at -O3 at once.  Gradients vs JAX in float64."""
    import jax
    import jax.numpy as jnp
    from symdiff.lowering import cache, runtime
    monkeypatch.setattr(runtime, "HOT_RECOMPILE", 0.0)
    monkeypatch.setenv("SYMDIFF_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("SYMDIFF_DISK_CACHE", raising=False)
    program = sd.differentiable_program(_unrolled)
    x = np.linspace(-0.9, 0.9, 16, dtype=np.float32)
    value, grads = program.value_and_grad(x, device="cpu")
    exe = next(e for e in program._executables.values() if e.graph.meta.get("gradients"))
    (inst,) = exe._instances.values()
    assert inst.level == "maximal" and exe.stats()["compiles"] == 2
    work = sum(k.work for k in inst.module.kernels)
    assert cache.level_for("cpu", inst.module.source, work) == "maximal"  # what a later process picks
    monkeypatch.setenv("SYMDIFF_DISK_CACHE", "0")
    assert cache.level_for("cpu", inst.module.source, work) == "none"  # the level by work alone
    again, again_grads = program.value_and_grad(x, device="cpu")
    on_device = program.value_and_grad(lowering.asarray(x, device="cpu"), device="cpu", device_arrays=True)
    assert again == value and np.array_equal(again_grads["x"], grads["x"])
    assert np.array_equal(np.asarray(on_device[1]["x"]), grads["x"])
    jax.config.update("jax_enable_x64", True)

    def twin(x):
        for i in range(1, 16):
            x = x.at[i].set(x[i] * 0.5 + x[i - 1] * x[i - 1])
        return jnp.sum(x * x)
    want_value, want = jax.jit(jax.value_and_grad(twin))(jnp.asarray(x, jnp.float64))
    np.testing.assert_allclose(value, want_value, rtol=1e-5)
    np.testing.assert_allclose(grads["x"], want, rtol=1e-5, atol=1e-6)
