"""What a call through ``sd.to_torch`` / ``sd.to_jax`` costs over calling the program directly.

    python -m bench.interop [--device cpu] [--batches 64 1024]

Rows, per program and size (min over repeated warm calls, same inputs):

* ``forward``: ``program(*arrays)`` against ``to_torch(program)(*tensors)``
  under ``torch.no_grad()`` (one program run each).
* ``value+grad``: ``program.value_and_grad`` (one fused forward + backward
  run) against torch's ``loss = f(...); loss.backward()`` and JAX's
  ``jit(value_and_grad(to_jax(program)))``.  The frameworks run the forward
  program, then the VJP program, which computes the forward values it needs
  again: two runs where ``value_and_grad`` makes one; that is the price of
  being an op inside someone else's autograd, and the row shows it.

``tiny`` is a 16-element program whose kernels cost next to nothing: its
difference is the bridge's own per-call overhead.  The MLP is the quickstart's.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np

import symdiff as sd
from bench.timing import measure

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import quickstart  # noqa: E402


@sd.differentiable_program
def tiny(x: sd.f32[16], w: sd.f32[16]):
    return np.sum(np.tanh(x * w))


def cases(batches: list[int]) -> list[tuple[str, sd.DifferentiableProgram, dict[str, np.ndarray], list[str]]]:
    rng = np.random.default_rng(0)
    out = [("tiny (16)", tiny, {"x": rng.standard_normal(16).astype(np.float32),
                                "w": rng.standard_normal(16).astype(np.float32)}, ["x", "w"])]
    for b in batches:
        out.append((f"mlp (batch {b})", quickstart.mlp_loss, quickstart.data(b, rng), quickstart.WRT))
    return out


def best(fn: Callable[[], Any]) -> float:
    return measure(fn, budget=1.0, k_max=50, limit=120.0)[0].min


def rows(name: str, program: sd.DifferentiableProgram, args: dict[str, np.ndarray], wrt: list[str],
         device: str) -> list[tuple[str, str, float, float, float | None]]:
    import jax
    import torch

    values = list(args.values())
    tensors = {n: torch.from_numpy(v) for n, v in args.items()}
    to_torch = sd.to_torch(program, wrt=wrt, device=device)
    to_jax = sd.to_jax(program, wrt=wrt, device=device)

    def torch_forward():
        with torch.no_grad():
            return to_torch(**tensors)

    def torch_value_and_grad():
        leaves = {n: t.requires_grad_() if n in wrt else t for n, t in
                  ((n, t.detach()) for n, t in tensors.items())}
        loss = to_torch(**leaves)
        loss.backward()
        return loss, [leaves[n].grad for n in wrt]

    argnums = tuple(program.arg_names.index(n) for n in wrt)
    jax_vg = jax.jit(jax.value_and_grad(to_jax, argnums=argnums))

    direct_forward = best(lambda: program(*values, device=device))
    direct_vg = best(lambda: program.value_and_grad(*values, wrt=wrt, device=device))
    return [(name, "forward", direct_forward, best(torch_forward), None),
            (name, "value+grad", direct_vg, best(torch_value_and_grad),
             best(lambda: jax.block_until_ready(jax_vg(*values))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batches", type=int, nargs="+", default=[64, 1024])
    opts = parser.parse_args()
    print(f"device {opts.device}; min of warm calls, ms; overhead = bridge - direct")
    print(f"{'program':<18} {'call':<11} {'direct':>8} {'to_torch':>9} {'overhead':>9} {'to_jax':>8} {'overhead':>9}")
    for name, program, args, wrt in cases(opts.batches):
        for prog, call, direct, via_torch, via_jax in rows(name, program, args, wrt, opts.device):
            jax_cells = f"{via_jax * 1e3:8.3f} {(via_jax - direct) * 1e3:+9.3f}" if via_jax is not None else ""
            print(f"{prog:<18} {call:<11} {direct * 1e3:8.3f} {via_torch * 1e3:9.3f} "
                  f"{(via_torch - direct) * 1e3:+9.3f} {jax_cells}")


if __name__ == "__main__":
    main()
