"""``python -m bench.slang_dump OUTDIR``: the generated Slang of every bench
workload, small and large, for the CPU device, lavapipe, CUDA and the GPU
form (lavapipe's target with workgroup reductions and recomputed
transcendentals, what a hardware GPU plans), one file each, plus
``_timing.txt`` (plan + generate seconds; best of three on the CPU device).

A refactor of ``lowering/`` that should change no kernel is checked by
dumping before and after and comparing: ``diff -r BEFORE AFTER`` (ignoring
``_timing.txt``) must be empty.  Planning needs no device.  Run both dumps
with the same ``PYTHONHASHSEED`` and ``SYMDIFF_DISK_CACHE=0`` (so each plan
is made, not loaded)."""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import symdiff as sd
from symdiff.lowering import backends
from symdiff.lowering.codegen import generate
from symdiff.lowering.plan import plan

from .symdiff_runner import program_function
from .workloads import WORKLOADS

TARGETS = {"cpu": backends.cpu.TARGET, "lavapipe": backends.vulkan.LAVAPIPE, "cuda": backends.cuda.TARGET,
           "gpuform": replace(backends.vulkan.LAVAPIPE, workgroup_reductions=True, recompute_transcendentals=True)}


def dump(out: Path) -> list[str]:
    """Write every workload's module for every target under ``out``; returns the timing lines."""
    out.mkdir(parents=True, exist_ok=True)
    timing = []
    for w in WORKLOADS:
        for which in ("small", "large"):
            program = sd.differentiable_program(program_function(w, w.size(which)), **w.options)
            graph = program.backward_graph(wrt=list(w.wrt))
            for name, target in TARGETS.items():
                best = float("inf")
                for _ in range(3 if name == "cpu" else 1):
                    start = time.perf_counter()
                    module = generate(plan(graph, {}, target), target)
                    best = min(best, time.perf_counter() - start)
                (out / f"{w.name}.{which}.{name}.slang").write_text(module.source)
                timing.append(f"{w.name:28s} {which:5s} {name:8s} {best * 1000:8.1f} ms")
    (out / "_timing.txt").write_text("\n".join(timing) + "\n")
    return timing


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.slang_dump", description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="folder to write the modules into")
    print("\n".join(dump(parser.parse_args(argv).out)))


if __name__ == "__main__":
    main(sys.argv[1:])
