"""``python -m bench.host_memory``: how much a ``value_and_grad`` call raises the
process's peak memory, over its input's bytes, per call.

The issue's example, ``mean(tanh(x) * x)`` over ``--n`` float32 elements
(default 200M, 0.75 GiB), with numpy inputs and results.  Each device runs in a
fresh process; before each call the kernel's peak-RSS counter is reset
(``/proc/self/clear_refs``), so ``peak`` is the call's own high-water mark over
the resident memory just before it (the input, the device, and what earlier
calls kept), ``after`` what the call left behind (its result, and on the
first call the executable's buffers and compiled code), and ``planned`` the
executables' buffers for intermediates and results (``stats()["peak_bytes"]``;
0 on the numpy device, which plans none; argument uploads come on top, and a
result written over an upload, as the gradient is on the CPU device,
``lowering.buffer_plan.into_uploads``, counts with it).  On slangpy's CPU
device and on lavapipe device memory is host memory, so this counts it too.
``held once dropped`` (the last call's row): what stays over the resident memory
before the first call once the program, its results and ``sd.clear_caches()``
are gone, also in MiB: compiled code and the lowering's state stay, a
constant (33 MiB for 1e3 elements and for 50M on the CPU device), not data.  ``--memory-budget F`` runs the program under ``memory_budget`` of F times x's
bytes (store vs recompute, ``symdiff.memory_budget``).  Linux only.
"""
from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import time


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def child(device: str, n: int, calls: int, budget: float | None = None) -> list[dict]:
    """Run ``calls`` value_and_grad calls in this process; one dict per call.
    ``budget``: a memory budget of that many times x's bytes."""
    import numpy as np

    import symdiff as sd
    if device != "numpy":
        sd.lowering.backends.of(device).device()  # created before the first measurement

    @sd.differentiable_program(memory_budget=None if budget is None else int(budget * 4 * n))
    def loss(x):
        return np.mean(np.tanh(x) * x)

    x = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
    out, rows = None, []
    resident = _status("VmRSS")
    for k in range(calls):
        out = None  # the caller drops the previous result first
        base = _status("VmRSS")
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset VmHWM to the current RSS
        start = time.perf_counter()
        out = loss.value_and_grad(x, device=device)
        seconds = time.perf_counter() - start
        planned = sum(s["peak_bytes"] for s in loss.stats().values())  # the executables' buffers (lowering.buffer_plan)
        rows.append({"call": k, "peak": (_status("VmHWM") - base) / x.nbytes,
                     "after": (_status("VmRSS") - base) / x.nbytes, "planned": planned / x.nbytes,
                     "seconds": seconds})
    out = loss = None  # the program, its results and the caches dropped: what stays is held by nobody's data
    sd.clear_caches()
    gc.collect()
    rows[-1]["dropped"] = (_status("VmRSS") - resident) / x.nbytes
    rows[-1]["dropped_mib"] = (_status("VmRSS") - resident) / 2**20
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--devices", nargs="+", default=["cpu", "vulkan", "numpy"])
    p.add_argument("--n", type=float, default=200e6, help="elements of x (default 200M)")
    p.add_argument("--calls", type=int, default=3)
    p.add_argument("--memory-budget", type=float, help="memory_budget in units of x's bytes (Slang devices)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args.child, int(args.n), args.calls, args.memory_budget)))
        return
    n = int(args.n)
    budget = [] if args.memory_budget is None else ["--memory-budget", str(args.memory_budget)]
    print(f"value_and_grad of mean(tanh(x) * x), x {n:,} float32 ({4 * n / 2**30:.2f} GiB)"
          + (f", memory_budget {args.memory_budget}x its bytes" if budget else "")
          + ": process peak over the resident memory before the call, in units of x's bytes\n")
    print("| device | call | peak | after | planned | s | held once dropped |\n|---|---|---|---|---|---|---|")
    for device in args.devices:
        proc = subprocess.run([sys.executable, "-m", "bench.host_memory", "--child", device, "--n", str(n),
                               "--calls", str(args.calls), *budget], capture_output=True, text=True)
        if proc.returncode:
            tail = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"
            print(f"| {device} | - | {tail} | | | |")
            continue
        for row in json.loads(proc.stdout.strip().splitlines()[-1]):
            print(f"| {device} | {row['call'] + 1} | +{row['peak']:.2f}x | +{row['after']:.2f}x | "
                  f"{row['planned']:.2f}x | {row['seconds']:.2f} | "
                  + (f"+{row['dropped']:.2f}x ({row['dropped_mib']:.0f} MiB) |" if "dropped" in row else "|"))


if __name__ == "__main__":
    main()
