"""Training with torch.optim through sd.compile_module, in step with plain
torch: a small MLP and a LeNet-like CNN (batch norm, dropout, pooling), SGD
with momentum, float32.  (The examples' LeNet-5 and transformer encoder train
100 steps in step: tests/examples/test_compile_module_examples.py.)

Both copies start from the same weights and see the same batches and dropout
masks; the compiled one's forward and backward are symdiff's.  float32
rounding differs (sums in another order), by ~1e-7 relative per step; over
the steps here the losses and weights stay within 1e-4 of torch's."""
from __future__ import annotations

import copy

import numpy as np
import pytest

import symdiff as sd

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(10, 32), nn.GELU(), nn.Dropout(0.1), nn.Linear(32, 16), nn.LayerNorm(16),
                                 nn.SiLU(), nn.Linear(16, 4))

    def forward(self, x, target):
        return F.cross_entropy(self.net(x), target)


class LeNet(nn.Module):
    """LeNet-5's shape at MNIST-like 12x12 inputs, with fewer channels."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(4, 6, 3), nn.Tanh(), nn.AvgPool2d(2))
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(24, 16), nn.ReLU(), nn.Dropout(0.2),
                                        nn.Linear(16, 10))

    def forward(self, x, target):
        return F.cross_entropy(self.classifier(self.features(x)), target)


def _train_in_step(model, batches, steps, device, lr=0.05):
    twin = copy.deepcopy(model)
    compiled = sd.compile_module(model, *batches[0], device=device)
    wide = [c.name for c in compiled.program.graph.containers.values() if c.dtype == "float64"]
    assert not wide, f"float64 values in a float32 model: {wide}"
    ours = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    theirs = torch.optim.SGD(twin.parameters(), lr=lr, momentum=0.9)
    losses = []
    for step in range(steps):
        x, target = batches[step % len(batches)]
        for net, opt in ((compiled, ours), (twin, theirs)):
            torch.manual_seed(step)  # the same dropout masks
            opt.zero_grad()
            loss = net(x, target)
            assert loss.dtype == torch.float32  # no float64 creeping into a float32 model
            loss.backward()
            opt.step()
            losses.append(loss.item())
    losses = np.array(losses).reshape(steps, 2)
    np.testing.assert_allclose(losses[:, 0], losses[:, 1], rtol=1e-4, atol=1e-5)
    for (name, p), q in zip(model.state_dict().items(), twin.state_dict().values()):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-4, atol=1e-4, err_msg=name)
    assert losses[-1, 0] < losses[0, 0]  # it learns
    return compiled


def _batches(shape, classes, count=4, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(*shape, generator=gen), torch.randint(0, classes, (shape[0],), generator=gen))
            for _ in range(count)]


def test_mlp_trains_in_step_with_torch():
    torch.manual_seed(0)
    _train_in_step(MLP(), _batches((16, 10), 4), 60, "numpy")


def test_lenet_trains_in_step_with_torch():
    torch.manual_seed(1)
    compiled = _train_in_step(LeNet(), _batches((8, 1, 12, 12), 10), 30, "numpy")
    compiled.eval()  # evaluation: running statistics, no dropout
    x, target = _batches((8, 1, 12, 12), 10, count=1, seed=9)[0]
    np.testing.assert_allclose(compiled(x, target).item(), compiled.module(x, target).item(), rtol=1e-5)


def test_mlp_trains_on_a_slang_device(slang_device):
    """One sample per Slang device present (cpu, lavapipe in CI): the kernels, not the interpreter."""
    torch.manual_seed(2)
    _train_in_step(MLP(), _batches((16, 10), 4, count=2), 10, slang_device)
