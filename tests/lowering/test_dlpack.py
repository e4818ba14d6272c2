"""DLPack: DeviceArray export (a view where buffers are host memory, slangpy's
CPU device and lavapipe, checked by pointer; a host copy elsewhere), large
numpy results handed over as views there, and DLPack producers in asarray
(read in place by the upload, checked by pointer; a CopyWarning when staged)."""
import warnings

import ml_dtypes
import numpy as np
import pytest

from symdiff import lowering
import symdiff.lowering.runtime
import symdiff.lowering.dlpack
import symdiff as sd
from symdiff.lowering.dlpack import CopyWarning

torch = pytest.importorskip("torch")


def _host_memory_devices() -> list[str]:
    """The Slang devices here whose buffers are host memory: the CPU device, and lavapipe."""
    software_vulkan = "vulkan" in lowering.available_devices() and lowering.backends.of("vulkan").is_software()
    return ["cpu"] + (["vulkan"] if software_vulkan else [])


@pytest.mark.parametrize("device", ["cpu", pytest.param("vulkan", marks=pytest.mark.vulkan)])
def test_host_memory_export_is_a_view_of_the_buffer(device):
    if device not in _host_memory_devices():
        pytest.skip(f"no {device} device with buffers in host memory here")
    array = sd.asarray(np.arange(6, dtype=np.float32).reshape(2, 3), device=device)
    tensor = torch.from_dlpack(array)
    view = np.from_dlpack(array)
    assert tensor.data_ptr() == view.ctypes.data == array.buffer.device_address
    assert tensor.shape == (2, 3) and tensor.dtype == torch.float32
    tensor[1, 2] = 42.0
    assert np.asarray(array)[1, 2] == 42.0


@pytest.mark.parametrize("device", ["cpu", pytest.param("vulkan", marks=pytest.mark.vulkan)])
def test_large_numpy_results_are_views_later_calls_leave_alone(device):
    """A result over READ_PACKED_BYTES on a host-memory device is its buffer's
    memory, not a read-back copy (lavapipe read 200M elements back in 4-9 s and
    held the copy next to the buffer), and a later call writes elsewhere."""
    if device not in _host_memory_devices():
        pytest.skip(f"no {device} device with buffers in host memory here")
    n = 1 << 19  # 2 MiB of float32

    @sd.differentiable_program
    def f(x: sd.f32[n]):
        return np.sum(np.tanh(x) * x)

    rng = np.random.default_rng(4)
    calls = []
    for _ in range(2):
        x = rng.standard_normal(n).astype(np.float32)
        calls.append((x, f.value_and_grad(x, device=device)[1]["x"]))
    for x, grad in calls:
        assert isinstance(grad.base, lowering.dlpack._HostMemory)
        assert grad.ctypes.data == grad.base.owner.buffer.device_address
        t = np.tanh(x.astype(np.float64))
        np.testing.assert_allclose(grad, t + x * (1 - t * t), rtol=1e-5, atol=1e-6)
    assert calls[0][1].ctypes.data != calls[1][1].ctypes.data


def test_exported_result_keeps_its_buffer_through_later_calls():
    """A handed-over result goes back to the executable's spares when dropped;
    a tensor viewing it must keep it out of there."""
    @sd.differentiable_program
    def double(x: sd.f32[16]):
        return x * 2

    out = torch.from_dlpack(double(np.ones(16, np.float32), device="cpu", device_arrays=True))
    for k in range(3):
        double(np.full(16, k + 5, np.float32), device="cpu", device_arrays=True)
    np.testing.assert_array_equal(out.numpy(), np.full(16, 2, np.float32))


@pytest.mark.parametrize("dtype", ["float64", "int32", "bool", "float16"])
def test_export_dtypes(dtype):
    host = (np.arange(5) % 2).astype(dtype)
    exported = np.from_dlpack(sd.asarray(host, device="cpu", dtype=dtype))
    assert exported.dtype == host.dtype
    np.testing.assert_array_equal(exported, host)


def test_bfloat16_is_read_back_and_refused_by_dlpack_with_what_to_do():
    host = np.arange(5).astype(ml_dtypes.bfloat16)
    array = sd.asarray(host, device="cpu")
    assert array.dtype == "bfloat16" and array.numpy().dtype == host.dtype
    np.testing.assert_array_equal(array.numpy(), host)
    with pytest.raises(BufferError, match="sd.to_torch"):
        np.from_dlpack(array)


def test_jax_takes_device_arrays():
    jax = pytest.importorskip("jax")
    array = sd.asarray(np.arange(4, dtype=np.float32), device="cpu")
    np.testing.assert_array_equal(np.asarray(jax.dlpack.from_dlpack(array)), np.arange(4, dtype=np.float32))


@pytest.mark.vulkan
def test_export_from_device_memory_is_a_host_copy(monkeypatch):
    """A GPU's buffers (here lavapipe's, taken as device memory) export as a host copy."""
    if "vulkan" not in lowering.available_devices():
        pytest.skip("no vulkan device here")
    monkeypatch.setattr(lowering.backends.of("vulkan"), "_host_memory", False)
    array = sd.asarray(np.arange(3, dtype=np.float32), device="vulkan")
    assert array.__dlpack_device__() == (1, 0)
    np.testing.assert_array_equal(torch.from_dlpack(array).numpy(), np.arange(3, dtype=np.float32))
    with pytest.raises(BufferError, match="copy"):
        array.__dlpack__(copy=False)


@pytest.fixture
def uploads(monkeypatch):
    """Pointers of the host arrays each new buffer is filled from."""
    seen = []
    new_buffer = lowering.runtime._new_buffer

    def record(device, dtype, count, data=None):
        seen.append(None if data is None else data.ctypes.data)
        return new_buffer(device, dtype, count, data)

    monkeypatch.setattr(lowering.runtime, "_new_buffer", record)
    return seen


def test_asarray_uploads_a_torch_tensor_from_its_own_memory(uploads):
    tensor = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CopyWarning)
        array = sd.asarray(tensor, device="cpu")
    assert uploads == [tensor.data_ptr()]
    assert array.shape == (3, 4) and array.dtype == "float32"
    np.testing.assert_array_equal(array.numpy(), tensor.numpy())


def test_asarray_uploads_a_jax_array_from_its_own_memory(uploads):
    jax = pytest.importorskip("jax")
    value = jax.numpy.arange(5.0, dtype=jax.numpy.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CopyWarning)
        array = sd.asarray(value, device="cpu")
    assert uploads == [value.unsafe_buffer_pointer()]
    np.testing.assert_array_equal(array.numpy(), np.arange(5, dtype=np.float32))


@pytest.mark.parametrize("make, reason", [
    (lambda: torch.arange(6.0).reshape(2, 3).T, "layout"),
    (lambda: torch.arange(3, dtype=torch.float64), "float64 is stored as float32"),
])
def test_asarray_warns_when_it_stages_a_copy(uploads, make, reason):
    tensor = make()
    with pytest.warns(CopyWarning, match=reason):
        array = sd.asarray(tensor, device="cpu", dtype="float32")
    assert uploads != [tensor.data_ptr()]
    np.testing.assert_array_equal(array.numpy(), tensor.numpy().astype(np.float32))


@pytest.mark.parametrize("device", ["cpu", pytest.param("vulkan", marks=pytest.mark.vulkan)])
def test_read_only_arrays_upload(device):
    """slangpy refuses read-only arrays (what jax.pure_callback hands over):
    both upload paths, asarray and a program's arguments, take them."""
    if device not in lowering.available_devices():
        pytest.skip(f"no {device} device here")
    x = np.linspace(-1, 1, 7, dtype=np.float32)
    x.flags.writeable = False

    @sd.differentiable_program
    def f(x: sd.f32[7]):
        return np.sum(x * x)

    np.testing.assert_array_equal(sd.asarray(x, device=device).numpy(), x)
    np.testing.assert_allclose(f(x, device=device), np.sum(x.astype(np.float64) ** 2), rtol=1e-6)


def test_integer_arrays_become_int32_index_arrays_range_checked():
    """numpy's and torch's default int64 index arrays are index arrays on the
    device too (int32), and a value past int32's range is refused, not wrapped."""
    device = next((d for d in ("cpu", "vulkan") if d in lowering.available_devices()), None)
    if device is None:
        pytest.skip("no slang device here")
    a = sd.asarray(np.array([0, 5, -3], dtype=np.int64), device=device)
    assert a.dtype == "int32"
    np.testing.assert_array_equal(np.asarray(a), [0, 5, -3])
    with pytest.raises(lowering.ArgumentError, match="range"):
        sd.asarray(np.array([2 ** 40]), device=device)


@pytest.mark.vulkan
def test_transfers_in_pieces_arrive_whole(monkeypatch):
    # Pieces of 12 bytes: the 103 float32 elements (412 bytes) end in a partial piece,
    # uploaded (asarray, the program's argument) and read back (numpy()) piece by piece.
    if "vulkan" not in lowering.available_devices():
        pytest.skip("no vulkan device here")
    # a GPU's buffers: lavapipe's host memory taken as device memory
    monkeypatch.setattr(lowering.backends.of("vulkan"), "_host_memory", False)
    monkeypatch.setattr(lowering.dlpack, "UPLOAD_PIECE_BYTES", 12)
    monkeypatch.setattr(lowering.dlpack, "READ_PIECE_BYTES", 12)
    x = np.random.default_rng(5).standard_normal(103).astype(np.float32)
    np.testing.assert_array_equal(sd.asarray(x, device="vulkan").numpy(), x)

    @sd.differentiable_program
    def f(a: sd.f32[103]):
        return np.sum(a * a)

    value, grads = f.value_and_grad(x, device="vulkan")
    np.testing.assert_allclose(grads["a"], 2 * x, rtol=1e-6)
    np.testing.assert_allclose(value, np.sum(x.astype(np.float64) ** 2), rtol=1e-5)
