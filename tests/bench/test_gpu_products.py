"""bench.gpu_products without a GPU: the 16-bit rows give every side 16-bit
arguments and check symdiff's gradients (the GPU session runs them last)."""
import ml_dtypes
import numpy as np
import pytest

from bench import gpu, gpu_products, gpu_session as gs, peers


@pytest.mark.parametrize("precision, half", [("bf16", ml_dtypes.bfloat16), ("f16", np.float16)])
def test_16_bit_rows_run_every_side_on_16_bit_arguments(tmp_path, monkeypatch, precision, half):
    seen = {}
    original = peers.JaxPeer.runner

    def runner(self, workload, inputs, device="cpu"):
        seen.update({n: v.dtype for n, v in inputs.items()})
        return original(self, workload, inputs, device)
    monkeypatch.setattr(peers.JaxPeer, "runner", runner)
    results = gpu_products.main(["--device", "cpu", "--precision", precision, "--scale", "4096", "--budget", "0.01",
                                 "--workload", "gemm", "--json", str(tmp_path / f"{precision}.json")])
    (row,) = results["rows"]
    assert seen and all(d == np.dtype(half) for d in seen.values())
    assert row["precision"] == precision and row["symdiff"]["status"] == "ok", row["symdiff"]
    assert row["symdiff"]["grad_error"] <= gpu_products.TOLERANCES[precision]


def test_torch_takes_and_gives_bfloat16_through_its_bits():
    x = np.array([1.5, -2.25, 3e38], ml_dtypes.bfloat16)
    t = peers.from_numpy(x)
    assert str(t.dtype) == "torch.bfloat16"
    np.testing.assert_array_equal(peers.host_array(t).astype(np.float32), x.astype(np.float32))


@pytest.mark.parametrize("vulkan_too", [False, True], ids=["cuda-only", "vulkan-too"])
def test_the_session_runs_the_16_bit_products_after_the_memory_bound_rows(tmp_path, monkeypatch, vulkan_too):
    monkeypatch.setattr(gs, "_hardware_vulkan", lambda: vulkan_too)
    jobs = gs.bench_jobs(gs.Session(tmp_path, "cuda", quick=False, scale=1.0, fuzz_programs=0, fuzz_seed=0,
                                    measure_budget=0.5))
    names = [name for name, _ in jobs]
    products = [w.name for w in gpu_products.PRODUCTS]
    assert names[:4] == [f"{w}-{p}" for p in ("fp32", "tf32") for w in products]
    assert names[4:4 + len(gpu.WORKLOADS)] == [w.name for w in gpu.WORKLOADS]
    sixteen = [f"{w}-{p}" for p in ("bf16", "f16") for w in products]
    assert names[4 + len(gpu.WORKLOADS):] == sixteen + ([f"{w}-f16-vulkan" for w in products] if vulkan_too else [])
    devices = [cmd[cmd.index("--device") + 1] for _, cmd in jobs]
    assert devices == ["cuda"] * (len(jobs) - 2 * vulkan_too) + ["vulkan"] * (2 * vulkan_too)
