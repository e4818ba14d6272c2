"""Smoke test of the benchmark harness (bench/): timing and report, no peer or device needed."""
import time

import pytest

from bench import report
from bench.timing import Timeout, measure


def test_measure_repeats_within_budget_and_times_out():
    t, out = measure(lambda: 7, budget=0.01, k_max=5, limit=1.0)
    assert out == 7 and t.k == 5 and t.min <= t.median
    with pytest.raises(Timeout):
        measure(lambda: time.sleep(0.5), budget=0.01, k_max=1, limit=0.05)


def _timing(ms: float) -> dict:
    return {"first": ms / 1e3, "min": ms / 1e3, "median": ms / 1e3, "k": 3}


def test_report_keeps_hand_written_header_and_derives_ratios(tmp_path):
    results = {
        "command": "python -m bench --quick", "date": "today", "elapsed_s": 1.0, "load_average": [0.0, 0.0],
        "machine": report.machine_info(), "devices": ["cpu"], "peers": ["jax 0"], "settings": {}, "cold_startup_s": {"cpu": {"small": 0.3}},
        "rows": [{"workload": "w", "size": "small", "label": "n=1", "peers": {
            "jax": {"status": "ok", "forward": _timing(1), "value_and_grad": _timing(2)}},
            "symdiff": {"cpu": {"status": "ok", "forward": _timing(1), "value_and_grad": _timing(4),
                                "grad_error": 1e-7, "compile_cold": 0.5, "compile_warm": 0.01},
                        "vulkan": {"status": "WRONG", "grad_error": 0.5}}}],
    }
    docs = tmp_path / "benchmarks.md"
    docs.write_text("# mine\n\nkept\n" + report.MARKER + "\nold table\n")
    report.write(results, tmp_path / "results.json", docs)
    text = docs.read_text()
    assert text.startswith("# mine\n\nkept\n" + report.MARKER) and "old table" not in text
    cpu_row = next(line for line in text.splitlines() if line.startswith("| w | n=1 | cpu |"))
    assert "| 3.00 | 2.00 |" in cpu_row          # bwd/fwd = (4 - 1) / 1, xJAX = 4 / 2
    wrong_row = next(line for line in text.splitlines() if line.startswith("| w | n=1 | vulkan |"))
    assert "WRONG" in wrong_row and " ms" not in wrong_row


def test_report_renders_the_training_rows():
    """python -m bench's training-step section (bench.training's entries): times
    for a runner that ran, its status and no time for one that was wrong."""
    entries = [{"model": "lenet", "runner": "symdiff cpu", "status": "ok", "first_s": 9.0, "compile_s": 0.5,
                "step": _timing(12.5), "warm_steps": 40, "grad_error": 1e-6},
               {"model": "lenet", "runner": "torch.compile", "status": "WRONG", "first_s": 15.0, "grad_error": 1.0}]
    lines = report.training_table(entries).splitlines()
    assert lines[2] == "| lenet | symdiff cpu | 12.5 / 12.5 (k=3 after 40) | 9.0 (+ compile 0.5) | 1e-06 |"
    assert lines[3] == "| lenet | torch.compile | WRONG | 15.0 | 1e+00 |"
