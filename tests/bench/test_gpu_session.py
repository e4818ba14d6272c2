"""bench.gpu_session's own logic without a GPU: its arguments, a stage's budget
ending a child process, a failing stage not losing the others, junit totals,
the auto and interop stages' verdicts.
(The whole script is rehearsed by hand: ``--device vulkan --quick``.)"""
import json
import shutil
import time

import pytest

from bench import gpu_session as gs


def _session(tmp_path) -> gs.Session:
    return gs.Session(tmp_path, "vulkan", quick=True, scale=4096.0, fuzz_programs=0, fuzz_seed=0,
                      measure_budget=0.05)


def test_arguments_defaults_quick_and_budget_overrides(tmp_path):
    full, budgets = gs.session_of(gs.parse_args([str(tmp_path), "--device", "cuda"]), software=False)
    assert (full.device, full.scale, full.fuzz_programs, full.quick) == ("cuda", 1.0, 200, False)
    assert budgets == gs.BUDGETS and sum(budgets.values()) < 8 * 60
    quick, budgets = gs.session_of(gs.parse_args([str(tmp_path), "--device", "vulkan", "--quick",
                                                  "--budget", "fuzz=5", "--budget", "bench=0"]), software=True)
    assert (quick.scale, quick.fuzz_programs) == (4096.0, 10)
    assert budgets == {**gs.QUICK_BUDGETS, "fuzz": 5.0, "bench": 0.0}


@pytest.mark.parametrize("text, says", [("fuzzz=5", "STAGE one of"), ("fuzz=soon", "not a number"),
                                        ("fuzz", "STAGE=SECONDS"), ("fuzz=-1", "0 or more")])
def test_bad_budget_is_refused_with_what_to_write(text, says, capsys):
    with pytest.raises(SystemExit):
        gs.parse_args(["out", "--budget", text])
    assert says in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("sleep") is None, reason="needs sleep(1)")
def test_stage_out_of_budget_is_stopped_and_a_raising_stage_does_not_lose_the_others(tmp_path, monkeypatch):
    monkeypatch.setattr(gs, "GRACE_S", 1.0)

    def slow(s, deadline):
        run = gs.run_command(["sleep", "30"], s.out / "logs" / "slow.log", deadline)
        return {"status": "out of time" if run["timed_out"] else "ok", "run": run}

    def broken(s, deadline):
        raise RuntimeError("no device")

    def fine(s, deadline):
        return {"status": "ok", "left": deadline.remaining()}

    stages = [gs.Stage("slow", slow), gs.Stage("broken", broken), gs.Stage("fine", fine)]
    started = time.monotonic()
    summary = gs.run_stages(_session(tmp_path), stages, {"slow": 1.5, "broken": 1.0, "fine": 9.0}, {})
    # sleep 30 was cut at its 1.5 s budget: bounds far below 30 s, so a loaded machine cannot fail them
    assert time.monotonic() - started < 20
    slow_run = summary["stages"]["slow"]["run"]
    assert slow_run["timed_out"] and slow_run["rc"] != 0 and slow_run["seconds"] < 20
    assert summary["stages"]["broken"] == {"status": "error", "detail": "RuntimeError: no device",
                                           "seconds": summary["stages"]["broken"]["seconds"], "budget_s": 1.0}
    assert summary["stages"]["fine"]["status"] == "ok" and summary["stages"]["fine"]["left"] > 8
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert list(on_disk["stages"]) == ["slow", "broken", "fine"]
    assert "broken" in gs.table(summary) and "out of time" in gs.table(summary)


def test_junit_counts_and_failing_ids(tmp_path):
    xml = tmp_path / "t.xml"
    xml.write_text('<?xml version="1.0"?><testsuites><testsuite tests="3" failures="1" errors="0" skipped="1">'
                   '<testcase classname="tests.lowering.test_a" name="test_x[cuda]"><failure message="m"/></testcase>'
                   '<testcase classname="tests.lowering.test_a" name="test_y[cuda]"/>'
                   '<testcase classname="tests.lowering.test_b" name="test_z[cuda]"><skipped/></testcase>'
                   '</testsuite></testsuites>')
    assert gs.junit_counts(xml) == {"tests": 3, "failures": 1, "errors": 0, "skipped": 1,
                                    "failed": ["tests.lowering.test_a::test_x[cuda]"]}


@pytest.mark.vulkan
def test_sweep_runs_a_tuning_variant_checked_against_jax(tmp_path, monkeypatch):
    """One variant (the rehearsal's: lavapipe in the GPU form, a 64^3 gemm): its
    tile numbers reach the child's plans, and its gradients are checked."""
    from symdiff import lowering
    if "vulkan" not in lowering.available_devices():
        pytest.skip("no vulkan device here")
    variant = {"group_tile": [32, 32], "group_thread_tile": [2, 2]}
    monkeypatch.setattr(gs, "SWEEP_VARIANTS", [variant])
    result = gs.sweep_stage(_session(tmp_path), gs.Deadline(120.0))
    assert result["status"] == "ok", result
    (row,) = result["rows"]
    assert row["variant"] == variant and row["gemm_status"] == "ok" and row["gemm_ms"] > 0
    child = json.loads((tmp_path / "sweep" / "variant-0.json").read_text())
    assert child["tuning"] == {"group_tile": [32, 32], "group_thread_tile": [2, 2]}
    assert child["device"] == "vulkan (GPU form)"
    assert "sweep:" in gs.table({"stages": {"sweep": {**result, "seconds": 1, "budget_s": 1}}})


def test_a_sweep_variant_naming_no_tuning_field_is_refused():
    from bench import gpu_products
    with pytest.raises(SystemExit, match=r"no Tuning field \['group_tiles'\]"):
        gpu_products.use_tuning({"group_tiles": [32, 32]})


def test_every_sweep_variant_is_a_tuning_that_makes_workgroups():
    """A variant GPU time would be spent on names real Tuning fields (and
    perhaps a precision) and tiles that split into a workgroup's threads and
    warps (lowering.kernels.tile_shapes)."""
    from dataclasses import fields, replace
    from symdiff.lowering import backends, targets
    from symdiff.lowering.kernels import tile_shapes
    names = {f.name for f in fields(targets.Tuning)}
    assert gs.SWEEP_VARIANTS[0] == {} and len({json.dumps(v) for v in gs.SWEEP_VARIANTS}) == len(gs.SWEEP_VARIANTS)
    assert {gs.precision_of(v) for v in gs.SWEEP_VARIANTS} == {"fp32", "tf32"}
    assert {"precision": "tf32"} in gs.SWEEP_VARIANTS  # the tensor cores' baseline
    for variant in gs.SWEEP_VARIANTS:
        tuning = {k: tuple(v) if isinstance(v, list) else v for k, v in variant.items() if k != "precision"}
        assert set(tuning) <= names, variant
        tile_shapes.check(replace(backends.cuda.TARGET.tuning, **tuning))
        tile_shapes.check_tensor(replace(backends.cuda.TARGET.tuning, **tuning))


def test_interop_is_skipped_without_cuda_and_judged_by_its_rows(tmp_path):
    assert gs.interop_stage(_session(tmp_path), gs.Deadline(30.0))["status"] == "skipped (no CUDA)"
    shared = {"path": "export->torch", "zero_copy": True, "values_ok": True, "detail": "same memory"}
    copied = {"path": "import<-torch", "zero_copy": False, "values_ok": True, "detail": "a copy: consumer on cpu"}
    assert gs.interop_verdict({"rows": [shared]})["status"] == "ok"
    verdict = gs.interop_verdict({"rows": [shared, copied]})
    assert verdict["status"] == "copies" and verdict["detail"] == "zero-copy: export->torch; copies: import<-torch"
    errored = {"path": "to_jax", "zero_copy": None, "values_ok": False, "detail": "error: RuntimeError: x"}
    assert gs.interop_verdict({"rows": [shared, errored]})["status"] == "failures"
    text = gs.table({"stages": {"interop": {**verdict, "seconds": 3, "budget_s": 30}}})
    assert "import<-torch  copy" in text and "export->torch  zero-copy" in text


def test_the_auto_stage_reports_the_measured_choice(tmp_path, monkeypatch):
    measured = {"available": ["cuda", "vulkan", "cpu", "numpy"], "gpu_kinds": ["cuda", "vulkan"], "auto": "vulkan",
                "how": "measured (lowering.backend_probe)",
                "measured": {"chosen": "vulkan", "failed": {},
                             "seconds": {"cuda": {"product": 2e-3, "memory": 1e-4},
                                         "vulkan": {"product": 1e-3, "memory": 1e-4}}}}
    asked = []
    monkeypatch.setattr(gs, "json_run", lambda cmd, *rest: asked.append(cmd) or measured)
    result = gs.auto_stage(_session(tmp_path), gs.Deadline(40.0))
    assert asked[0][-3:] == ["bench.auto_choice", "--cache-dir", str(tmp_path / "cache")]
    assert result["status"] == "ok" and result["detail"] == (
        "auto picks vulkan: measured (lowering.backend_probe); cuda product 2 ms, memory 0.1 ms; "
        "vulkan product 1 ms, memory 0.1 ms")
    measured["measured"]["failed"] = {"cuda": "RuntimeError: nvrtc"}
    assert gs.auto_stage(_session(tmp_path), gs.Deadline(40.0))["status"] == "failures"
    monkeypatch.setattr(gs, "json_run", lambda *args: None)  # no time left to start it
    assert gs.auto_stage(_session(tmp_path), gs.Deadline(40.0))["status"] == "out of time"
