"""Memory an executable keeps between calls (lowering.memory): it goes when
the program goes, it is bounded by a process-wide limit with the least
recently used binding released first, and ``sd.clear_caches`` gives it all
back; programs keep computing the same numbers throughout."""
import gc
import weakref

import numpy as np
import pytest

from symdiff import lowering
import symdiff as sd
from symdiff.lowering import memory

pytestmark = pytest.mark.usefixtures("frozen_heap")  # conftest: gc.collect() walks only these tests' objects


def _program():
    """A fresh program object of a fresh function: nothing else refers to it."""
    def loss(x):
        return np.sum(np.tanh(x) * x)
    return sd.differentiable_program(loss)


@pytest.fixture
def limit():
    """Restore the process-wide limit after a test changes it."""
    before = memory.limit()
    yield
    memory.set_limit(before)


def test_a_dropped_program_gives_its_buffers_back(device):
    gc.collect()
    before = memory.held_bytes(device)
    program = _program()
    x = np.linspace(-2, 2, 1 << 16, dtype=np.float32)
    program.value_and_grad(x, device=device)
    # at least the upload and the gradient (on the CPU device the gradient is written over the upload,
    # lowering.buffer_plan.into_uploads, and read back through the read-back buffer: 256 KiB, packed)
    assert memory.held_bytes(device) - before >= 2 * x.nbytes
    mine = [weakref.ref(e) for e in program._executables.values()]
    assert mine
    del program
    gc.collect()
    assert all(r() is None for r in mine), "an executable outlived its program"
    assert memory.held_bytes(device) <= before  # (other tests' dropped programs may go in the same collection)


def test_least_recently_used_bindings_go_past_the_limit(device, limit):
    memory.release_all()  # earlier tests' live programs' bindings would be the older ones to release
    program = _program()
    xs = [np.linspace(-1, 1, n, dtype=np.float32) for n in (1 << 14, 1 << 15)]
    program.value_and_grad(xs[0], device=device)
    (first,) = [e for e in program._executables.values() if e.device == device]
    memory.set_limit(memory.held_bytes(device))  # no room for a second, larger binding
    program.value_and_grad(xs[1], device=device)
    (second,) = [e for e in program._executables.values() if e.device == device and e is not first]
    assert not first._instances, "the least recently used binding kept its buffers past the limit"
    assert second._instances, "the binding just used was released"
    assert memory.held_bytes() == sum(i.held_bytes for i in second._instances.values())
    for x in xs:  # the released binding plans and allocates again, with the same numbers
        value, grads = program.value_and_grad(x, device=device)
        want_value, want = program.value_and_grad(x, device="numpy")
        np.testing.assert_allclose(value, want_value, rtol=1e-5)
        np.testing.assert_allclose(grads["x"], want["x"], rtol=1e-5, atol=1e-7)


def test_clear_caches_gives_everything_back_and_programs_still_run(device):
    program = _program()
    x = np.linspace(-1, 1, 4096, dtype=np.float32)
    want_value, want = program.value_and_grad(x, device=device)
    assert memory.held_bytes(device) > 0
    sd.clear_caches()
    assert memory.held_bytes() == 0
    value, grads = program.value_and_grad(x, device=device)
    np.testing.assert_array_equal(value, want_value)
    np.testing.assert_array_equal(grads["x"], want["x"])


def test_a_limit_is_a_number_of_bytes():
    with pytest.raises(ValueError, match="bytes"):
        lowering.set_cache_limit(-1)


def test_large_results_in_host_memory_are_the_buffers_the_kernels_wrote(device):
    """Where buffers are host memory (slangpy's CPU device, lavapipe) a large
    result is handed over as a view of its buffer (no copy), a later call
    writes into another buffer, and a dropped result's buffer serves the next call."""
    if not lowering.dlpack.in_host_memory(device):
        pytest.skip(f"{device}'s buffers are not host memory here")
    program = _program()
    x = np.linspace(-2, 2, 1 << 19, dtype=np.float32)  # 2 MiB: over READ_PACKED_BYTES
    _, first = program.value_and_grad(x, device=device)
    kept = first["x"].copy()
    _, second = program.value_and_grad(2 * x, device=device)
    assert first["x"].base is not None and not first["x"].flags.owndata
    assert not np.shares_memory(first["x"], second["x"])
    np.testing.assert_array_equal(first["x"], kept)
    np.testing.assert_allclose(second["x"], program.grad(2 * x, device="numpy")["x"], rtol=1e-5, atol=1e-8)
    (exe,) = [e for e in program._executables.values() if e.device == device and e.graph.meta.get("gradients")]
    allocated = exe.stats()["buffers_allocated"]
    del first, second
    gc.collect()
    for _ in range(3):
        program.value_and_grad(x, device=device)
    assert exe.stats()["buffers_allocated"] == allocated


def test_a_cpu_or_numpy_program_loads_no_gpu_driver(monkeypatch):
    """Listing Vulkan adapters loads lavapipe into the process (+51 MiB resident,
    0.06x of the 200M-element bench.host_memory example's first call on the
    CPU device): a program run on device='cpu' or 'numpy' lists none."""
    def listed(kind):
        raise AssertionError(f"{kind} adapters listed")
    monkeypatch.setattr(lowering.backends.slangpy_base, "adapters", listed)
    x = np.linspace(-1, 1, 64, dtype=np.float32)
    for device in ("cpu", "numpy"):
        value, grads = _program().value_and_grad(x, device=device)
        t = np.tanh(x.astype(np.float64))
        np.testing.assert_allclose(grads["x"], t + x * (1 - t * t), rtol=1e-5, atol=1e-7)
