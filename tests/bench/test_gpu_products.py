"""bench.gpu_products without a GPU: the bfloat16 rows give every side bfloat16
arguments and check symdiff's gradients (the GPU session runs them last)."""
import ml_dtypes
import numpy as np

from bench import gpu, gpu_products, gpu_session as gs, peers


def test_bf16_rows_run_every_side_on_bfloat16_arguments(tmp_path, monkeypatch):
    seen = {}
    original = peers.JaxPeer.runner

    def runner(self, workload, inputs, device="cpu"):
        seen.update({n: v.dtype for n, v in inputs.items()})
        return original(self, workload, inputs, device)
    monkeypatch.setattr(peers.JaxPeer, "runner", runner)
    results = gpu_products.main(["--device", "cpu", "--precision", "bf16", "--scale", "4096", "--budget", "0.01",
                                 "--workload", "gemm", "--json", str(tmp_path / "bf16.json")])
    (row,) = results["rows"]
    assert seen and all(d == np.dtype(ml_dtypes.bfloat16) for d in seen.values())
    assert row["precision"] == "bf16" and row["symdiff"]["status"] == "ok", row["symdiff"]
    assert row["symdiff"]["grad_error"] <= gpu_products.BF16_TOLERANCE


def test_torch_takes_and_gives_bfloat16_through_its_bits():
    x = np.array([1.5, -2.25, 3e38], ml_dtypes.bfloat16)
    t = peers.from_numpy(x)
    assert str(t.dtype) == "torch.bfloat16"
    np.testing.assert_array_equal(peers.host_array(t).astype(np.float32), x.astype(np.float32))


def test_the_session_runs_the_bf16_products_after_the_memory_bound_rows(tmp_path):
    names = [name for name, _ in gs.bench_jobs(gs.Session(tmp_path, "cuda", quick=False, scale=1.0,
                                                          fuzz_programs=0, fuzz_seed=0, measure_budget=0.5))]
    products = [w.name for w in gpu_products.PRODUCTS]
    assert names[:4] == [f"{w}-{p}" for p in ("fp32", "tf32") for w in products]
    assert names[4:-2] == [w.name for w in gpu.WORKLOADS]
    assert names[-2:] == [f"{w}-bf16" for w in products]
