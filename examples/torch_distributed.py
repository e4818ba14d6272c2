"""Data-parallel training of the quickstart MLP over two processes (torch.distributed, gloo, CPU).

Scaling out is torch's job: `DistributedDataParallel` wraps the module of
examples/torch_training.py, whose loss is `sd.to_torch(mlp_loss)`; each
process computes symdiff's gradients on its half of the batch and DDP
averages them across processes.  The script checks that the gradients and the
parameters after a few SGD steps match one process over the whole batch, and
exits non-zero if they do not.

Run:  python examples/torch_distributed.py [--steps 3]   (SYMDIFF_DEVICE=cpu|vulkan|numpy to choose)
"""
import argparse
import os
import sys
import tempfile

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from quickstart import CLASSES, IN
from torch_training import MLP, PARAMETERS, batch

WORLD = 2
BATCH = 64  # split evenly: the mean over the batch is the mean of the ranks' means


def run(model: torch.nn.Module, steps: int, shard: slice) -> tuple[dict, dict]:
    """First-step gradients and the parameters after ``steps`` SGD steps on ``shard`` of each batch."""
    rng = np.random.default_rng(1)
    teacher = rng.standard_normal((IN, CLASSES)).astype(np.float32)
    optimiser = torch.optim.SGD(model.parameters(), lr=0.1)
    params = dict(model.named_parameters())
    first = None
    for _ in range(steps):
        x, y = batch(BATCH, rng, teacher)
        optimiser.zero_grad()
        model(x[shard], y[shard]).backward()
        if first is None:
            first = {n.removeprefix("module."): p.grad.numpy().copy() for n, p in params.items()}
        optimiser.step()
    return first, {n.removeprefix("module."): p.detach().numpy().copy() for n, p in params.items()}


def worker(rank: int, steps: int, folder: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{folder}/rendezvous", rank=rank, world_size=WORLD)
    model = torch.nn.parallel.DistributedDataParallel(MLP(seed=0))
    part = BATCH // WORLD
    grads, params = run(model, steps, slice(rank * part, (rank + 1) * part))
    if rank == 0:
        np.savez(os.path.join(folder, "ddp.npz"), **{f"grad_{n}": g for n, g in grads.items()},
                 **{f"param_{n}": p for n, p in params.items()})
    dist.barrier()  # both ranks done communicating before either tears gloo down (an abort otherwise, now and then)
    dist.destroy_process_group()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    steps = parser.parse_args().steps
    with tempfile.TemporaryDirectory() as folder:
        mp.spawn(worker, args=(steps, folder), nprocs=WORLD)
        ddp = dict(np.load(os.path.join(folder, "ddp.npz")))
    grads, params = run(MLP(seed=0), steps, slice(None))
    worst = 0.0
    for n in PARAMETERS:
        for key, ref in ((f"grad_{n}", grads[n]), (f"param_{n}", params[n])):
            worst = max(worst, float(np.abs(ddp[key] - ref).max() / np.abs(ref).max()))
    print(f"{WORLD} processes vs 1 over {steps} SGD steps: first gradients and final parameters agree to "
          f"{worst:.1e} (relative to each array's largest element)")
    return 0 if worst < 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
