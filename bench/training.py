"""A training step of a PyTorch model: sd.compile_module against torch eager and torch.compile.

    python -m bench.training [--device cpu] [--models lenet transformer] [--warmup 20] [--budget 2] [--threads N]

One step is what a training loop does per batch: ``zero_grad``, the forward
pass (the loss), ``backward``, an SGD step with momentum.  Three copies of
one model start from the same weights: plain torch (eager autograd),
``torch.compile(model)`` (inductor: C++ kernels through g++ on the CPU) and
``sd.compile_module(model)`` on the symdiff device; each steps its own
parameters with its own optimiser on the same batch.  The models are the
examples' (examples/torch_lenet.py, examples/torch_transformer.py at their
default sizes).  Times: ``min / median`` ms of steps (bench.timing) after
``--warmup`` seconds of steps, ``first`` the first step's seconds (symdiff's
includes tracing the backward and compiling its kernels; compile_module
itself traced and compiled the forward before, timed as ``compile``).  The
warm-up matters on symdiff's CPU device: a module of many kernels over few
points compiles at g++ -O0 first and again at -O3 once its calls have cost
twice that compile (``lowering.runtime``'s hot recompile); a training run of
any length pays it once.  Before the timing, the first step's
parameter gradients of each copy are compared with eager torch's (max
relative L2 error over parameters); a copy above 1e-3 shows WRONG, not times.
torch runs on the CPU with its default threads (both cores here) unless
``--threads`` says otherwise: on a loaded machine its threads wait for each
other at every operator (a transformer step took 1.5 s at load 12, 2 threads),
so compare with ``--threads 1`` there.  The load average is printed at the
start and the end.  ``python -m bench`` (a full run, not ``--quick``) runs
these rows too, on the cpu device and on CUDA where present, and writes them
into docs/benchmarks.md with the rest.
"""
from __future__ import annotations

import argparse
import copy
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch

import symdiff as sd
from bench.report import training_table
from bench.timing import describe, measure, timed

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import torch_lenet  # noqa: E402
import torch_transformer  # noqa: E402

TOLERANCE = 1e-3  # float32 gradients after one step: ~1e-6 apart when right


def models() -> dict[str, Callable[[], tuple[torch.nn.Module, tuple]]]:
    """name -> (model, one batch) at the examples' default sizes."""
    def lenet():
        return torch_lenet.LeNet5(), torch_lenet.batches(1, 16)[0]

    def transformer():
        return torch_transformer.Classifier(32, 4, 2, 12), torch_transformer.batches(1, 16, 12)[0]

    return {"lenet": lenet, "transformer": transformer}


def stepper(net: Any, params: list[torch.nn.Parameter], batch: tuple) -> Callable[[], list[torch.Tensor]]:
    """One training step of ``net`` on ``batch``; returns the gradients it used."""
    opt = torch.optim.SGD(params, lr=1e-3, momentum=0.9)

    def step() -> list[torch.Tensor]:
        opt.zero_grad()
        net(*batch).backward()
        grads = [p.grad.clone() for p in params]
        opt.step()
        return grads
    return step


def error(grads: list[torch.Tensor], reference: list[torch.Tensor]) -> float:
    return max((torch.linalg.norm(g.double() - r.double()) / max(torch.linalg.norm(r.double()), 1e-30)).item()
               for g, r in zip(grads, reference))


def warm(step: Callable[[], Any], seconds: float) -> int:
    """Steps run for ``seconds``: how many."""
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        step()
        count += 1
    return count


def rows(name: str, device: str, warmup: float, budget: float) -> list[dict[str, Any]]:
    """One entry per runner: ``first_s`` (its first step), ``compile_s``
    (symdiff's compile_module call), ``step`` (``Timing.as_dict`` of the warm
    steps), ``warm_steps``, ``grad_error`` against eager torch's first step,
    and ``status`` ("ok", "WRONG" or what failed); ``report.training_table``
    prints them."""
    torch.manual_seed(0)
    model, batch = models()[name]()
    eager, inductor, ours = model, copy.deepcopy(model), copy.deepcopy(model)
    compile_seconds, compiled = timed(lambda: sd.compile_module(ours, *batch, device=device))
    runners = {"torch eager": stepper(eager, list(eager.parameters()), batch),
               "torch.compile": stepper(torch.compile(inductor), list(inductor.parameters()), batch),
               f"symdiff {device}": stepper(compiled, list(ours.parameters()), batch)}
    out, reference = [], None
    for runner, step in runners.items():
        entry: dict[str, Any] = {"model": name, "runner": runner}
        if runner.startswith("symdiff"):
            entry["compile_s"] = compile_seconds
        out.append(entry)
        try:
            entry["first_s"], grads = timed(step)
            reference = grads if reference is None else reference
            entry["grad_error"] = error(grads, reference)
            if not entry["grad_error"] <= TOLERANCE:
                entry["status"] = "WRONG"
                continue
            entry["warm_steps"] = warm(step, warmup)
            entry["step"] = measure(step, budget=budget, k_max=50, limit=600.0)[0].as_dict()
            entry["status"] = "ok"
        except Exception as exc:  # a runner that fails is a row saying so
            entry["status"] = describe(exc)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="symdiff's device (cpu, vulkan, numpy)")
    parser.add_argument("--models", nargs="+", default=list(models()), choices=list(models()))
    parser.add_argument("--warmup", type=float, default=20.0, help="seconds of steps per runner before timing")
    parser.add_argument("--budget", type=float, default=2.0, help="seconds of timed steps per runner")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    opts = parser.parse_args()
    if opts.threads:
        torch.set_num_threads(opts.threads)
    print(f"load average at start {os.getloadavg()[0]:.2f}; torch threads {torch.get_num_threads()}")
    print(training_table([e for name in opts.models for e in rows(name, opts.device, opts.warmup, opts.budget)]))
    print(f"load average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
