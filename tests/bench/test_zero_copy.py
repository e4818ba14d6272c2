"""bench.zero_copy's verdicts without a GPU: on slangpy's CPU device, whose
buffers are host memory, exported results are torch's memory and uploads are
copies (lowering.dlpack's docstring); each verdict is confirmed by a write
through torch, not only by the pointers the check compares."""
import numpy as np
import pytest

from bench import zero_copy

torch = pytest.importorskip("torch")
pytest.importorskip("jax")


@pytest.fixture(scope="module")
def on_cpu():
    return {r["path"]: r for r in zero_copy.check("cpu")["rows"]}


def test_every_path_runs_and_gives_the_programs_values(on_cpu):
    assert list(on_cpu) == list(zero_copy.PATHS)
    assert all(r["values_ok"] and r["zero_copy"] is not None for r in on_cpu.values()), on_cpu


def test_exported_results_are_shared_and_uploads_are_copies_on_host_memory(on_cpu):
    assert on_cpu["export->torch"]["zero_copy"] and on_cpu["to_torch"]["zero_copy"]
    assert on_cpu["import<-torch"]["zero_copy"] is False
    assert "does not show" in on_cpu["import<-torch"]["detail"]  # torch's write missed symdiff's copy
    assert on_cpu["to_jax"]["zero_copy"] is False  # pure_callback hands over host arrays


def test_a_verdict_needs_the_same_pointer_on_the_device_the_data_belongs_to():
    t = torch.arange(4, dtype=torch.float32)
    assert zero_copy.row("cpu", t.data_ptr(), t, True)["zero_copy"]
    assert not zero_copy.row("cpu", t.data_ptr() + 4, t, True)["zero_copy"]
    assert not zero_copy.row("cuda", t.data_ptr(), t, True)["zero_copy"]  # on the host: copied off the GPU
    assert not zero_copy.row("cpu", t.data_ptr(), t, True, aliased=False)["zero_copy"]


def test_exported_records_the_buffers_handed_out():
    out = zero_copy.affine(np.ones(zero_copy.N, np.float32), device="cpu", device_arrays=True)
    with zero_copy.exported() as addresses:
        torch.from_dlpack(out)
    assert addresses == [out.buffer.device_address]
