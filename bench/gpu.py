"""``python -m bench.gpu``: symdiff's value_and_grad against JAX ``jit(value_and_grad)`` and
PyTorch eager autograd on the same device, at GPU sizes.

On ``--device cuda`` (or a hardware Vulkan device) the peers run on the GPU
(JAX's "gpu" platform, torch's "cuda"); on ``cpu`` or lavapipe they run on the
CPU, so the command can be tried anywhere at a large ``--scale``.  Every
input is on the device before the clock starts, and every timed call ends when
the scalar value has been read back to the host (a device sync).  The
workloads are the GPU issue's (issue 11) table; ``--scale`` divides each
one's element count so the whole set runs on a small machine.  Per workload:
median times, ratios, a bandwidth floor (inputs read once, gradients written
once), symdiff's kernel count, device memory, and symdiff's error against JAX
(a row above ``TOLERANCE`` says WRONG instead of a speed).  See
docs/benchmarks.md, "GPU".
"""
from __future__ import annotations

import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # JAX takes 75% of a GPU up front otherwise

import argparse
import datetime
import functools
import gc
import math
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from symdiff import lowering
from symdiff.ir import DTYPES
import symdiff as sd

from . import report, symdiff_runner
from .__main__ import relative_error
from .peers import Grads, JaxPeer, Peer, Runner, TorchPeer
from .timing import Timing, describe, measure
from .workloads import (Init, Size, Workload, conv1d, elementwise_chain, jacobi_2d, jacobi_2d_functional,
                        layer_norm, map_stencil, map_stencil_functional, nbody_energy, one_hot, positive,
                        softmax_xent, sum_reduction)

TOLERANCE = 1e-3          # relative L2 error of the value or a gradient above which a row is WRONG
BYTES_PER_ELEMENT = 4     # every argument is float32 or int32
DEVICES = ("cuda", "vulkan", "cpu")


# -- bodies the CPU bench has no twin of -------------------------------------------

def softplus_logsumexp(xp, x):
    m = xp.max(x)
    return xp.mean(xp.log1p(xp.exp(x))) + m + xp.log(xp.sum(xp.exp(x - m)))


def clip_min_max(xp, x, w):
    y = xp.minimum(xp.clip(x, -1.0, 1.0), w)
    y = xp.maximum(y, 0.5 * x)
    return xp.mean(y * y)


def map_smooth(xp, a):
    """The design's 3-point smoothing in ``sd.map``, then a sum of squares."""
    n = a.shape[0]
    out = xp.zeros_like(a)
    for i in sd.map[1:n - 1]:
        out[i] = (a[i - 1] + 2.0 * a[i] + a[i + 1]) * 0.25
    s = xp.zeros(1, dtype=xp.float32)
    for i in sd.map[0:n]:
        s[0] += out[i] * out[i]
    return s[0]


def map_smooth_functional(xp, a):
    inner = (a[:-2] + 2.0 * a[1:-1] + a[2:]) * 0.25
    return xp.sum(inner * inner)


# -- workloads at GPU sizes ---------------------------------------------------------

def scaled(n: int, scale: float, least: int) -> int:
    """``n / scale``, kept at least ``least`` so every body stays well defined."""
    return max(least, round(n / scale))


@dataclass(frozen=True)
class GpuWorkload:
    """A workload whose shapes are a function of ``--scale``: element counts
    (the n-body's pair count) divided by it.  Row batches lose rows, grids lose
    sqrt(scale) per side, so row lengths and stencils keep their meaning."""

    name: str
    body: Callable
    shapes: Callable[[float], dict[str, tuple]]
    wrt: tuple[str, ...]
    functional: Callable | None = None
    uses_map: bool = False
    init: dict[str, Init] = field(default_factory=dict)

    def at(self, scale: float) -> tuple[Workload, Size]:
        shapes = self.shapes(scale)
        size = Size(label(next(iter(shapes.values()))), shapes)
        return Workload(self.name, self.body, size, size, self.wrt, self.functional, self.uses_map,
                        dict(self.init), TOLERANCE), size


def label(shape: tuple) -> str:
    def count(n: int) -> str:
        for unit, bits in (("M", 20), ("K", 10)):
            if n >= 1 << bits and n % (1 << bits) == 0:
                return f"{n >> bits}{unit}"
        return str(n)
    return "x".join(count(n) for n in shape)


M = 1 << 20


def _vectors(n: int, *names: str, least: int = 16) -> Callable[[float], dict[str, tuple]]:
    return lambda s: {name: (scaled(n, s, least),) for name in names}


def _grid(side: int) -> Callable[[float], int]:
    return lambda s: scaled(side, math.sqrt(s), 8)


WORKLOADS: list[GpuWorkload] = [
    GpuWorkload("elementwise_chain", elementwise_chain, _vectors(64 * M, "x", "w"), ("x", "w")),
    GpuWorkload("softplus_logsumexp", softplus_logsumexp, _vectors(64 * M, "x"), ("x",)),
    GpuWorkload("clip_min_max", clip_min_max, _vectors(64 * M, "x", "w"), ("x", "w")),
    GpuWorkload("softmax_xent", softmax_xent,
                lambda s: {"logits": (scaled(65536, s, 2), 1000), "y": (scaled(65536, s, 2), 1000)},
                ("logits",), init={"y": one_hot}),
    GpuWorkload("layer_norm", layer_norm,
                lambda s: {"x": (scaled(65536, s, 2), 1024), "g": (1024,), "b": (1024,)}, ("x", "g", "b")),
    GpuWorkload("nbody_energy", nbody_energy,
                lambda s: {k: (_grid(8192)(s),) for k in "xyzm"}, tuple("xyzm"), init={"m": positive}),
    GpuWorkload("jacobi_2d_2steps", functools.partial(jacobi_2d, steps=2),
                lambda s: {"u": (_grid(4096)(s),) * 2}, ("u",),
                functional=functools.partial(jacobi_2d_functional, steps=2)),
    GpuWorkload("conv1d_9taps", conv1d, lambda s: {"x": (scaled(16 * M, s, 64),), "k": (9,)}, ("x", "k")),
    GpuWorkload("map_laplace", map_stencil, lambda s: {"a": (_grid(4096)(s),) * 2, "w": (2,)}, ("a", "w"),
                functional=map_stencil_functional, uses_map=True),
    GpuWorkload("map_smooth", map_smooth, _vectors(64 * M, "a"), ("a",),
                functional=map_smooth_functional, uses_map=True),
    GpuWorkload("sum", sum_reduction, _vectors(16 * M, "x"), ("x",)),
]


# -- what is computed per row --------------------------------------------------------

def floor_bytes(shapes: dict[str, tuple], wrt: tuple[str, ...]) -> int:
    """Bytes every input read once and every gradient written once: the least
    traffic any implementation of value_and_grad has."""
    return BYTES_PER_ELEMENT * (sum(math.prod(s) for s in shapes.values()) + sum(math.prod(shapes[w]) for w in wrt))


def floor_ms(shapes: dict[str, tuple], wrt: tuple[str, ...], bandwidth_gbps: float) -> float:
    return floor_bytes(shapes, wrt) / (bandwidth_gbps * 1e9) * 1e3


def verdict(result: Grads, reference: Grads | None, tolerance: float = TOLERANCE) -> tuple[float | None, str]:
    """symdiff's error against the reference and the row's status: ok, WRONG or unchecked."""
    if reference is None:
        return None, "unchecked"
    error = relative_error(result, reference)
    return error, "WRONG" if not error <= tolerance else "ok"   # NaN is wrong too


def peer_devices(device: str) -> tuple[str, str]:
    """(JAX platform, torch device) on the same hardware as symdiff's ``device``."""
    on_gpu = device == "cuda" or (device == "vulkan" and not lowering.backends.of("vulkan").is_software())
    return ("gpu", "cuda") if on_gpu else ("cpu", "cpu")


def read_value(fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn`` whose call ends once its scalar value is on the host (a device sync)."""
    def call() -> Any:
        out = fn()
        float(out[0])
        return out
    return call


@dataclass(frozen=True)
class Settings:
    budget: float = 0.5       # seconds of timed calls per measurement, after one warm-up call
    k_max: int = 30           # most timed calls per measurement
    limit: float = 120.0      # seconds the warm-up (compiling) call may take
    tolerance: float = TOLERANCE  # relative error against the reference above which a row is WRONG
    floats: str = "float32"   # the dtype every side gets the float arguments in ("bfloat16": bench.gpu_products)


def timing_entry(t: Timing) -> dict[str, Any]:
    return {"status": "ok", "ms": t.median * 1e3, "timing": t.as_dict()}


# -- peak device memory --------------------------------------------------------------

def jax_bytes(workload: Workload, inputs: dict[str, np.ndarray], platform: str) -> int | None:
    """Arguments + outputs + temporaries of the compiled value_and_grad (XLA's
    memory analysis): per workload, where ``memory_stats()["peak_bytes_in_use"]``
    is the process's running peak and cannot be reset."""
    import jax
    import jax.numpy as jnp

    body, names = workload.array_body(for_jax=True), list(inputs)
    argnums = tuple(names.index(w) for w in workload.wrt)
    sharding = jax.sharding.SingleDeviceSharding(jax.devices(platform)[0])
    specs = [jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=sharding) for v in inputs.values()]
    m = jax.jit(jax.value_and_grad(lambda *a: body(jnp, *a), argnums=argnums)).lower(*specs).compile() \
        .memory_analysis()
    if m is None:
        return None
    return m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes - m.alias_size_in_bytes


def gradient_executable(program: Any) -> Any:
    """The executable value_and_grad ran (the program's internals, as bench.profile reads them)."""
    return next(e for e in program._executables.values() if e.graph.meta.get("gradients"))


def symdiff_bytes(exe: Any, inputs: dict[str, np.ndarray], out: tuple[float, dict[str, Any]]) -> int:
    """Device bytes symdiff holds for one call: the inputs, the gradient
    executable's buffers (intermediates, partials, gradients; a buffer shared
    by several versions once, ``lowering.buffer_plan``) and the returned
    gradient arrays.  A returned gradient is the buffer its kernel wrote
    (``Executable._hand_over``), held by the instance until its next call:
    each buffer counts once."""
    held = exe._last.held_buffers() if exe._last is not None else {}
    held.update((id(g.buffer), g.buffer.size) for g in out[1].values() if isinstance(g, lowering.DeviceArray))
    return sum(v.nbytes for v in inputs.values()) + sum(held.values())


# -- one row ---------------------------------------------------------------------------

def run_peer(peer: Peer, platform: str, workload: Workload, inputs: dict[str, np.ndarray],
             settings: Settings) -> tuple[dict[str, Any], Grads | None]:
    """One peer's value_and_grad timing, device bytes and gradients; a failure is its cell."""
    try:
        torch_cuda = peer.name == "torch" and platform == "cuda"
        if torch_cuda:
            import torch
            torch.cuda.reset_peak_memory_stats()
        run: Runner = peer.runner(workload, inputs, device=platform)
        t, out = measure(read_value(run.value_and_grad), budget=settings.budget, k_max=settings.k_max,
                         limit=settings.limit)
        entry = timing_entry(t)
        if peer.name == "jax":  # also without the read back: JAX's scalar read alone is ~0.3 ms on an H100
            ready, _ = measure(run.value_and_grad, budget=settings.budget, k_max=settings.k_max, limit=settings.limit)
            entry["ms_ready"] = ready.median * 1e3
        grads = run.to_numpy(out)
        del run, out
        if torch_cuda:
            entry["device_bytes"] = torch.cuda.max_memory_allocated()
        elif peer.name == "jax":
            entry["device_bytes"] = jax_bytes(workload, inputs, platform)
    except Exception as exc:  # a peer missing or failing is reported, never fatal
        return {"status": describe(exc)}, None
    return entry, grads


def run_symdiff(workload: Workload, size: Size, inputs: dict[str, np.ndarray], device: str,
                settings: Settings, reference: Grads | None) -> dict[str, Any]:
    try:
        dtypes = {n: v.dtype.name for n, v in inputs.items()}
        program = sd.differentiable_program(symdiff_runner.program_function(workload, size, dtypes))
        run = symdiff_runner.runner(workload, program, inputs, device)
        t, out = measure(read_value(run.value_and_grad), budget=settings.budget, k_max=settings.k_max,
                         limit=settings.limit)
        entry = timing_entry(t)
        entry["grad_error"], entry["status"] = verdict(run.to_numpy(out), reference, settings.tolerance)
        exe = gradient_executable(program)
        entry["kernels"] = exe.stats()["kernels"]
        entry["device_bytes"] = symdiff_bytes(exe, inputs, out)
    except Exception as exc:  # reported in the table; the run goes on
        return {"status": describe(exc)}
    return entry


def run_row(spec: GpuWorkload, scale: float, device: str, peers: list[Peer], settings: Settings,
            bandwidth: float) -> dict[str, Any]:
    workload, size = spec.at(scale)
    inputs = {n: v.astype(DTYPES[settings.floats], copy=False) if v.dtype == np.float32 else v
              for n, v in workload.inputs(size).items()}  # (float32 rows: the arrays themselves, no copy)
    platform_of = dict(zip(("jax", "torch"), peer_devices(device)))
    row: dict[str, Any] = {"workload": spec.name, "size": size.label, "shapes": size.shapes,
                           "floor_bytes": floor_bytes(size.shapes, workload.wrt),
                           "floor_ms": floor_ms(size.shapes, workload.wrt, bandwidth), "peers": {}}
    reference = None
    for peer in peers:
        row["peers"][peer.name], grads = run_peer(peer, platform_of[peer.name], workload, inputs, settings)
        if grads is not None and reference is not None:  # the peers agree, or their bodies differ
            row["peers"][peer.name]["grad_error"] = relative_error(grads, reference)
        reference = reference or grads
        log(f"  {spec.name} {size.label} {peer.name}: {row['peers'][peer.name]['status']}")
    row["reference"] = next((p.name for p in peers if row["peers"][p.name]["status"] == "ok"), None)
    row["symdiff"] = run_symdiff(workload, size, inputs, device, settings, reference)
    log(f"  {spec.name} {size.label} symdiff/{device}: {row['symdiff']['status']}")
    s = row["symdiff"]
    for name, p in row["peers"].items():
        if s["status"] == "ok" and p["status"] == "ok":
            row[f"x_{name}"] = s["ms"] / p["ms"]
    release(peers)
    return row


def release(peers: list[Peer]) -> None:
    """Give the finished row's device memory back before the next row allocates."""
    gc.collect()
    if any(p.name == "torch" for p in peers):
        import torch
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


# -- output ----------------------------------------------------------------------------

def _cell(entry: dict[str, Any]) -> str:
    return f"{entry['ms']:.3g}" if entry.get("status") == "ok" else entry.get("status", "-")


def _mb(entry: dict[str, Any]) -> str:
    n = entry.get("device_bytes")
    if n is None:
        return "-"
    mib = n / 2**20
    return f"{mib:.0f}" if mib >= 10 else f"{mib:.2g}"


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def geomean(xs: list[float]) -> float | None:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def render(results: dict[str, Any]) -> str:
    header = ["workload", "size", "symdiff ms", "JAX ms", "JAX ready ms", "torch ms", "x JAX", "x torch",
              "floor ms", "kernels", "symdiff MiB", "JAX MiB", "torch MiB", "mem x (in+grad)", "mem x JAX",
              "err vs JAX"]
    lines = []
    for row in results["rows"]:
        s, jax_, torch_ = row["symdiff"], row["peers"].get("jax", {}), row["peers"].get("torch", {})
        symdiff_cell = _cell(s)
        if s.get("status") == "WRONG":
            symdiff_cell = f"WRONG (err {s['grad_error']:.2g})"
        lines.append([row["workload"], row["size"], symdiff_cell, _cell(jax_) if jax_ else "-",
                      _num(jax_.get("ms_ready"), ".3g"),
                      _cell(torch_) if torch_ else "-", _num(row.get("x_jax"), ".2f"),
                      _num(row.get("x_torch"), ".2f"), f"{row['floor_ms']:.3g}", str(s.get("kernels", "-")),
                      _mb(s), _mb(jax_), _mb(torch_), _num(_ratio(s.get("device_bytes"), row.get("floor_bytes")), ".2f"),
                      _num(_ratio(s.get("device_bytes"), jax_.get("device_bytes")), ".2f"),
                      _num(s.get("grad_error"), ".1e")])
    r = results
    intro = (f"`{r['command']}` on {r['date']}, {r['elapsed_s']:.0f} s. symdiff on `{r['device']}`; "
             f"peers: {', '.join(r['peers'])}. Median of up to {r['settings']['k_max']} calls in "
             f"{r['settings']['budget']} s after a warm-up; each call ends with the scalar on the host "
             f"(JAX ready: block_until_ready only, no read). "
             f"floor: inputs read once + gradients written once at {r['bandwidth_gbps']:g} GB/s. "
             f"MiB: device memory (symdiff: inputs + executable buffers + returned gradients; JAX: XLA's "
             f"memory analysis; torch on cuda: max_memory_allocated); mem x (in+grad): symdiff's MiB over the bytes of "
             f"the inputs and gradients (the floor's bytes); mem x JAX: over JAX's. err: max relative L2 error of value and "
             f"gradients against {TOLERANCE:g} tolerance.")
    gm = r["geomean_x_jax"]
    footer = f"geometric mean of x JAX over {r['geomean_rows']} rows: {_num(gm, '.2f')}"
    return "\n\n".join([intro, report._table(header, lines), footer])


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def peer_names(platform_of: dict[str, str]) -> list[str]:
    out = []
    for peer, platform in platform_of.items():
        try:
            if peer == "jax":
                import jax
                out.append(f"jax {jax.__version__} on {jax.devices(platform)[0].device_kind}")
            else:
                import torch
                where = torch.cuda.get_device_name() if platform == "cuda" else "cpu"
                out.append(f"torch {torch.__version__} on {where}")
        except Exception as exc:  # named in the header; its cells say what failed
            out.append(f"{peer} on {platform}: {describe(exc)}")
    return out


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.gpu", description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=DEVICES,
                   help="symdiff's device; default: the first present of cuda, vulkan, cpu")
    p.add_argument("--workload", action="append", choices=[w.name for w in WORKLOADS],
                   help="workload(s) to run (repeatable); default: all")
    p.add_argument("--scale", type=float, default=1.0,
                   help="divide every workload's element count by this (e.g. 1024 on a CPU)")
    p.add_argument("--bandwidth", type=float, default=3000.0,
                   help="device memory bandwidth in GB/s for the floor column (default 3000, an H100)")
    p.add_argument("--budget", type=float, default=Settings.budget,
                   help="seconds of timed calls per measurement after the warm-up")
    p.add_argument("--json", type=Path, help="also write every number to this JSON file")
    p.add_argument("--gpu-form", action="store_true",
                   help="on lavapipe, run the kernels a hardware GPU gets (workgroup reductions, recomputed "
                        "transcendentals: lowering.targets): their kernel counts and memory, not GPU times")
    return p.parse_args(argv)


def use_gpu_form() -> None:
    """Plan and generate for lavapipe as for a hardware GPU (its own target
    keeps a thread per reduction and stores transcendental values, for
    lavapipe's speed): what the tests and the fuzzer's ``vulkan+gpu-form`` run;
    with CUDA's tensor cores too, so a TF32 row runs ``tensor_tiles``' kernels
    (their instruction's plain-Slang stand-in: right values, no GPU times)."""
    from dataclasses import replace
    cuda_cores = lowering.backends.cuda.TARGET.tensor_cores
    lowering.backends.change_targets(lambda target: replace(target, workgroup_reductions=True,
                                                            recompute_transcendentals=True, tensor_cores=cuda_cores))


def main(argv: list[str]) -> dict[str, Any]:
    args = parse_args(argv)
    started = time.perf_counter()
    device = args.device or next(d for d in lowering.available_devices() if d in DEVICES)
    if args.gpu_form:
        use_gpu_form()
    settings = Settings(budget=args.budget)
    peers = [p for p in (JaxPeer(), TorchPeer()) if p.available()]
    platform_of = dict(zip(("jax", "torch"), peer_devices(device)))
    specs = [w for w in WORKLOADS if not args.workload or w.name in args.workload]
    log(f"bench.gpu: symdiff on {device}, peers {platform_of}, scale {args.scale:g}")
    rows = [run_row(spec, args.scale, device, peers, settings, args.bandwidth) for spec in specs]
    ratios = [r["x_jax"] for r in rows if "x_jax" in r]
    results = {
        "command": " ".join(["python -m bench.gpu", shlex.join(argv)]).strip(),
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "elapsed_s": time.perf_counter() - started,
        "device": device + (" (GPU form)" if args.gpu_form else ""),
        "peers": peer_names({p.name: platform_of[p.name] for p in peers}) or ["none installed"],
        "scale": args.scale,
        "bandwidth_gbps": args.bandwidth,
        "settings": {"budget": settings.budget, "k_max": settings.k_max, "limit": settings.limit},
        "tolerance": TOLERANCE,
        "machine": report.machine_info(),
        "rows": rows,
        "geomean_x_jax": geomean(ratios),
        "geomean_rows": len(ratios),
    }
    return report.publish(results, render(results), args.json)


if __name__ == "__main__":
    main(sys.argv[1:])
