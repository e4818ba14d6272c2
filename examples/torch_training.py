"""Train the quickstart MLP with torch.optim, its loss and gradients computed by symdiff.

`sd.to_torch(mlp_loss)` is a torch function: torch holds the parameters and
runs the optimiser, and `loss.backward()` runs the program's generated
backward pass (fused Slang kernels on the CPU device by default).  Before
training, the gradients are checked against torch's own autograd of the same
model written in torch (float64).

Run:  python examples/torch_training.py [--steps 200]   (SYMDIFF_DEVICE=cpu|vulkan|numpy to choose)
"""
import argparse

import numpy as np
import torch

import symdiff as sd
from quickstart import CLASSES, IN, data, mlp_loss

PARAMETERS = ["w1", "b1", "w2"]


def batch(size: int, rng: np.random.Generator, teacher: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and one-hot labels of a fixed linear teacher: something to learn."""
    x = rng.standard_normal((size, IN)).astype(np.float32)
    y = np.eye(CLASSES, dtype=np.float32)[np.argmax(x @ teacher, axis=1)]
    return torch.from_numpy(x), torch.from_numpy(y)


class MLP(torch.nn.Module):
    """The quickstart's two-layer MLP; its loss is the symdiff program."""

    def __init__(self, seed: int = 0):
        super().__init__()
        init = data(1, np.random.default_rng(seed))
        for name in PARAMETERS:
            self.register_parameter(name, torch.nn.Parameter(torch.from_numpy(init[name])))
        self.loss = sd.to_torch(mlp_loss, wrt=PARAMETERS)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.loss(x, self.w1, self.b1, self.w2, y)


def torch_loss(x, w1, b1, w2, y):
    """The same loss in torch, for checking symdiff's gradients."""
    log_p = torch.log_softmax(torch.tanh(x @ w1 + b1) @ w2, dim=1)
    return -(y * log_p).sum(dim=1).mean()


def check_gradients(model: MLP, x: torch.Tensor, y: torch.Tensor) -> float:
    """Largest relative difference between symdiff's gradients and torch's (float64)."""
    model.zero_grad()
    model(x, y).backward()
    params = [getattr(model, n).detach().double().requires_grad_() for n in PARAMETERS]
    ref = torch.autograd.grad(torch_loss(x.double(), *params, y.double()), params)
    return max(float((getattr(model, n).grad - r).abs().max() / r.abs().max()) for n, r in zip(PARAMETERS, ref))


def train(steps: int, batch_size: int = 256, seed: int = 0) -> list[float]:
    rng = np.random.default_rng(seed)
    teacher = rng.standard_normal((IN, CLASSES)).astype(np.float32)
    model = MLP(seed)
    print(f"gradients vs torch autograd (float64): max relative difference "
          f"{check_gradients(model, *batch(batch_size, rng, teacher)):.1e}")
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for step in range(steps):
        x, y = batch(batch_size, rng, teacher)
        optimiser.zero_grad()
        loss = model(x, y)
        loss.backward()
        optimiser.step()
        losses.append(float(loss.detach()))
        if step % max(steps // 5, 1) == 0 or step == steps - 1:
            print(f"step {step:4d}  loss {losses[-1]:.4f}")
    return losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    losses = train(parser.parse_args().steps)
    print(f"loss {losses[0]:.4f} -> {losses[-1]:.4f}")


if __name__ == "__main__":
    main()
