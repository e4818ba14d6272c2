"""sd.compile_module against torch's own forward and autograd of the same
module: float64 on the numpy interpreter, one operator (or layer) per case.

Tolerance: each case computes a few hundred float64 operations per value;
its rounding differs from torch's kernels by reassociation (sums, matmul
blocking) only, a few ulp per operation, so values and gradients agree to
~1e-13 relative; we allow 1e-10 (absolute 1e-12 for values near zero).  The
exact GELU's erf is a 24-point quadrature accurate to 3e-15.
"""
from __future__ import annotations

import numpy as np
import pytest

import symdiff as sd

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

RTOL, ATOL = 1e-10, 1e-12


class Fn(nn.Module):
    """A module computing ``fn(x, *params)``, for functional operators."""

    def __init__(self, fn, *shapes):
        super().__init__()
        self.fn = fn
        self.ps = nn.ParameterList([nn.Parameter(torch.randn(*s, dtype=torch.float64)) for s in shapes])

    def forward(self, x):
        return self.fn(x, *self.ps)


def _x(*shape):
    return torch.randn(*shape, dtype=torch.float64, requires_grad=True)


def _cases():
    """name -> (module factory, inputs factory)."""
    elementwise = {
        "relu": F.relu, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu,
        "tanh": torch.tanh, "sigmoid": torch.sigmoid, "softplus": F.softplus,
        "softplus_beta": lambda x: F.softplus(x * 10, beta=2, threshold=5), "leaky_relu": F.leaky_relu,
        "elu": F.elu, "exp_log": lambda x: torch.log(torch.exp(x) + 1), "rsqrt": lambda x: torch.rsqrt(x * x + 1),
        "clamp": lambda x: torch.clamp(x, -0.5, 0.7), "hardtanh": F.hardtanh,
        "softmax": lambda x: F.softmax(x, dim=-1), "log_softmax": lambda x: F.log_softmax(x, dim=1),
        "method_softmax": lambda x: x.softmax(0),
    }
    cases = {name: (lambda f=f: Fn(lambda x, w: f(x * w), (3, 5)), lambda: (_x(3, 5),))
             for name, f in elementwise.items()}
    cases.update({
        "linear": (lambda: nn.Linear(5, 4, dtype=torch.float64), lambda: (_x(3, 5),)),
        "linear_nobias_3d": (lambda: nn.Linear(5, 4, bias=False, dtype=torch.float64), lambda: (_x(2, 3, 5),)),
        "matmul": (lambda: Fn(lambda x, w: x @ w, (5, 2)), lambda: (_x(3, 5),)),
        "bmm": (lambda: Fn(lambda x, w: torch.bmm(x, w.expand(2, 5, 3)), (1, 5, 3)), lambda: (_x(2, 4, 5),)),
        "einsum": (lambda: Fn(lambda x, w: torch.einsum("bij,jk->bik", x, w), (5, 3)), lambda: (_x(2, 4, 5),)),
        "reshapes": (lambda: Fn(lambda x, w: (x.view(2, 3, 4) * w).permute(2, 0, 1).transpose(0, 1)
                                .reshape(-1, 4), (3, 1)), lambda: (_x(6, 4),)),
        "flatten": (lambda: nn.Sequential(nn.Flatten(), nn.Linear(6, 2, dtype=torch.float64)),
                    lambda: (_x(3, 2, 3),)),
        "cat_stack_slice": (lambda: Fn(lambda x, w: torch.stack([torch.cat([x, w], dim=1)[:, 1:5], x[:, ::2][:, :2]
                                                                 .repeat(1, 2)], 0)[..., None], (3, 2)),
                            lambda: (_x(3, 4),)),
        "unsqueeze_squeeze_t": (lambda: Fn(lambda x, w: (x.unsqueeze(0) * w).squeeze(0).t().contiguous(), (3, 4)),
                                lambda: (_x(3, 4),)),
        "reductions": (lambda: Fn(lambda x, w: torch.stack([(x * w).sum(1), x.mean(dim=1), torch.amax(x * w, 1),
                                                            x.sum(dim=(0, 1), keepdim=True).expand(3, 1)[:, 0]]),
                                  (3, 4)), lambda: (_x(3, 4),)),
        "max_dim": (lambda: Fn(lambda x, w: torch.max(x * w, dim=1)[0] + x.max(), (3, 4)), lambda: (_x(3, 4),)),
        "split_chunk": (lambda: Fn(lambda x, w: (x * w).chunk(3, 1)[2].sum() + 2 * (x * w).chunk(3, 1)[0].sum()
                                   + x.split(2, 0)[1].sum(), (4, 7)), lambda: (_x(4, 7),)),
        "layer_norm": (lambda: nn.LayerNorm(5, dtype=torch.float64), lambda: (_x(3, 5),)),
        "layer_norm_2d": (lambda: nn.LayerNorm((2, 5), dtype=torch.float64), lambda: (_x(3, 2, 5),)),
        "group_norm": (lambda: nn.GroupNorm(2, 4, dtype=torch.float64), lambda: (_x(2, 4, 3, 3),)),
        "mse_loss": (lambda: Fn(lambda x, w: F.mse_loss(x * w, torch.ones(3, 4, dtype=torch.float64)), (3, 4)),
                     lambda: (_x(3, 4),)),
        "mse_sum": (lambda: Fn(lambda x, w: F.mse_loss(x, w, reduction="sum"), (3, 4)), lambda: (_x(3, 4),)),
        "conv1d": (lambda: nn.Conv1d(2, 3, 3, stride=2, padding=1, dtype=torch.float64), lambda: (_x(2, 2, 9),)),
        "conv2d": (lambda: nn.Conv2d(2, 4, 3, padding=1, dtype=torch.float64), lambda: (_x(2, 2, 5, 5),)),
        "conv2d_stride_dilation_groups": (
            lambda: nn.Conv2d(4, 6, (3, 2), stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=2,
                              dtype=torch.float64), lambda: (_x(1, 4, 6, 5),)),
        "conv2d_same_unbatched": (lambda: nn.Conv2d(2, 3, 3, padding="same", bias=False, dtype=torch.float64),
                                  lambda: (_x(2, 5, 4),)),
        "max_pool2d": (lambda: nn.Sequential(nn.Conv2d(1, 2, 1, dtype=torch.float64), nn.MaxPool2d(2)),
                       lambda: (_x(2, 1, 4, 6),)),
        "max_pool2d_pad_stride": (lambda: Fn(lambda x, w: F.max_pool2d(x * w, 3, stride=2, padding=1), (1, 1, 1)),
                                  lambda: (_x(2, 1, 5, 5),)),
        "max_pool1d": (lambda: Fn(lambda x, w: F.max_pool1d(x * w, 2), (3, 1)), lambda: (_x(2, 3, 8),)),
        "avg_pool2d": (lambda: Fn(lambda x, w: F.avg_pool2d(x * w, 2) + F.avg_pool2d(x, 3, 2, 1)[..., :2, :2],
                                  (1, 1, 1)), lambda: (_x(2, 1, 4, 4),)),
        "avg_pool_exclude_pad": (lambda: Fn(lambda x, w: F.avg_pool2d(x * w, 3, 2, 1, count_include_pad=False),
                                            (1, 1, 1)), lambda: (_x(1, 2, 5, 4),)),
        "avg_pool1d": (lambda: nn.Sequential(nn.Conv1d(2, 2, 1, dtype=torch.float64), nn.AvgPool1d(3)),
                       lambda: (_x(2, 2, 9),)),
        "adaptive_avg_pool2d": (lambda: Fn(lambda x, w: F.adaptive_avg_pool2d(x * w, (2, 3)), (1, 1, 1)),
                                lambda: (_x(2, 3, 4, 7),)),
        "adaptive_avg_pool1d": (lambda: Fn(lambda x, w: F.adaptive_avg_pool1d(x * w, 1), (1, 1)),
                                lambda: (_x(2, 3, 5),)),
        "batch_norm_1d": (lambda: nn.BatchNorm1d(4, dtype=torch.float64), lambda: (_x(5, 4),)),
        "batch_norm_2d": (lambda: nn.BatchNorm2d(3, dtype=torch.float64), lambda: (_x(2, 3, 3, 2),)),
        "batch_norm_no_momentum": (lambda: nn.BatchNorm1d(3, momentum=None, dtype=torch.float64),
                                   lambda: (_x(4, 3, 2),)),
        "batch_norm_no_stats": (lambda: nn.BatchNorm1d(3, track_running_stats=False, affine=False,
                                                       dtype=torch.float64), lambda: (_x(4, 3),)),
    })
    return cases


CASES = _cases()


def _compare(module, inputs, steps=1):
    """Outputs, parameter and input gradients, and buffers, compiled vs torch, on copies of one module."""
    twin = __import__("copy").deepcopy(module)
    compiled = sd.compile_module(module, *[x.detach() for x in inputs], device="numpy")
    for _ in range(steps):
        ours_in = [x.detach().clone().requires_grad_(x.requires_grad) for x in inputs]
        theirs_in = [x.detach().clone().requires_grad_(x.requires_grad) for x in inputs]
        ours, theirs = compiled(*ours_in), twin(*theirs_in)
        np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=RTOL, atol=ATOL)
        ct = torch.randn(theirs.shape, dtype=theirs.dtype)
        (ours * ct).sum().backward()
        (theirs * ct).sum().backward()
        for (name, p), q in zip(module.named_parameters(), twin.parameters()):
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=RTOL, atol=ATOL, err_msg=name)
        for a, b in zip(ours_in, theirs_in):
            if a.requires_grad:
                np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=RTOL, atol=ATOL, err_msg="input")
    for (name, a), b in zip(module.named_buffers(), twin.buffers()):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=RTOL, atol=ATOL, err_msg=name)


@pytest.mark.parametrize("name", sorted(CASES))
def test_operator_matches_torch(name):
    torch.manual_seed(sorted(CASES).index(name))
    make_module, make_inputs = CASES[name]
    module = make_module()
    _compare(module, make_inputs(), steps=2 if name.startswith("batch_norm") else 1)


def test_batch_norm_eval_uses_running_stats():
    torch.manual_seed(1)
    module = nn.Sequential(nn.Linear(3, 4, dtype=torch.float64), nn.BatchNorm1d(4, dtype=torch.float64))
    module.train()(torch.randn(6, 3, dtype=torch.float64))  # some running statistics
    module.eval()
    _compare(module, (_x(5, 3),))
