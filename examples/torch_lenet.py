"""Train a LeNet-5 with torch.optim through sd.compile_module, in step with plain torch.

The model is ordinary PyTorch; `sd.compile_module` traces it with torch.fx and
runs its forward and backward as symdiff's generated kernels, holding the
model's own parameters.  A deep copy trains in plain torch on the same random
MNIST-shaped batches (28x28, 10 classes), and a float64 copy in plain torch
serves as the reference (examples/in_step.py): the script prints the losses and
how far each float32 run's weights drifted from the float64 one.  Per step,
symdiff's gradients agree with torch's to ~1e-6 relative.  Over 100 steps the
float32 runs can part at a near tie of max pooling or ReLU: two values of a
pooling window (or a ReLU input and zero) within float32 rounding of each
other, where float32 and float64 (or two float32 summation orders) decide
differently and route that step's gradient elsewhere (the convolution weight
gradient moves by ~1e-3).  After such a step the float32 runs differ by a few
1e-2 from each other and from float64, whichever side symdiff or torch fell
on; without one (most runs of the first 30-50 steps) they agree to 1e-6.
With --float64 both run in float64, where no window comes near a tie within
rounding (the smallest gap in 100 steps is ~1e-8 relative, rounding ~1e-16),
and the runs agree to ~1e-14 over all the steps (tests/examples checks this
for 100 steps).

Run:  python examples/torch_lenet.py [--steps 100] [--device cpu|vulkan|numpy] [--batch 16] [--float64]
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

from in_step import sgd, train_in_step


class LeNet5(nn.Module):
    """LeCun et al.'s LeNet-5 with ReLU and max pooling, as in most modern renditions."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(16 * 5 * 5, 120), nn.ReLU(), nn.Linear(120, 84),
                                        nn.ReLU(), nn.Linear(84, 10))

    def forward(self, x, target):
        return F.cross_entropy(self.classifier(self.features(x)), target)


def batches(count: int, size: int, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Random images whose class is a fixed function of them (something to learn)."""
    gen = torch.Generator().manual_seed(seed)
    teacher = torch.randn(28 * 28, 10, generator=gen)
    out = []
    for _ in range(count):
        x = torch.randn(size, 1, 28, 28, generator=gen)
        out.append((x, (x.reshape(size, -1) @ teacher).argmax(1)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--device", default=None, help="symdiff device (default: SYMDIFF_DEVICE, else auto)")
    parser.add_argument("--float64", action="store_true", help="train both copies in float64")
    args = parser.parse_args()

    torch.manual_seed(0)
    train_in_step(LeNet5(), batches(8, args.batch), args.steps, sgd, args.device,
                  torch.float64 if args.float64 else torch.float32)


if __name__ == "__main__":
    main()
