"""bench.gpu on the CPU device at a large --scale: its rows, its correctness column and its floor."""
import importlib.util
import json
import math

import numpy as np
import pytest

from bench import gpu


def _spec(name: str) -> gpu.GpuWorkload:
    return next(w for w in gpu.WORKLOADS if w.name == name)


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="JAX is the reference")
def test_main_on_cpu_reports_rows_checked_against_jax(tmp_path, capsys):
    out = tmp_path / "gpu.json"
    results = gpu.main(["--device", "cpu", "--scale", "4096", "--budget", "0.02",
                        "--workload", "sum", "--workload", "map_smooth", "--json", str(out)])
    table = capsys.readouterr().out
    assert {r["workload"] for r in results["rows"]} == {"sum", "map_smooth"}
    for row in results["rows"]:
        assert f"| {row['workload']} | {row['size']} |" in table
        assert row["peers"]["jax"]["status"] == "ok" and row["reference"] == "jax"
        assert row["symdiff"]["status"] == "ok" and row["symdiff"]["grad_error"] <= gpu.TOLERANCE
        assert row["symdiff"]["kernels"] >= 1 and row["x_jax"] > 0
    # sum at scale 4096: 16M / 4096 = 4096 float32 elements read, 4096 gradient elements written
    sum_row = next(r for r in results["rows"] if r["workload"] == "sum")
    assert sum_row["shapes"] == {"x": (4096,)} and sum_row["floor_bytes"] == 2 * 4096 * 4
    assert f"over {len(results['rows'])} rows" in table
    assert json.loads(out.read_text())["rows"][0]["floor_bytes"] == results["rows"][0]["floor_bytes"]


def test_peers_share_symdiff_hardware():
    assert gpu.peer_devices("cpu") == ("cpu", "cpu")
    assert gpu.peer_devices("cuda") == ("gpu", "cuda")
    # vulkan here is lavapipe (or absent): a CPU rasteriser, so the peers stay on the CPU
    assert gpu.peer_devices("vulkan") == ("cpu", "cpu")


def test_verdict_flags_a_perturbed_gradient_wrong():
    rng = np.random.default_rng(0)
    reference = (2.5, {"x": rng.standard_normal(1000).astype(np.float32)})
    same = (2.5, {"x": reference[1]["x"].copy()})
    assert gpu.verdict(same, reference) == (0.0, "ok")
    perturbed = reference[1]["x"].copy()
    perturbed[17] += 0.1 * np.linalg.norm(perturbed)   # a 10% relative L2 error in one element
    error, status = gpu.verdict((2.5, {"x": perturbed}), reference)
    assert status == "WRONG" and error == pytest.approx(0.1, rel=1e-5)
    assert gpu.verdict((2.5 * (1 + 1e-2), same[1]), reference)[1] == "WRONG"      # the value counts too
    assert gpu.verdict((2.5, {"x": np.full(1000, np.nan)}), reference)[1] == "WRONG"
    assert gpu.verdict(same, None) == (None, "unchecked")


def test_wrong_row_shows_no_speed():
    row = {"workload": "w", "size": "1K", "floor_ms": 1e-3, "peers": {"jax": {"status": "ok", "ms": 1.0}},
           "symdiff": {"status": "WRONG", "grad_error": 0.5, "ms": 0.1234}}
    text = gpu.render({"command": "c", "date": "d", "elapsed_s": 1.0, "device": "cpu", "peers": ["jax"],
                       "settings": {"k_max": 1, "budget": 0.1}, "bandwidth_gbps": 3000.0, "rows": [row],
                       "geomean_x_jax": None, "geomean_rows": 0})
    line = next(t for t in text.splitlines() if t.startswith("| w |"))
    assert "WRONG (err 0.5)" in line and "0.123" not in line


def test_floor_counts_inputs_read_and_gradients_written_once():
    # layer norm 65536x1024: x, g, b read (65536*1024 + 2*1024 floats), the same written as gradients
    ln = _spec("layer_norm")
    workload, size = ln.at(1.0)
    assert gpu.floor_bytes(size.shapes, workload.wrt) == 2 * 4 * (65536 * 1024 + 2048)
    assert gpu.floor_ms(size.shapes, workload.wrt, 3000.0) == pytest.approx(536887296 / 3e12 * 1e3)
    # softmax cross-entropy: logits and labels read (2 x 65536x1000), only the logits' gradient written
    xent = _spec("softmax_xent")
    workload, size = xent.at(1.0)
    assert gpu.floor_bytes(size.shapes, workload.wrt) == 3 * 4 * 65536 * 1000
    assert gpu.floor_ms(size.shapes, workload.wrt, 1000.0) == pytest.approx(0.786432)


def test_scale_divides_element_counts():
    def work(spec: gpu.GpuWorkload, scale: float) -> int:   # the n-body's is its pair count
        n = max(math.prod(s) for s in spec.shapes(scale).values())
        return n * n if spec.name == "nbody_energy" else n
    for spec in gpu.WORKLOADS:
        assert work(spec, 1024.0) == pytest.approx(work(spec, 1.0) / 1024, rel=0.02), spec.name
