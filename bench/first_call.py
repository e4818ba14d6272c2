"""Where the first ``value_and_grad`` call of an unrolled loop program spends its time:
``python -m bench.first_call [--device cpu] [--profile N] [KERNEL ...]``.

The first call of a program traces it, validates the graph, differentiates it
(``add_backward_pass``), validates again, plans kernels, generates Slang and
compiles it (g++ on slangpy's CPU device).  This runs each stage alone on
NPBench-style kernels whose Python loops unroll (ludcmp, seidel-2d, adi and a
lid-driven cavity flow) and prints one row per kernel with seconds per stage,
so a change to any stage shows where it helped.  Each kernel runs in a fresh
process with an empty shader cache (a cold first call, as a user gets it).
Stage times are CPU seconds of the process and its g++ children, which other
work on a shared machine does not inflate as it does wall time.  ``--profile N``
adds cProfile's N most expensive functions per kernel.  The gradient is
checked against ``device="numpy"``, so a fast wrong answer never prints a time.

Names may be bench workloads too (``--bench``: all of them, at ``--size small|large``;
large ones are checked against JAX's ``jit(value_and_grad)``, as ``python -m bench``
does); the table then also shows device creation and g++'s CPU seconds, as markdown
rows.  ``--with-prelude``: every row finds the precompiled prelude built first
(``lowering.compiler_cache``), as on a machine where symdiff compiled before.

``--second``: the real first call (``program.value_and_grad``) of each kernel in two
fresh processes sharing one cache directory: cold (empty caches) and a second process,
started once the first one's background compiles have ended, served by the on-disk
caches (``lowering.disk_cache``: backward graph, plan and module;
``lowering.compiler_cache``: g++'s library on the CPU device; slangpy's shader cache).

``--workloads``: the same cold / second-process pair for every ``python -m bench``
workload (small sizes; ``program.slang_source``, which builds what the first call runs),
plus warm: a second program object of the same function in the same process.

``--fori``: a jacobi-2d of ``--steps`` time steps written with ``sd.fori_loop``
against JAX's ``jit(value_and_grad)`` of ``lax.fori_loop`` (float64): first
call (CPU seconds), steady call (wall, best of 3), the peak memory of
symdiff's host arrays, and the buffers besides the arguments (JAX: XLA's
memory analysis; symdiff: planned buffers plus the loop states its reverse
pass held); gradients compared with JAX's.  ``--cubic`` adds ``A -= 0.05 A^3``
to each step, so that the reverse pass needs the states (jacobi's alone is
linear: neither JAX nor symdiff keeps any).
"""
from __future__ import annotations

import argparse
import cProfile
import importlib.util
import inspect
import json
import os
import pstats
import resource
import subprocess
import sys
import tempfile
import tracemalloc
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
STAGES = ("device", "trace", "validate", "differentiate", "validate_bw", "plan", "codegen", "compile", "run")


def _polybench():
    """tests/kernels/polybench.py, the kernels' single definition (not a package)."""
    spec = importlib.util.spec_from_file_location("polybench", ROOT / "tests" / "kernels" / "polybench.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["polybench"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def cavity_flow(u, v, p):
    """Lid-driven cavity (NPBench's cavity_flow, "12 steps to Navier-Stokes"): per time step a
    pressure source, ``nit`` Jacobi sweeps of the pressure Poisson equation with its boundary
    conditions, then the momentum update of u and v.  Loops unroll: nt * (nit + 1) bodies."""
    nt, nit = 3, 5
    ny, nx = u.shape
    dx, dy = 2.0 / (nx - 1), 2.0 / (ny - 1)
    dt, rho, nu = 0.001, 1.0, 0.1
    b = np.zeros_like(u)
    for _ in range(nt):
        un = u.copy()
        vn = v.copy()
        dudx = (un[1:-1, 2:] - un[1:-1, :-2]) / (2 * dx)
        dudy = (un[2:, 1:-1] - un[:-2, 1:-1]) / (2 * dy)
        dvdx = (vn[1:-1, 2:] - vn[1:-1, :-2]) / (2 * dx)
        dvdy = (vn[2:, 1:-1] - vn[:-2, 1:-1]) / (2 * dy)
        b[1:-1, 1:-1] = rho * ((dudx + dvdy) / dt - dudx ** 2 - 2 * dudy * dvdx - dvdy ** 2)
        for _ in range(nit):
            pn = p.copy()
            p[1:-1, 1:-1] = (((pn[1:-1, 2:] + pn[1:-1, :-2]) * dy ** 2 + (pn[2:, 1:-1] + pn[:-2, 1:-1]) * dx ** 2)
                             / (2 * (dx ** 2 + dy ** 2))
                             - dx ** 2 * dy ** 2 / (2 * (dx ** 2 + dy ** 2)) * b[1:-1, 1:-1])
            p[:, -1] = p[:, -2]
            p[0, :] = p[1, :]
            p[:, 0] = p[:, 1]
            p[-1, :] = 0.0
        c = un[1:-1, 1:-1]
        lap_u = (un[1:-1, 2:] - 2 * c + un[1:-1, :-2]) / dx ** 2 + (un[2:, 1:-1] - 2 * c + un[:-2, 1:-1]) / dy ** 2
        u[1:-1, 1:-1] = (c - c * dt / dx * (c - un[1:-1, :-2]) - vn[1:-1, 1:-1] * dt / dy * (c - un[:-2, 1:-1])
                         - dt / (2 * rho * dx) * (p[1:-1, 2:] - p[1:-1, :-2]) + nu * dt * lap_u)
        w = vn[1:-1, 1:-1]
        lap_v = (vn[1:-1, 2:] - 2 * w + vn[1:-1, :-2]) / dx ** 2 + (vn[2:, 1:-1] - 2 * w + vn[:-2, 1:-1]) / dy ** 2
        v[1:-1, 1:-1] = (w - c * dt / dx * (w - vn[1:-1, :-2]) - w * dt / dy * (w - vn[:-2, 1:-1])
                         - dt / (2 * rho * dy) * (p[2:, 1:-1] - p[:-2, 1:-1]) + nu * dt * lap_v)
        u[0, :] = 0.0
        u[:, 0] = 0.0
        u[:, -1] = 0.0
        u[-1, :] = 1.0
        v[0, :] = 0.0
        v[-1, :] = 0.0
        v[:, 0] = 0.0
        v[:, -1] = 0.0
    return np.sum(u * u) + np.sum(v * v) + np.sum(p * p)


def kernels() -> dict[str, tuple[Callable, dict[str, tuple[int, ...]]]]:
    """name -> (body, argument shapes).  Sizes as in tests/kernels, seidel-2d and ludcmp larger
    so the unrolled body count is in the hundreds."""
    pb = _polybench()
    return {
        "ludcmp": (pb.ludcmp, {"A": (8, 8), "b": (8,)}),
        "seidel_2d": (pb.seidel_2d, {"A": (6, 7)}),
        "adi": (pb.adi, {"u": (8, 8)}),
        "cavity_flow": (cavity_flow, {"u": (8, 8), "v": (8, 8), "p": (8, 8)}),
    }


def _inputs(name: str, shapes: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    out = {n: rng.uniform(0.1, 0.5, s) for n, s in shapes.items()}
    if name == "ludcmp":  # diagonally dominant: no pivoting needed
        out["A"] += np.eye(shapes["A"][0]) * shapes["A"][0]
    return out


def cpu_seconds() -> float:
    """CPU seconds of this process and its finished children (g++ on the CPU device): unlike
    wall time, not inflated by other work on a shared machine."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime + children_seconds()


@dataclass(frozen=True)
class Case:
    """One program the stage table measures: an NPBench kernel (float64, every
    argument differentiated) or a ``python -m bench`` workload at one size."""

    body: Callable
    specs: dict[str, Any]  # argument -> sd.f32[...] / sd.f64[...] / sd.i32[...]
    wrt: tuple[str, ...]
    inputs: Callable[[], dict[str, np.ndarray]]
    tol: float  # relative L2 error of each gradient against the reference
    options: dict = field(default_factory=dict)  # sd.differentiable_program keywords
    # {argument: gradient} to check against; None: the numpy device's (the IR interpreter is
    # too slow at the bench's large sizes, where JAX's jit(value_and_grad) is the reference, as in bench)
    reference: Callable[[], dict[str, np.ndarray]] | None = None


def case(name: str, size: str = "small") -> Case:
    """The kernel or bench workload ``name`` (workloads at ``size``)."""
    if name in kernels():
        body, shapes = kernels()[name]
        return Case(body, {n: sd_module().f64[s] for n, s in shapes.items()}, tuple(shapes),
                    lambda: _inputs(name, shapes), 1e-9)
    from .symdiff_runner import program_function
    from .workloads import WORKLOADS
    w = next((w for w in WORKLOADS if w.name == name), None)
    if w is None:
        raise SystemExit(f"no kernel or workload {name!r}: kernels {list(kernels())}, "
                         f"workloads {[w.name for w in WORKLOADS]}")
    fn = program_function(w, w.size(size))
    return Case(fn, dict(fn.__annotations__), w.wrt, lambda: w.inputs(w.size(size)), w.tol, dict(w.options),
                None if size == "small" else lambda: _jax_grads(w, size))


def _jax_grads(workload, size: str) -> dict[str, np.ndarray]:
    from .peers import JaxPeer
    run = JaxPeer().runner(workload, workload.inputs(workload.size(size)))
    return run.to_numpy(run.value_and_grad())[1]


def _check(name: str, device: str, c: Case, got: dict[str, Any], numpy_grads: Callable[[], dict]) -> None:
    """Raise unless every gradient in ``got`` is within ``c.tol`` of the reference."""
    want = c.reference() if c.reference is not None else numpy_grads()
    for w, g in want.items():
        err = _relative_error(np.asarray(got[w], np.float64), np.asarray(g, np.float64))
        if not err <= c.tol:
            raise AssertionError(f"{name}: gradient of {w} on {device} differs from the reference ({err:.1e})")


def sd_module():
    import symdiff as sd
    return sd


def _relative_error(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))


def children_seconds() -> float:
    """CPU seconds of this process's finished child processes: g++ (and its wrapper) on the CPU device."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return children.ru_utime + children.ru_stime


def measure(name: str, device: str, size: str = "small") -> dict[str, float]:
    """CPU seconds per stage of one cold first call of kernel or workload ``name`` (run in
    this process); ``gxx``: CPU seconds of g++ (the compile stage's child processes), so
    ``compile - gxx`` is Slang's own work (front end and C++ generation)."""
    from symdiff import ir
    from symdiff import lowering
    import symdiff as sd
    from symdiff.lowering import backends, cache
    from symdiff.lowering.codegen import generate
    from symdiff.lowering.plan import plan

    c = case(name, size)
    t: dict[str, float] = {}

    def stage(key: str, fn: Callable):
        start = cpu_seconds()
        out = fn()
        t[key] = cpu_seconds() - start
        return out

    dev = stage("device", lambda: backends.of(device).device())
    graph = stage("trace", lambda: ir.trace(c.body, *c.specs.values()))
    stage("validate", graph.validate)
    backward = graph.copy()
    differentiation = {k: v for k, v in c.options.items() if k in inspect.signature(sd.add_backward_pass).parameters}
    grads = stage("differentiate", lambda: sd.add_backward_pass(backward, inputs=list(c.wrt),
                                                                outputs=backward.results, **differentiation))
    stage("validate_bw", backward.validate)
    target = backends.of(device).target()
    p = stage("plan", lambda: plan(backward, {}, target))
    module = stage("codegen", lambda: generate(p, target))
    entries = module.entry_points(target.sequential)
    before = dict(cache.stats)
    work = sum(max(k.work, k.threads) for k in module.kernels)
    gxx = children_seconds()
    stage("compile", lambda: cache.kernels(device, dev, module.source, entries, work=work))
    t["gxx"] = children_seconds() - gxx
    t["front_end_wall"] = cache.stats["front_end_seconds"] - before["front_end_seconds"]
    t["backend_wall"] = cache.stats["backend_seconds"] - before["backend_seconds"]
    t["level"] = cache.optimization(device, module.source, work)
    t["source_chars"] = len(module.source)
    inputs = c.inputs()
    seeds = {s: np.ones(()) for s in backward.meta["seeds"].values()}

    exe = lowering.compile(backward, device=device)  # repeats validate, plan and codegen (compile is cached)
    results = stage("run", lambda: exe({**inputs, **seeds}))
    _check(name, device, c, {w: results[g] for w, g in grads.items()},
           lambda: {w: r[g] for r in [lowering.compile(backward, device="numpy")({**inputs, **seeds})]
                    for w, g in grads.items()})
    t["tasklets_fw"] = len(graph.tasklets())
    t["tasklets_bw"] = len(backward.tasklets())
    t["kernels"] = len(p.kernels)
    return t


def first_call(name: str, device: str, size: str = "small") -> dict[str, Any]:
    """CPU and wall seconds of one real first ``value_and_grad`` of kernel or workload ``name``
    in this process (whatever the on-disk caches hold), checked against the reference (``Case.reference``);
    ``device``: what creating the device took before (not in the call's seconds)."""
    import symdiff as sd
    from symdiff.lowering import backends, cache, disk_cache

    c = case(name, size)
    start = time.perf_counter()
    backends.of(device).device()  # created before the clock starts, as in the stage table
    made = time.perf_counter() - start
    inputs = c.inputs()
    program = sd.differentiable_program(c.body, **c.options)
    cpu, wall, gxx = cpu_seconds(), time.perf_counter(), children_seconds()
    _, grads = program.value_and_grad(*inputs.values(), wrt=list(c.wrt), device=device)
    cpu, wall, gxx = cpu_seconds() - cpu, time.perf_counter() - wall, children_seconds() - gxx
    _check(name, device, c, grads, lambda: program.value_and_grad(*inputs.values(), wrt=list(c.wrt), device="numpy")[1])
    return {"cpu": cpu, "wall": wall, "gxx": gxx, "device": made, "disk": dict(disk_cache.stats), "compile": dict(cache.stats)}


def workloads_child(device: str) -> dict[str, Any]:
    """Cold (or second-process) and warm compile seconds of every bench workload, small size."""
    import symdiff as sd
    from symdiff.lowering import backends, disk_cache
    from .symdiff_runner import program_function
    from .workloads import WORKLOADS

    backends.of(device).device()
    sd.differentiable_program(lambda x: np.sum(x * x)).value_and_grad(np.ones(4, np.float32), device=device)
    out = {}
    for w in WORKLOADS:
        fn = program_function(w, w.small)
        row = {}
        hits = disk_cache.stats["hits"]
        for label in ("first", "warm"):  # warm: a second program object of the same function
            program = sd.differentiable_program(fn, **w.options)
            cpu, wall = cpu_seconds(), time.perf_counter()
            program.slang_source(wrt=list(w.wrt), device=device)
            row[label] = {"cpu": cpu_seconds() - cpu, "wall": time.perf_counter() - wall}
        # the first run: lavapipe compiles each pipeline for the driver at its first dispatch
        wall = time.perf_counter()
        program.value_and_grad(*w.inputs(w.small).values(), wrt=list(w.wrt), device=device)
        row["run"] = time.perf_counter() - wall
        row["disk_hits"] = disk_cache.stats["hits"] - hits
        out[w.name] = row
    return out


def _background_done(device: str, limit: float = 300.0) -> None:
    """Wait (after a child's measurement) until the compiles it left running in the background
    have ended: the -O3 libraries of the CPU modules it compiled at -O0 and the precompiled
    preludes.  The second of ``_twice``'s processes then starts as a user's next session does,
    its cores not shared with them (started at once, it measured a restart within seconds)."""
    from symdiff.lowering import cache
    from .symdiff_runner import prelude_seconds
    cache.wait_for_later(limit)
    prelude_seconds(device, limit)


def _twice(args: list[str]) -> list[dict[str, Any]]:
    """Run ``bench.first_call ARGS`` in two fresh processes sharing one empty cache directory
    (the first one's background compiles ended before the second starts: ``_background_done``)."""
    runs = []
    with tempfile.TemporaryDirectory() as cache_home:
        env = dict(os.environ, XDG_CACHE_HOME=cache_home, SYMDIFF_CACHE_DIR=cache_home)
        for _ in range(2):
            proc = subprocess.run([sys.executable, "-m", "bench.first_call", *args], cwd=ROOT, env=env,
                                  capture_output=True, text=True)
            if proc.returncode:
                raise RuntimeError(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "child failed")
            runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return runs


def prepare_prelude(cache_home: str, device: str) -> None:
    """Compile a trivial program with caches in ``cache_home`` and wait for the precompiled
    prelude that it starts building (``lowering.compiler_cache``): what a process finds on a
    machine where symdiff has compiled anything before."""
    env = dict(os.environ, XDG_CACHE_HOME=cache_home, SYMDIFF_CACHE_DIR=cache_home)
    code = ("import numpy as np, symdiff as sd; sd.differentiable_program(lambda x: np.sum(x * x))"
            f".value_and_grad(np.ones(4, np.float32), device={device!r})")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True, capture_output=True)
    deadline = time.monotonic() + 120
    while not list(Path(cache_home).rglob("prelude.h.gch")) and time.monotonic() < deadline:
        time.sleep(0.5)


def workload_names() -> list[str]:
    from .workloads import WORKLOADS
    return [w.name for w in WORKLOADS]


def second_table(names: list[str], device: str, size: str = "small") -> None:
    print(f"first value_and_grad, device={device}, workloads at size {size}: cold (fresh process, empty caches) "
          "and a second process (on-disk caches from the first); CPU s (g++ included) and wall s, device "
          "creation (wall s) not included")
    print(f"| program | cold cpu | cold wall | of which g++ | 2nd cpu | 2nd wall | of which g++ | 2nd-process disk hits |\n"
          "|---|---|---|---|---|---|---|---|")
    for name in names:
        try:
            cold, second = _twice(["--child-first", "--device", device, "--size", size, name])
        except RuntimeError as exc:
            print(f"| {name} | FAILED: {exc} |")
            continue
        print(f"| {name} | {cold['cpu']:.2f} | {cold['wall']:.2f} | {cold['gxx']:.2f} | {second['cpu']:.2f} | "
              f"{second['wall']:.2f} | {second['gxx']:.2f} | {second['disk']['hits']} |", flush=True)


def workloads_table(device: str) -> None:
    print(f"bench workloads (small), device={device}: trace + differentiate + generate + compile of a new "
          "program (program.slang_source), seconds wall (CPU); cold: fresh process, empty caches; warm: a second "
          "program object in the same process; 2nd: a fresh process served by the first's on-disk caches")
    print("then the first value_and_grad's run (its first dispatches: lavapipe compiles pipelines there)")
    print(f"{'workload':<28} {'cold':>13} {'warm ms':>8} {'2nd':>13} {'cold run':>9} {'2nd run':>8}")
    cold, second = _twice(["--child-workloads", "--device", device])
    for name, row in cold.items():
        c, w, s = row["first"], row["warm"], second[name]["first"]
        print(f"{name:<28} {c['wall']:>6.3f} ({c['cpu']:.2f}) {w['wall'] * 1e3:>8.2f} {s['wall']:>6.3f} ({s['cpu']:.2f})"
              f" {row['run']:>9.3f} {second[name]['run']:>8.3f}"
              + ("" if second[name]["disk_hits"] else "  (no disk hit)"), flush=True)


def child(name: str, device: str, profile: int, size: str) -> None:
    if profile:
        prof = cProfile.Profile()
        result = prof.runcall(measure, name, device, size)
        stats = pstats.Stats(prof, stream=sys.stderr)
        stats.sort_stats("cumulative").print_stats(profile)
    else:
        result = measure(name, device, size)
    print(json.dumps(result))


def _jacobi_step(t, state):
    A, B = state
    B[1:-1, 1:-1] = 0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1] + A[:-2, 1:-1])
    A[1:-1, 1:-1] = 0.2 * (B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1] + B[:-2, 1:-1])
    return A, B


def _cubic_step(t, state):
    A, B = _jacobi_step(t, state)
    return A - 0.05 * A * A * A, B


def fori_row(impl: str, device: str, steps: int, n: int, cubic: bool = False,
             budget: float | None = None) -> dict[str, Any]:
    """One implementation of the fori_loop jacobi-2d, measured in this (fresh) process."""
    rng = np.random.default_rng(0)
    A, B = rng.uniform(0, 1, (n, n)), rng.uniform(0, 1, (n, n))
    if impl == "jax":
        import jax
        import jax.numpy as jnp
        jax.config.update("jax_enable_x64", True)

        def step(t, state):
            A, B = state
            B = B.at[1:-1, 1:-1].set(0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1] + A[:-2, 1:-1]))
            A = A.at[1:-1, 1:-1].set(0.2 * (B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1] + B[:-2, 1:-1]))
            return (A - 0.05 * A * A * A if cubic else A), B

        def loss(A, B):
            A, B = jax.lax.fori_loop(0, steps, step, (A, B))
            return jnp.sum(A * A)
        fn = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))

        def call():
            value, (gA, gB) = fn(A, B)
            return float(value), {"A": np.asarray(gA), "B": np.asarray(gB)}

        def buffers():  # XLA's buffers besides the arguments: temporaries (the loop's saved states) and outputs
            mem = fn.lower(A, B).compile().memory_analysis()
            return mem.temp_size_in_bytes + mem.output_size_in_bytes
    else:
        import symdiff as sd

        @sd.differentiable_program
        def jacobi_2d(A: sd.f64[n, n], B: sd.f64[n, n]):
            A, B = sd.fori_loop(0, steps, _cubic_step if cubic else _jacobi_step, (A, B))
            return np.sum(A * A)

        def call():
            return jacobi_2d.value_and_grad(A, B, device=device,
                                            memory_budget=None if budget is None else int(budget * 2 ** 20))

        def buffers():  # besides the arguments: the program's and each loop's executables, the states held
            (stats,) = jacobi_2d.stats().values()
            return stats["peak_bytes"] + sum(loop["peak_bytes"] + loop["reverse_step_peak_bytes"]
                                             + loop["held_state_bytes"] for loop in stats["loops"].values())
    start = cpu_seconds()
    value, grads = call()
    first = cpu_seconds() - start
    steady = []
    for _ in range(3):
        t0 = time.perf_counter()
        call()
        steady.append(time.perf_counter() - t0)
    peak = None
    if impl != "jax":  # host memory of a steady call: checkpoints and state copies are numpy arrays
        tracemalloc.start()
        call()
        peak = tracemalloc.get_traced_memory()[1] / 2 ** 20
        tracemalloc.stop()
    return {"first": first, "steady": min(steady), "peak_mib": peak, "buffers_mib": buffers() / 2 ** 20,
            "value": float(value),
            "grads": {k: np.asarray(v).tolist() for k, v in grads.items()}}


def fori_table(device: str, steps: int, n: int, cubic: bool = False, budget: float | None = None) -> None:
    print(f"jacobi-2d{' + cubic term' if cubic else ''} {n}x{n}, {steps} steps with fori_loop, value_and_grad (float64); first: CPU s of a "
          "fresh process, empty shader cache; steady: wall s, best of 3; host MiB: numpy memory at the peak of a "
          "steady call (tracemalloc; JAX's buffers are not seen by it); buffers MiB: device buffers besides "
          "the arguments (JAX: XLA's memory_analysis temp + output; symdiff: the executables' planned buffers "
          "and the loop states its reverse pass held)")
    print(f"{'impl':<16} {'first':>8} {'steady':>8} {'host MiB':>8} {'buffers MiB':>11}  check")
    rows = {}
    for impl in ("jax", "symdiff"):
        with tempfile.TemporaryDirectory() as cache_home:
            env = dict(os.environ, XDG_CACHE_HOME=cache_home, SYMDIFF_CACHE_DIR=cache_home)
            cmd = [sys.executable, "-m", "bench.first_call", "--child-fori", impl, "--device", device,
                   "--steps", str(steps), "--n", str(n), *(["--cubic"] if cubic else []),
                   *(["--budget", str(budget)] if budget is not None else [])]
            proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        if proc.returncode:
            print(f"{impl:<16} FAILED: {proc.stderr.strip().splitlines()[-1:]}")
            continue
        rows[impl] = json.loads(proc.stdout.strip().splitlines()[-1])
    ref = rows.get("jax")
    for impl, r in rows.items():
        check = ""
        if impl != "jax" and ref is not None:
            err = max(np.max(np.abs(np.array(r["grads"][k]) - np.array(ref["grads"][k])))
                      / max(np.max(np.abs(ref["grads"][k])), 1e-30) for k in ref["grads"])
            check = "WRONG" if not err <= 1e-9 else f"grads rel err {err:.1e} vs JAX"
        name = impl if impl == "jax" else f"symdiff-{device}" + (f" {budget:g}MiB" if budget is not None else "")
        peak = "n/a" if r["peak_mib"] is None else f"{r['peak_mib']:.1f}"
        print(f"{name:<16} {r['first']:>8.2f} {r['steady']:>8.3f} {peak:>8} {r['buffers_mib']:>11.2f}  {check}",
              flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernels", nargs="*", help="kernel or bench workload names (default: the kernels)")
    parser.add_argument("--bench", action="store_true", help="every python -m bench workload instead")
    parser.add_argument("--size", default="small", choices=("small", "large"), help="workloads' size")
    parser.add_argument("--with-prelude", action="store_true",
                        help="stage table: every row finds the precompiled prelude (a machine that compiled before)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--profile", type=int, default=0, help="print cProfile's top N functions per kernel")
    parser.add_argument("--fori", action="store_true", help="the fori_loop jacobi-2d row instead")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--cubic", action="store_true", help="--fori: a cubic term in each step (states needed)")
    parser.add_argument("--budget", type=float, default=None, help="--fori: symdiff's memory_budget in MiB")
    parser.add_argument("--n", type=int, default=64)
    parser.add_argument("--second", action="store_true", help="cold vs second-process first calls")
    parser.add_argument("--workloads", action="store_true", help="cold / warm / second process of bench workloads")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child-first", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child-workloads", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child-fori", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_fori:
        print(json.dumps(fori_row(args.child_fori, args.device, args.steps, args.n, args.cubic, args.budget)))
        return
    if args.fori:
        fori_table(args.device, args.steps, args.n, args.cubic, args.budget)
        return
    if args.child_workloads:
        print(json.dumps(workloads_child(args.device)))
        _background_done(args.device)
        return
    if args.workloads:
        workloads_table(args.device)
        return
    names = args.kernels or (workload_names() if args.bench else list(kernels()))
    if args.child_first:
        print(json.dumps(first_call(names[0], args.device, args.size)))
        _background_done(args.device)
        return
    if args.second:
        second_table(names, args.device, args.size)
        return
    if args.child:
        child(names[0], args.device, args.profile, args.size)
        return
    print(f"first value_and_grad call, device={args.device}, workloads at size {args.size}: CPU seconds per "
          "stage (cold: fresh process, empty caches" + (" but the precompiled prelude" if args.with_prelude else "")
          + "); compile = Slang (front end and C++ generation) + g++ "
          "(its child processes' CPU s); wall: the whole child process, Python's start and imports included")
    print("| program | tasklets fw/bw | kernels | " + " | ".join(STAGES) + " | of which g++ | total | wall | level |")
    print("|---" * (len(STAGES) + 7) + "|")
    shared = tempfile.TemporaryDirectory() if args.with_prelude else None
    if shared is not None:
        prepare_prelude(shared.name, args.device)
    for name in names:
        with tempfile.TemporaryDirectory() as fresh:
            cache_home = shared.name if shared is not None else fresh
            env = dict(os.environ, XDG_CACHE_HOME=cache_home, SYMDIFF_CACHE_DIR=cache_home)
            cmd = [sys.executable, "-m", "bench.first_call", "--child", "--device", args.device,
                   "--profile", str(args.profile), "--size", args.size, name]
            start = time.perf_counter()
            proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
            wall = time.perf_counter() - start
        if args.profile:
            print(proc.stderr, file=sys.stderr)
        if proc.returncode:
            print(f"| {name} | FAILED: {proc.stderr.strip().splitlines()[-1:]} |")
            continue
        t = json.loads(proc.stdout.strip().splitlines()[-1])
        print(f"| {name} | {t['tasklets_fw']}/{t['tasklets_bw']} | {t['kernels']} | "
              + " | ".join(f"{t[s]:.2f}" for s in STAGES)
              + f" | {t['gxx']:.2f} | {sum(t[s] for s in STAGES):.2f} | {wall:.1f} | {t['level']} |", flush=True)

if __name__ == "__main__":
    main()
