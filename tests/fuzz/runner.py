"""Parent side: run programs in worker subprocesses (a crash is charged to its
seed), campaigns over many seeds, and greedy minimisation of a failure."""
from __future__ import annotations

import collections
import json
import os
import pickle
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from typing import Callable

from . import gen, models
from .check import base_device
from .gen import Program
from .minimize import candidates

ROOT = Path(__file__).resolve().parents[2]     # the repository (tests/fuzz/ -> repo)
SECONDS_PER_PROGRAM = 90                       # a hung batch is killed after this per job
FAILURES = ("wrong", "crash", "error")
# seed -> program: "ops" is gen.py's random op trees, "models" models.py's composed model blocks
GENERATORS: dict[str, Callable[[int], Program]] = {"ops": gen.generate, "models": models.generate}


def present(device: str) -> bool:
    """Whether a campaign device (``cpu+recompute``, ``vulkan+gpu-form``...) runs here."""
    import symdiff as sd
    return base_device(device) in sd.available_devices()


def judge_budget(generate: Callable[[int], Program], budget: dict, least_compared: float) -> dict:
    """A CI budget (``budget``: device -> seeds) judged on the devices present, in two
    workers side by side: no program may fail, and at least ``least_compared`` of them
    must have been compared (a run of refused or invalid programs passes vacuously).
    Returns the results by ``(device, seed)``."""
    jobs = [((d, s), generate(s), d) for d, seeds in budget.items() if present(d) for s in seeds]
    with ThreadPoolExecutor(2) as pool:
        results = {k: r for part in pool.map(run_batch, [jobs[0::2], jobs[1::2]]) for k, r in part.items()}
    failed = [(job, results[job[0]]) for job in jobs if results[job[0]]["outcome"] in FAILURES]
    assert not failed, "\n\n".join(report_failure(p, d, r) for (_, p, d), r in failed)
    ok = sum(r["outcome"] == "ok" for r in results.values())
    assert ok >= least_compared * len(results), f"only {ok} of {len(results)} programs were compared"
    return results


def generator_of(prog: Program) -> str:
    """The name of the generator that made ``prog`` (for a re-run line)."""
    return getattr(prog, "generator", "ops")


def run_batch(jobs: list[tuple], timeout_per_job: float = SECONDS_PER_PROGRAM, nice: int = 0) -> dict:
    """``{key: result dict}`` for jobs ``(key, program, device)``, each judged in
    a worker process; a batch that dies is re-run one job at a time so that
    ``crash`` names the program that caused it."""
    if not jobs:
        return {}
    env = dict(os.environ, PYTHONFAULTHANDLER="1")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "tests.fuzz.worker"]
    if nice:
        cmd = ["nice", "-n", str(nice)] + cmd
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    numbered = [(t, prog, device) for t, (_, prog, device) in enumerate(jobs)]   # keys need not be JSON
    try:
        stdout, stderr = proc.communicate(pickle.dumps(numbered), timeout=timeout_per_job * len(jobs) + 30)
        hung = False
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
        hung = True
    results, referenced = {}, set()
    for line in stdout.decode(errors="replace").splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        key = jobs[r.pop("key")][0]
        if r.get("stage") == "reference":
            referenced.add(key)
        else:
            results[key] = r
    if proc.returncode == 0 and len(results) == len(jobs):
        return results
    if len(jobs) == 1:
        key, prog, device = jobs[0]
        why = "timed out" if hung else f"exit status {proc.returncode}"
        tail = stderr.decode(errors="replace")[-1500:]
        prior = results.get(key, {}).get("outcome")
        detail = f"{why} (after outcome {prior!r})" if prior else why
        # died before the JAX reference was known: XLA aborted on the oracle, not a symdiff crash
        outcome = "crash" if key in referenced or hung else "invalid"
        if outcome == "invalid":
            detail = f"the JAX oracle's process died: {detail}"
        return {key: {"seed": prog.seed, "device": device, "outcome": outcome, "detail": f"{detail}\n{tail}",
                      "worst": {}}}
    # the process died: judge everything without a result again, one at a time,
    # and (a crash at exit leaves every result) every job when none is missing
    missing = [j for j in jobs if j[0] not in results] or jobs
    for job in missing:
        results.update(run_batch([job], timeout_per_job, nice))
    return results


def campaign(device: str, seeds: list[int], jobs: int = 1, batch: int = 8, nice: int = 10,
             log=None, generator: str = "ops") -> dict[int, dict]:
    """Judge the programs of ``seeds`` (made by ``GENERATORS[generator]``) on ``device``; ``{seed: result}``."""
    log = log or (lambda msg: print(msg, flush=True))
    generate = GENERATORS[generator]
    work = [[(s, generate(s), device) for s in seeds[k:k + batch]] for k in range(0, len(seeds), batch)]
    results: dict[int, dict] = {}
    counts: collections.Counter = collections.Counter()
    start = time.time()
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for done in pool.map(lambda b: run_batch(b, nice=nice), work):
            for seed, r in sorted(done.items()):
                results[seed] = r
                counts[r["outcome"]] += 1
                if r["outcome"] not in ("ok",):
                    log(f"  seed {seed} {device}: {r['outcome']} {short(r)}")
            log(f"[{device}] {len(results)}/{len(seeds)} {dict(counts)} ({time.time() - start:.0f} s)")
    return results


def short(r: dict) -> str:
    if r.get("worst"):
        w = r["worst"]
        head = f"{w.get('quantity')}: err {w.get('err'):.3g} (tol {w.get('tol'):.3g}) "
        if "detail" in w:    # NaN or a shape mismatch: no element to show
            return head + w["detail"]
        return head + f"(got {w.get('got')}, expected {w.get('expected')} at {w.get('at')})"
    return r.get("detail", "").strip().splitlines()[0][:300] if r.get("detail") else ""


def same_failure(a: dict, b: dict) -> bool:
    """A candidate keeps the failure: same outcome, and for errors the same exception type."""
    if a["outcome"] != b["outcome"]:
        return False
    if a["outcome"] in ("error", "refused"):
        return a["detail"].split(":")[0] == b["detail"].split(":")[0]
    return True


def still_fails(device: str, failure: dict) -> Callable[[list[Program]], list[bool]]:
    """The judge ``minimize`` uses by default: which of some programs fail on
    ``device`` as ``failure`` did (one worker process per call)."""
    def judge(progs: list[Program]) -> list[bool]:
        res = run_batch([(t, c, device) for t, c in enumerate(progs)])
        return [t in res and same_failure(res[t], failure) for t in range(len(progs))]
    return judge


def minimize(prog: Program, device: str, failure: dict, budget_s: float = 300, log=print,
             judge: Callable[[list[Program]], list[bool]] | None = None) -> Program:
    """Greedy delta-minimisation: try the candidates of the current program in
    batches, keep the first that still fails the same way, until none does
    (or the time budget is spent).  ``judge`` (tests plant failures with one)
    says which candidates of a batch still fail; by default they are run."""
    judge = judge or still_fails(device, failure)
    start = time.time()
    current = prog
    while time.time() - start < budget_s:
        cands = list(candidates(current))
        improved = False
        for k in range(0, len(cands), 6):
            chunk = cands[k:k + 6]
            hit = next((t for t, bad in enumerate(judge(chunk)) if bad), None)
            if hit is not None:
                current, improved = chunk[hit], True
                log(f"  minimise: {len(current.numpy_source())} chars")
                break
            if time.time() - start > budget_s:
                break
        if not improved:
            break
    return current


def report_failure(prog: Program, device: str, r: dict, minimal: Program | None = None) -> str:
    """A readable, re-runnable account of one failure."""
    shown = minimal or prog
    lines = [f"=== seed {prog.seed} on {device}: {r['outcome']}",
             f"    {short(r)}" if r.get("worst") else "    " + "\n    ".join(r.get("detail", "").splitlines()[:12])]
    lines.append(f"--- {'minimised ' if minimal else ''}program (F = sd.{'f64' if device == 'numpy' else 'f32'}; "
                 f"inputs: tests.fuzz.gen.make_inputs(prog) with seed {prog.seed}, edge={shown.edge}"
                 f"{', second order wrt ' + shown.second if shown.second else ''})")
    lines.append(shown.numpy_source())
    lines.append("--- JAX twin")
    lines.append(shown.jax_source())
    which = generator_of(prog)
    lines.append(f"--- re-run: python -m tests.fuzz --device {device}"
                 f"{'' if which == 'ops' else ' --generator ' + which} --replay {prog.seed}")
    return "\n".join(lines)
