"""``python -m bench.gpu_session OUTDIR [--device cuda|vulkan] [--quick]``: the one
command to run first whenever a GPU machine is at hand (issue 36), under 8 minutes.

GPU time comes in minutes (``../shared/notes/gpu.md``), so everything worth
learning from one visit is put in one command tested beforehand on lavapipe
(``--device vulkan --quick``).  Its stages, in order, each with a wall-clock
budget (``--budget STAGE=SECONDS`` overrides one):

0. ``auto``: which kind ``device="auto"`` picks here, and where CUDA and
   Vulkan both reach the GPU the probe times it picked by, measured fresh
   (``bench.auto_choice``, the cache directory in ``OUTDIR/cache``);
   ``OUTDIR/auto.json``.
1. ``tests``: pytest on the lowering and symdiff tests selected by ``-k DEVICE``
   (on CUDA also ``vulkan_gpu``: the cooperative-matrix products through the
   same GPU's Vulkan driver, where it has them; the device fixtures of
   ``tests/lowering/conftest.py`` and ``tests/symdiff/conftest.py`` take ``cuda`` where slangpy has it; symdiff's
   hold the interop tests), junit XML in ``OUTDIR/tests.xml``; then the shared
   acceptance check on the device where ``../shared/acceptance`` is beside the
   checkout (``tests/test_acceptance.py`` does not run it on cuda).
2. ``interop``: on CUDA, whether results reach torch and JAX (``sd.to_torch``,
   ``sd.to_jax``, DLPack) and CUDA tensors reach symdiff without a copy,
   judged by comparing device pointers (``bench.zero_copy``); ``OUTDIR/interop.json``.
   Status ``ok`` (every path zero-copy), ``copies`` (values right, some path
   copies: the table names which) or ``failures`` (wrong values or errors);
   ``skipped (no CUDA)`` on other devices.
3. ``fuzz``: a 200-program differential fuzz campaign on the device
   (``python -m tests.fuzz``) in chunks of consecutive seeds, so running out of
   time loses one chunk, not the campaign; ``OUTDIR/fuzz/``.
4. ``bench``: ``bench.gpu_products`` (MLP and gemm with TFLOP/s, at fp32
   and then at TF32: symdiff's ``matmul_precision="tf32"`` on tensor cores
   against JAX's and torch's TF32), every memory-bound row of ``bench.gpu``,
   then the products again on bfloat16 and float16 arguments (symdiff's 16-bit
   tensor-core products against JAX's and torch's), and on float16 through
   Vulkan where the GPU has a Vulkan driver too (cooperative matrices), one
   process per row;
   ``OUTDIR/bench/``.
5. ``sweep``: product variants (``SWEEP_VARIANTS``: group and tensor-core
   tile shapes, k tiles, split-K targets), each ``bench.gpu_products`` in its
   own process with the device's ``lowering.targets.Tuning`` overridden
   (``--tuning``) at the variant's precision (``fp32`` unless it says
   ``"precision": "tf32"``), checked against JAX; ``OUTDIR/sweep/``.  The
   fastest variant per product and precision is the one to write into
   ``Tuning`` (CUDA's, or GPU Vulkan's).

A stage's commands run as child processes: at the end of its budget a child
gets SIGINT (pytest then still writes its XML), then SIGKILL, and the session
moves on; a stage that fails or raises is recorded and the others still run.
``OUTDIR/summary.json`` is rewritten after every stage, and a short table is
printed last.  On the GPU machine::

    source .device/setup.sh && python -m bench.gpu_session /tmp/gpu-out --device cuda

(``../shared/tools/device-pack`` prepares ``.device/``; docs/benchmarks.md, "GPU session").
"""
from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
ACCEPTANCE = ROOT.parent / "shared" / "acceptance" / "run.py"
GRACE_S = 10.0           # seconds a child has between SIGINT and SIGKILL
MIN_CHUNK_S = 20.0       # a fuzz chunk is not started with less time than this left
FUZZ_FAILURES = ("wrong", "crash", "error")   # tests.fuzz.runner.FAILURES

# budgets in seconds per stage: full adds up to 7.5 minutes, with the grace inside each
BUDGETS = {"auto": 40.0, "tests": 115.0, "interop": 35.0, "fuzz": 60.0, "bench": 160.0, "sweep": 65.0}
QUICK_BUDGETS = {"auto": 40.0, "tests": 60.0, "interop": 35.0, "fuzz": 60.0, "bench": 100.0, "sweep": 60.0}
TEST_PATHS = ("tests/lowering", "tests/symdiff")
QUICK_TEST_PATHS = ("tests/lowering/test_dlpack.py", "tests/lowering/test_matmul.py")


@dataclass
class Session:
    """What every stage reads: where to write, on which device, how big."""

    out: Path
    device: str
    quick: bool
    scale: float
    fuzz_programs: int
    fuzz_seed: int
    measure_budget: float

    @property
    def python(self) -> str:
        return sys.executable


class Deadline:
    """The end of one stage's budget."""

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def remaining(self) -> float:
        return max(0.0, self.end - time.monotonic())


@dataclass(frozen=True)
class Stage:
    name: str
    run: Callable[[Session, Deadline], dict[str, Any]]


def run_command(cmd: list[str], log: Path, deadline: Deadline) -> dict[str, Any]:
    """Run ``cmd`` from the checkout's root, its output in ``log``, until it
    ends or the deadline less ``GRACE_S`` passes; then SIGINT its process
    group, and SIGKILL it after the grace."""
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with log.open("w") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        child = subprocess.Popen(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        timed_out = False
        try:
            rc = child.wait(timeout=max(0.0, deadline.remaining() - GRACE_S))
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(child.pid, signal.SIGINT)
            try:
                rc = child.wait(timeout=GRACE_S)
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                rc = child.wait()
    return {"rc": rc, "timed_out": timed_out, "seconds": round(time.monotonic() - started, 1),
            "log": str(log)}


# -- stage 0: auto ------------------------------------------------------------------------

def auto_stage(s: Session, deadline: Deadline) -> dict[str, Any]:
    runs: list = []
    log = s.out / "logs" / "auto.log"
    result = json_run([s.python, "-m", "bench.auto_choice", "--cache-dir", str(s.out / "cache")],
                      s.out / "auto.json", log, deadline, runs)
    if result is None:
        return {"status": "out of time" if not runs or runs[-1]["timed_out"] else "error", "runs": runs,
                "detail": f"bench.auto_choice wrote no results: see {log}"}
    measured = result.get("measured") or {}
    times = "; ".join(f"{kind} " + ", ".join(f"{w} {t * 1e3:.3g} ms" for w, t in seconds.items())
                      for kind, seconds in measured.get("seconds", {}).items())
    return {"status": "failures" if measured.get("failed") else "ok", "runs": runs, "auto": result,
            "detail": f"auto picks {result['auto']}: {result['how']}" + (f"; {times}" if times else "")
                      + (f"; probe failed on {sorted(measured['failed'])}" if measured.get("failed") else "")}


# -- stage 1: tests -----------------------------------------------------------------------

def junit_counts(path: Path) -> dict[str, Any]:
    """Totals and failing test ids of a pytest junit XML file."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    counts["failed"] = [f"{case.get('classname')}::{case.get('name')}" for case in root.iter("testcase")
                        if case.find("failure") is not None or case.find("error") is not None]
    return counts


def tests_stage(s: Session, deadline: Deadline) -> dict[str, Any]:
    xml = s.out / "tests.xml"
    paths = QUICK_TEST_PATHS if s.quick else TEST_PATHS
    # on CUDA, the tests of the same GPU through Vulkan's cooperative matrices too
    chosen = "cuda or vulkan_gpu" if s.device == "cuda" else s.device
    run = run_command([s.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", chosen,
                       f"--junitxml={xml}", *paths], s.out / "logs" / "pytest.log", deadline)
    result: dict[str, Any] = {"pytest": run}
    if xml.exists():
        result["junit"] = junit_counts(xml)
    if not ACCEPTANCE.exists():
        result["acceptance"] = {"status": f"skipped: {ACCEPTANCE} is not beside this checkout"}
    elif deadline.remaining() > MIN_CHUNK_S:
        result["acceptance"] = run_command([s.python, str(ACCEPTANCE), "--device", s.device],
                                           s.out / "logs" / "acceptance.log", deadline)
    else:
        result["acceptance"] = {"status": "out of time before it started"}
    junit = result.get("junit", {})
    bad = junit.get("failures", 0) + junit.get("errors", 0) + (result["acceptance"].get("rc") not in (0, None))
    result["status"] = ("out of time" if run["timed_out"] else "failures" if bad or "junit" not in result
                        else "ok")
    result["detail"] = (f"{junit.get('tests', 0)} tests, {junit.get('failures', 0)} failed, "
                        f"{junit.get('errors', 0)} errors, {junit.get('skipped', 0)} skipped; acceptance "
                        + str(result["acceptance"].get("rc", result["acceptance"].get("status"))))
    return result


# -- stage 2: interop ---------------------------------------------------------------------

def interop_stage(s: Session, deadline: Deadline) -> dict[str, Any]:
    if s.device != "cuda":
        return {"status": "skipped (no CUDA)",
                "detail": f"zero-copy interop is a CUDA question; {s.device} here (bench.zero_copy runs anywhere)"}
    runs: list = []
    log = s.out / "logs" / "interop.log"
    result = json_run([s.python, "-m", "bench.zero_copy", "--device", s.device], s.out / "interop.json", log,
                      deadline, runs)
    if result is None:
        return {"status": "out of time" if not runs or runs[-1]["timed_out"] else "error", "runs": runs,
                "detail": f"bench.zero_copy wrote no results: see {log}"}
    return {**interop_verdict(result), "runs": runs}


def interop_verdict(result: dict[str, Any]) -> dict[str, Any]:
    """The stage's status from ``bench.zero_copy``'s rows: wrong values or an
    error fail it; right values with a copy on some path are ``copies``."""
    rows = result["rows"]
    failed = [r["path"] for r in rows if not r["values_ok"] or r["zero_copy"] is None]
    copies = [r["path"] for r in rows if r["zero_copy"] is False]
    status = "failures" if failed else "copies" if copies else "ok"
    zero = [r["path"] for r in rows if r["zero_copy"]]
    return {"status": status, "rows": rows,
            "detail": f"zero-copy: {', '.join(zero) or 'none'}; copies: {', '.join(copies) or 'none'}"
                      + (f"; failed: {', '.join(failed)}" if failed else "")}


# -- stage 3: fuzz ------------------------------------------------------------------------

def fuzz_stage(s: Session, deadline: Deadline) -> dict[str, Any]:
    chunk = 5 if s.quick else 50
    jobs = 1 if s.quick else max(1, min(8, (os.cpu_count() or 2) // 2))
    outcomes: collections.Counter[str] = collections.Counter()
    failing, runs, lost, seed, end = [], [], [], s.fuzz_seed, s.fuzz_seed + s.fuzz_programs
    while seed < end and deadline.remaining() > MIN_CHUNK_S:
        n = min(chunk, end - seed)
        path = s.out / "fuzz" / f"seeds-{seed}-{seed + n - 1}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        run = run_command([s.python, "-m", "tests.fuzz", "--device", s.device, "--n", str(n), "--seed", str(seed),
                           "--jobs", str(jobs), "--nice", "0", "--no-minimize", "--json", str(path)],
                          s.out / "logs" / f"fuzz-{seed}.log", deadline)
        runs.append(run)
        if path.exists():
            results = json.loads(path.read_text())
            outcomes.update(r["outcome"] for r in results)
            failing += sorted(r["seed"] for r in results if r["outcome"] in FUZZ_FAILURES)
        elif not run["timed_out"]:
            lost.append(run["log"])
        seed += n
    done = sum(outcomes.values())
    status = ("failures" if failing else "error" if lost else "ok" if done == s.fuzz_programs
              else "out of time")
    return {"status": status, "programs": done, "asked": s.fuzz_programs, "outcomes": dict(outcomes),
            "failing_seeds": failing, "runs": runs,
            "detail": f"{done}/{s.fuzz_programs} programs: {dict(sorted(outcomes.items()))}"
                      + (f"; chunks that wrote no results, see {lost}" if lost else "")
                      + (f"; replay: python -m tests.fuzz --device {s.device} --replay SEED" if failing else "")}


# -- stage 4: bench -----------------------------------------------------------------------

def bench_jobs(s: Session) -> list[tuple[str, list[str]]]:
    """(name, command) per bench process: the products first (the issue's
    targets), at fp32 then TF32, then each memory-bound row of bench.gpu alone,
    then the products on bfloat16 and float16 arguments, and, on a CUDA
    machine whose GPU Vulkan reaches too, the float16 products there (its
    cooperative matrices: ``lowering.kernels.coop_tiles``).  Last the newest:
    a stage out of time loses them, not the targets' baselines."""
    from . import gpu, gpu_products

    measure = ["--scale", f"{s.scale:g}", "--budget", f"{s.measure_budget:g}"]
    common = ["--device", s.device, *measure]

    def products(precisions: tuple[str, ...], device: str = s.device) -> list[tuple[str, list[str]]]:
        return [(f"{w.name}-{precision}" + ("" if device == s.device else f"-{device}"),
                 [s.python, "-m", "bench.gpu_products", "--workload", w.name, "--precision", precision,
                  "--device", device, *measure])
                for precision in precisions for w in gpu_products.PRODUCTS]
    vulkan_too = s.device == "cuda" and _hardware_vulkan()
    return (products(("fp32", "tf32"))
            + [(w.name, [s.python, "-m", "bench.gpu", "--workload", w.name, *common]) for w in gpu.WORKLOADS]
            + products(("bf16", "f16")) + (products(("f16",), "vulkan") if vulkan_too else []))


def row_summary(row: dict[str, Any]) -> dict[str, Any]:
    cells = {"workload": row["workload"], "size": row["size"], "symdiff": row["symdiff"].get("status"),
             "symdiff_ms": row["symdiff"].get("ms")}
    for name, entry in row["peers"].items():
        cells[f"{name}_ms"] = entry.get("ms")
    for key in ("x_jax", "x_torch", "precision"):
        if key in row:
            cells[key] = row[key]
    if "tflops" in row["symdiff"]:
        cells["symdiff_tflops"] = row["symdiff"]["tflops"]
    if "timing" in row["symdiff"]:  # the warm-up call: a cold compile (a fresh machine's caches) and a run
        cells["symdiff_first_s"] = row["symdiff"]["timing"]["first"]
    return cells


def json_run(cmd: list[str], path: Path, log: Path, deadline: Deadline, runs: list) -> dict[str, Any] | None:
    """``cmd --json path`` (its run added to ``runs``) and the JSON it wrote;
    None if too little time is left to start it or it wrote none."""
    if deadline.remaining() <= MIN_CHUNK_S:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    runs.append(run_command([*cmd, "--json", str(path)], log, deadline))
    return json.loads(path.read_text()) if path.exists() else None


def bench_stage(s: Session, deadline: Deadline) -> dict[str, Any]:
    from .gpu import geomean

    rows, runs, missing = [], [], []
    for name, cmd in bench_jobs(s):
        results = json_run(cmd, s.out / "bench" / f"{name}.json", s.out / "logs" / f"bench-{name}.log", deadline,
                           runs)
        if results is None:
            missing.append(name)
        else:
            rows += [row_summary(r) for r in results["rows"]]
    memory_bound = [r["x_jax"] for r in rows if "x_jax" in r and "precision" not in r]
    wrong = [r["workload"] for r in rows if r["symdiff"] != "ok"]
    status = "out of time" if missing and deadline.remaining() <= MIN_CHUNK_S else \
        "failures" if wrong or missing else "ok"
    gm = geomean(memory_bound)
    return {"status": status, "rows": rows, "missing": missing, "not ok": wrong, "runs": runs,
            "geomean_x_jax_memory_bound": gm,
            "detail": f"{len(rows)} rows, memory-bound x JAX geomean "
                      f"{'-' if gm is None else format(gm, '.2f')} over {len(memory_bound)}; "
                      f"not ok: {wrong or 'none'}; missing: {missing or 'none'}"}


# -- stage 5: sweep -----------------------------------------------------------------------

# Tuning overrides per variant, in the order they run, the likeliest gains first (a
# stage out of time loses the last); the first of each precision is the target's own
# numbers, that precision's baseline.  A variant's "precision" (default "fp32") is
# bench.gpu_products' --precision, not a Tuning field.  lowering.targets.Tuning says
# what each field does.
SWEEP_VARIANTS: list[dict[str, Any]] = [
    {},
    {"precision": "tf32"},                                      # tensor cores' baseline
    {"precision": "tf32", "group_prefetch": True},              # the next k's load during the sums
    {"precision": "tf32", "tensor_tile": [128, 64], "tensor_warps": [4, 2]},   # 32x32 a warp
    {"precision": "tf32", "tensor_tile_k": 32},                 # half the barriers
    {"precision": "tf32", "tensor_tile": [64, 64], "tensor_warps": [2, 4]},    # 32x16 a warp, more workgroups
    {"group_tile": [128, 64], "group_thread_tile": [8, 4]},     # 32 sums a thread
    {"group_prefetch": True},                                   # the next k's load during the sums
    {"group_tile": [128, 128], "group_thread_tile": [8, 8]},    # 64 sums a thread, 16 KiB of tiles
    {"group_narrow_tile": [128, 32], "group_narrow_thread_tile": [8, 2]},  # the MLP's 10-wide products
    {"split_k_target_workgroups": 132},                         # split-K: one workgroup an H100 SM
    {"group_tile_k": 32},                                       # half the barriers
    {"group_tile": [32, 32], "group_thread_tile": [2, 2]},      # 4 sums a thread, many workgroups
    {"split_k_target_workgroups": 528},                         # four
    {"group_narrow": 0},                                        # no narrow tiles
    {"split_k_min_length": 1 << 30},                            # no split-K
]
QUICK_SWEEP = 2                       # variants a --quick session runs
QUICK_SWEEP_WORKLOADS = ("gemm",)     # and on which products


def sweep_stage(s: Session, deadline: Deadline) -> dict[str, Any]:
    """Each variant of ``SWEEP_VARIANTS`` in its own process (one that fails or
    crashes loses only itself): ``bench.gpu_products`` with the device's
    ``Tuning`` overridden, JAX alone as the reference (its times are the bench
    stage's), in the GPU form on a software Vulkan.  Rows: each variant's time
    per product, and its ratio to the baseline variant's."""
    from .gpu_products import PRODUCTS

    variants = SWEEP_VARIANTS[:QUICK_SWEEP] if s.quick else SWEEP_VARIANTS
    names = [w.name for w in PRODUCTS if not s.quick or w.name in QUICK_SWEEP_WORKLOADS]
    software = s.device == "vulkan" and _software_vulkan()
    rows, runs, missing = [], [], []
    for n, variant in enumerate(variants):
        tuning = {k: v for k, v in variant.items() if k != "precision"}
        cmd = [s.python, "-m", "bench.gpu_products", "--device", s.device, "--scale", f"{s.scale:g}",
               "--budget", f"{s.measure_budget:g}", "--peers", "jax", "--tuning", json.dumps(tuning),
               "--precision", precision_of(variant),
               *[a for w in names for a in ("--workload", w)], *(["--gpu-form"] if software else [])]
        results = json_run(cmd, s.out / "sweep" / f"variant-{n}.json", s.out / "logs" / f"sweep-{n}.log", deadline,
                           runs)
        if results is None:
            missing.append(variant)
            continue
        row: dict[str, Any] = {"variant": variant}
        for r in results["rows"]:
            row[f"{r['workload']}_ms"] = r["symdiff"].get("ms")
            row[f"{r['workload']}_status"] = r["symdiff"].get("status")
        rows.append(row)
    bases = {precision_of(r["variant"]): r for r in rows if set(r["variant"]) <= {"precision"}}
    for row in rows:
        base = bases.get(precision_of(row["variant"]))
        for w in names:
            ms, base_ms = row.get(f"{w}_ms"), base and base.get(f"{w}_ms")
            row[f"{w}_x_base"] = ms / base_ms if ms and base_ms else None
    wrong = [r["variant"] for r in rows if any(r.get(f"{w}_status") != "ok" for w in names)]
    status = "out of time" if missing and deadline.remaining() <= MIN_CHUNK_S else \
        "failures" if wrong or missing else "ok"
    best = {(w, p): min((r for r in rows if r.get(f"{w}_ms") and precision_of(r["variant"]) == p),
                        key=lambda r: r[f"{w}_ms"], default=None)
            for w in names for p in sorted({precision_of(r["variant"]) for r in rows})}
    return {"status": status, "rows": rows, "missing": missing, "not ok": wrong, "runs": runs,
            "detail": f"{len(rows)}/{len(variants)} variants on {', '.join(names)}; fastest: "
                      + "; ".join(f"{w} {json.dumps(b['variant'])} {b[f'{w}_ms']:.3g} ms" if b else f"{w} {p} none"
                                  for (w, p), b in best.items())
                      + (f"; not ok: {wrong}" if wrong else "")}


def precision_of(variant: dict[str, Any]) -> str:
    """The products' precision a sweep variant runs at."""
    return variant.get("precision", "fp32")


def _software_vulkan() -> bool:
    from symdiff import lowering
    return lowering.backends.of("vulkan").is_software()


def _hardware_vulkan() -> bool:
    from symdiff import lowering
    return lowering.backends.of("vulkan").is_hardware_gpu() and "vulkan" in lowering.available_devices()


STAGES = [Stage("auto", auto_stage), Stage("tests", tests_stage), Stage("interop", interop_stage), Stage("fuzz", fuzz_stage), Stage("bench", bench_stage),
          Stage("sweep", sweep_stage)]


# -- the session --------------------------------------------------------------------------

def run_stages(session: Session, stages: list[Stage], budgets: dict[str, float],
               summary: dict[str, Any]) -> dict[str, Any]:
    """Each stage in turn within its budget; a stage that raises is recorded
    and the next one runs.  ``summary.json`` is rewritten after each."""
    summary.setdefault("stages", {})
    for stage in stages:
        started = time.monotonic()
        try:
            result = stage.run(session, Deadline(budgets[stage.name]))
        except Exception as exc:  # recorded; the other stages' results must survive it
            result = {"status": "error", "detail": f"{type(exc).__name__}: {exc}"}
        result["seconds"] = round(time.monotonic() - started, 1)
        result["budget_s"] = budgets[stage.name]
        summary["stages"][stage.name] = result
        write_summary(session.out, summary)
        print(f"bench.gpu_session: {stage.name}: {result['status']} in {result['seconds']:.0f} s", file=sys.stderr,
              flush=True)
    return summary


def write_summary(out: Path, summary: dict[str, Any]) -> None:
    tmp = out / "summary.json.tmp"
    tmp.write_text(json.dumps(summary, indent=1, default=str) + "\n")
    tmp.replace(out / "summary.json")


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def table(summary: dict[str, Any]) -> str:
    lines = [f"{'stage':<7} {'status':<17} {'s/budget':>9}  detail"]
    for name, r in summary["stages"].items():
        lines.append(f"{name:<7} {r['status']:<17} {r['seconds']:>4.0f}/{r['budget_s']:<4.0f}  {r.get('detail', '')}")
    interop = summary["stages"].get("interop", {}).get("rows", [])
    if interop:
        lines.append("")
        lines.append(f"{'interop path':<14} {'verdict':<9} {'values':<6}  pointers")
        for r in interop:
            verdict = {True: "zero-copy", False: "copy", None: "error"}[r["zero_copy"]]
            lines.append(f"{r['path']:<14} {verdict:<9} {'ok' if r['values_ok'] else 'WRONG':<6}  {r['detail']}")
    rows = summary["stages"].get("bench", {}).get("rows", [])
    if rows:
        lines.append("")
        lines.append(f"{'workload':<20} {'size':<14} {'prec':<4} {'symdiff ms':>10} {'JAX ms':>8} {'torch ms':>8} "
                     f"{'x JAX':>6} {'TFLOP/s':>8} {'first s':>7}")
        for r in rows:
            ms = _ms(r["symdiff_ms"]) if r["symdiff"] == "ok" else str(r["symdiff"])[:10]
            lines.append(f"{r['workload']:<20} {r['size']:<14} {r.get('precision', '-'):<4} {ms:>10} "
                         f"{_ms(r.get('jax_ms')):>8} {_ms(r.get('torch_ms')):>8} {_ms(r.get('x_jax')):>6} "
                         f"{_ms(r.get('symdiff_tflops')):>8} {_ms(r.get('symdiff_first_s')):>7}")
    sweep = summary["stages"].get("sweep", {}).get("rows", [])
    if sweep:
        names = sorted({k[:-3] for r in sweep for k in r if k.endswith("_ms")})
        lines.append("")
        lines.append("sweep: " + ", ".join(f"{w} ms (x base)" for w in names) + ", variant")
        for r in sweep:
            cells = [f"{_ms(r.get(w + '_ms'))} ({_ms(r.get(w + '_x_base'))})" for w in names]
            lines.append("  " + "  ".join(f"{c:<18}" for c in cells) + json.dumps(r["variant"]))
    return "\n".join(lines)


def environment(device: str) -> dict[str, Any]:
    from symdiff import lowering

    env: dict[str, Any] = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                           "available_devices": lowering.available_devices(), "python": sys.version.split()[0]}
    for key, cmd in (("commit", ["git", "rev-parse", "HEAD"]), ("gpu", ["nvidia-smi", "-L"])):
        if shutil.which(cmd[0]):
            run = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
            env[key] = run.stdout.strip() or run.stderr.strip()
    if device == "vulkan":
        env["vulkan_is_software"] = lowering.backends.of("vulkan").is_software()
    return env


def parse_budget(text: str) -> tuple[str, float]:
    name, sep, seconds = text.partition("=")
    if not sep or name not in BUDGETS:
        raise argparse.ArgumentTypeError(f"--budget {text!r}: write STAGE=SECONDS, STAGE one of {sorted(BUDGETS)}")
    try:
        value = float(seconds)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--budget {text!r}: {seconds!r} is not a number of seconds") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"--budget {text!r}: seconds must be 0 or more")
    return name, value


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.gpu_session", description=__doc__.splitlines()[0])
    p.add_argument("outdir", type=Path,
                   help="folder for summary.json, auto.json, tests.xml, interop.json, fuzz/, bench/, logs/")
    p.add_argument("--device", choices=("cuda", "vulkan"), default="cuda")
    p.add_argument("--quick", action="store_true",
                   help="a few tests, 10 fuzz programs, shorter measurements: the lavapipe rehearsal")
    p.add_argument("--scale", type=float,
                   help="bench sizes divided by this (default 1 on a GPU, 4096 on lavapipe)")
    p.add_argument("--fuzz-programs", type=int, help="fuzz campaign size (default 200, 10 with --quick)")
    p.add_argument("--fuzz-seed", type=int, default=0, help="first fuzz seed")
    p.add_argument("--budget", type=parse_budget, action="append", default=[], metavar="STAGE=SECONDS",
                   help=f"a stage's wall-clock budget (default {BUDGETS}, --quick {QUICK_BUDGETS})")
    p.add_argument("--stage", action="append", choices=list(BUDGETS), help="run only these stages (repeatable)")
    return p.parse_args(argv)


def session_of(args: argparse.Namespace, software: bool) -> tuple[Session, dict[str, float]]:
    budgets = dict(QUICK_BUDGETS if args.quick else BUDGETS)
    budgets.update(args.budget)
    scale = args.scale if args.scale is not None else 4096.0 if software else 1.0
    programs = args.fuzz_programs if args.fuzz_programs is not None else 10 if args.quick else 200
    return Session(args.outdir, args.device, args.quick, scale, programs, args.fuzz_seed,
                   0.05 if args.quick else 0.5), budgets


def main(argv: list[str]) -> dict[str, Any]:
    args = parse_args(argv)
    from symdiff import lowering

    if args.device not in lowering.available_devices():
        sys.exit(f"bench.gpu_session: no {args.device} device here (available: {lowering.available_devices()}); "
                 f"on the GPU machine run `source .device/setup.sh` first")
    software = args.device == "vulkan" and lowering.backends.of("vulkan").is_software()
    session, budgets = session_of(args, software)
    session.out.mkdir(parents=True, exist_ok=True)
    stages = [st for st in STAGES if not args.stage or st.name in args.stage]
    summary = {"command": "python -m bench.gpu_session " + " ".join(argv), "device": args.device,
               "quick": args.quick, "scale": session.scale, "budgets": budgets,
               "environment": environment(args.device)}
    started = time.monotonic()
    run_stages(session, stages, budgets, summary)
    summary["elapsed_s"] = round(time.monotonic() - started, 1)
    write_summary(session.out, summary)
    print(table(summary))
    return summary


if __name__ == "__main__":
    main(sys.argv[1:])
