"""sd.compile_module against torch autograd for the operator spellings that
``test_compile_module`` leaves out: every entry of ``torch_ops.FUNCTIONS`` and
``torch_ops.METHODS`` and every layer kept whole runs, with its parameter and
input gradients compared, in some case here or there (issue 37).

Each case is one small module per group of operators, float64 on the numpy
interpreter; ``_compare`` checks the output, every parameter's ``.grad`` and
the input's ``.grad`` against plain torch to 1e-10 relative (the tolerance's
reasoning is in ``test_compile_module``).  Piecewise-constant operators
(floor, sign, comparisons) get zero gradients on both sides; they are mixed
with differentiable ones so that a wrong mask or branch still shows.
"""
from __future__ import annotations

import numpy as np
import pytest

import symdiff as sd
from tests.symdiff.test_compile_module import ATOL, RTOL, Fn, _compare, _x

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional
f64 = torch.float64


def _operators(x, w):
    """Python operators on tensors, the comparisons and logic as masks."""
    y = x * w
    mask = ((y > 0.1) & (x < 1)) | ~(x >= w) | (x <= -1)
    same = (x == x).to(f64) - (x != w).to(f64)
    # floor division on floats has no derivative in torch: it runs on integers here
    halves = (torch.arange(x.size(1)) // 2).to(f64)
    return (x - w) / (w * w + 1) + (-y) ** 2 + (+x) * (halves + 1) + torch.where(mask, y, x) + same


def _elementwise_functions(x, w):
    y = x * w
    pos = y * y + 0.5
    return (torch.abs(y) + torch.add(x, w, alpha=2) + torch.sub(x, w) + torch.subtract(y, x, alpha=0.5)
            + torch.mul(x, w) * torch.multiply(y, 2.0) + torch.div(x, pos) + torch.divide(y, pos)
            + torch.true_divide(x, pos) + torch.neg(y) + torch.pow(pos, 1.5) + torch.sqrt(pos)
            + torch.square(y) + torch.reciprocal(pos) + torch.sin(y) + torch.cos(x) + torch.erf(y)
            + torch.expm1(y) + torch.log1p(pos) + torch.maximum(x, w) + torch.minimum(x, y)
            + torch.clip(y, -0.3, 0.4) + torch.relu(y) + F.sigmoid(y) + F.tanh(x)
            + torch.sign(y) * y + torch.floor(y) + torch.ceil(x) + torch.round(y)
            + torch.div(y, 0.3, rounding_mode="floor") + torch.divide(y, 0.3, rounding_mode="trunc")
            + torch.where(torch.logical_not(torch.gt(y, 0)) & torch.ge(x, -1), y, 2 * x)
            + torch.eq(x, x).to(f64) + torch.ne(x, w).to(f64) * y + torch.lt(y, x).to(f64) * x
            + torch.le(x, w).to(f64) * w)


def _elementwise_methods(x, w):
    y = x.mul(w)
    pos = y.square().add(0.5)
    return (y.abs() + x.sub(w) + y.subtract(x) + x.multiply(w) + x.div(pos) + y.divide(pos)
            + x.true_divide(pos) + y.neg() + pos.pow(1.5) + pos.sqrt() + pos.rsqrt() + pos.reciprocal()
            + y.sin() + x.cos() + y.erf() + y.expm1() + pos.log1p() + pos.log() + y.exp() + y.relu()
            + y.sigmoid() + x.tanh() + y.sign() * y + y.floor() + x.ceil() + y.round()
            + x.maximum(w) + x.minimum(y) + y.clamp(-0.3, 0.4) + y.clip(min=-0.2)
            + y.where(y.gt(0).logical_not() & x.ge(-1), 2 * x) + x.eq(x).to(f64) + x.ne(w).to(f64) * y
            + y.lt(x).to(f64) * x + x.le(w).to(f64) * w + y.masked_fill(y > 0.5, 0.25))


def _reductions(x, w):
    y = x * w
    values, _ = torch.min(y, 1)
    top, where = y.min(dim=0, keepdim=True)
    return torch.cat([
        torch.sum(y, 1), torch.mean(y, dim=0)[:3], torch.prod(y, 1), y.prod(dim=0)[:3], torch.amin(y, 1),
        y.amin(0)[:3], y.amax(dim=1), values, top[0, :3] + where[0, :3], torch.min(x, w)[0, :3],
        torch.min(y).reshape(1), torch.std(y, 1), y.argmax(1) * y[:, 0], torch.argmax(y, dim=0)[:3] * x[0, :3],
        torch.sum(y, dtype=f64).reshape(1)])


def _shapes(x, w):
    """x: (2, 3, 4)."""
    y = x * w
    a = torch.transpose(torch.permute(y, (2, 0, 1)), 0, 1).swapaxes(1, 2)
    b = torch.reshape(torch.flatten(y, 1), (2, 3, 4)) + y.view_as(a) + w.expand_as(y)
    c = torch.squeeze(torch.unsqueeze(y, 0), 0) + torch.t(y[0]).t().reshape_as(y[0]).clone()
    first, rest = torch.split(b, [1, 2], dim=1)
    left, right = torch.chunk(c, 2, dim=2)
    scale = x.dim() * x.numel() / 24.0
    return torch.concat([first.sum(1) * scale, rest.sum(1), (left * right).sum(1), a.sum(2)], dim=1)


def _creation_and_masks(x, w):
    """x: (3, 3)."""
    y = x @ w
    n = x.size(0)  # creation calls on traced sizes (on constants torch.fx runs them itself)
    ramp = torch.arange(n, dtype=f64) + torch.arange(0.0, n / 2, 0.5, dtype=f64)
    ones = torch.ones((n, 3), dtype=f64) + torch.ones_like(y) + torch.zeros((n,), dtype=f64) + torch.zeros_like(x)
    picked = y[torch.arange(n), x.argmax(1).long()] + y[torch.arange(n), x.argmax(0).int()]
    half = torch.full((n, 3), 0.5, dtype=f64)
    return (torch.tril(y, -1) + y.tril() + y.triu(1) + ones * ramp) * picked[:, None] + half


def _matmuls(x, w):
    """x: (2, 3, 4), w: (4, 4)."""
    flat = x.reshape(6, 4)
    return (torch.matmul(x, w) + x.matmul(w) + torch.mm(flat, w).view(2, 3, 4) + flat.mm(w).view(2, 3, 4)
            + x.bmm(w.expand(2, 4, 4)) + torch.softmax(x, -1) + x.log_softmax(dim=2) + x.softmax(dim=1))


def _pads(x, w):
    """x: (2, 2, 3, 4)."""
    y = x * w
    return (F.pad(y, (1, 2, 0, 1)).sum() + F.pad(y, (1, 1), value=0.5).sum()
            + (F.pad(y, (2, 1, 1, 2), mode="reflect") ** 2).sum()
            + (F.pad(y, (1, 2, 1, 0), mode="replicate") ** 2).sum()
            + (F.pad(y, (1, 1, 2, 1), mode="circular") ** 2).sum())


def _l1_losses(x, w):
    target = torch.linspace(-1, 1, 12, dtype=f64).reshape(3, 4)
    return (F.l1_loss(x * w, target) + F.l1_loss(x, w, reduction="sum")
            + F.l1_loss(x, target, reduction="none").sum(0).max())


def _functional_batch_norm(x, w, b):
    """F.batch_norm with given running statistics (evaluation) and without any (batch statistics)."""
    mean = torch.tensor([0.1, -0.2, 0.3], dtype=f64)
    var = torch.tensor([0.5, 1.5, 2.0], dtype=f64)
    return (F.batch_norm(x, mean, var, w, b, training=False, eps=1e-3)
            + F.batch_norm(x * w[:, None], None, None, training=True)
            + F.batch_norm(x, mean, var))


class Net3d(nn.Module):
    """conv3d (stride, padding, dilation, groups), BatchNorm3d, 3-d pooling."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv3d(2, 4, (3, 2, 2), stride=(1, 2, 1), padding=(1, 0, 1), dilation=(2, 1, 1), groups=2,
                              dtype=f64)
        self.norm = nn.BatchNorm3d(4, dtype=f64)

    def forward(self, x):
        return F.max_pool3d(torch.tanh(self.norm(self.conv(x))), (1, 2, 2))


class Norms(nn.Module):
    """Layer, group and batch norm in one module (for train and eval)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(2, 4, 1, dtype=f64)
        self.group = nn.GroupNorm(2, 4, dtype=f64)
        self.batch = nn.BatchNorm1d(4, dtype=f64)
        self.layer = nn.LayerNorm(5, dtype=f64)

    def forward(self, x):
        return self.layer(self.batch(self.group(self.conv(x))))


def _trained(module, *shape):
    """``module`` in evaluation, after one training call gave it running statistics."""
    module.train()(torch.randn(*shape, dtype=f64))
    return module.eval()


CASES = {
    "python_operators": (lambda: Fn(_operators, (3, 4)), lambda: (_x(3, 4),)),
    "torch_elementwise": (lambda: Fn(_elementwise_functions, (3, 4)), lambda: (_x(3, 4),)),
    "method_elementwise": (lambda: Fn(_elementwise_methods, (3, 4)), lambda: (_x(3, 4),)),
    "reductions": (lambda: Fn(_reductions, (3, 4)), lambda: (_x(3, 4),)),
    "shapes": (lambda: Fn(_shapes, (3, 1)), lambda: (_x(2, 3, 4),)),
    "creation_indexing_triangles": (lambda: Fn(_creation_and_masks, (3, 3)), lambda: (_x(3, 3),)),
    "matmuls_softmax": (lambda: Fn(_matmuls, (4, 4)), lambda: (_x(2, 3, 4),)),
    "pad_modes": (lambda: Fn(_pads, (1, 3, 1)), lambda: (_x(2, 2, 3, 4),)),
    "l1_loss": (lambda: Fn(_l1_losses, (3, 4)), lambda: (_x(3, 4),)),
    "functional_batch_norm": (lambda: Fn(_functional_batch_norm, (3,), (3,)), lambda: (_x(4, 3, 2),)),
    "conv3d_batch_norm3d_train": (lambda: Net3d(), lambda: (_x(2, 2, 4, 5, 3),)),
    "conv3d_batch_norm3d_eval": (lambda: _trained(Net3d(), 2, 2, 4, 5, 3), lambda: (_x(2, 2, 4, 5, 3),)),
    "norms_train": (lambda: Norms(), lambda: (_x(3, 2, 5),)),
    "norms_eval": (lambda: _trained(Norms(), 3, 2, 5), lambda: (_x(3, 2, 5),)),
    "conv1d_dilation_groups_nobias": (
        lambda: nn.Conv1d(4, 2, 3, stride=2, padding=2, dilation=2, groups=2, bias=False, dtype=f64),
        lambda: (_x(2, 4, 9),)),
    "encoder_layer_whole": (
        lambda: nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True, dtype=f64),
        lambda: (_x(2, 3, 8),)),
    "encoder_layer_whole_eval_norm_first": (
        lambda: nn.TransformerEncoderLayer(8, 2, 16, dropout=0.3, norm_first=True, activation=F.gelu,
                                           dtype=f64).eval(),
        lambda: (_x(3, 2, 8),)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_operator_group_matches_torch(name):
    torch.manual_seed(100 + sorted(CASES).index(name))
    make_module, make_inputs = CASES[name]
    _compare(make_module(), make_inputs())


class FeatureDropper(nn.Module):
    """Channel dropout of 2-d and 3-d feature maps, as layers and as functions."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1, dtype=f64)
        self.drop2d = nn.Dropout2d(0.4)
        self.drop3d = nn.Dropout3d(0.6)

    def forward(self, x):
        h = self.drop2d(self.conv(x))
        h = self.drop3d(h[:, None]).squeeze(1)
        return (F.dropout2d(h, 0.3, self.training) + F.dropout1d(h.flatten(2), 0.5, self.training).view_as(h)
                + F.dropout3d(h[:, :, None], 0.2, self.training)[:, :, 0])


def test_feature_dropout_masks_come_from_torch_generator():
    """Same seed → the same channel masks, output and gradients as torch."""
    torch.manual_seed(9)
    module = FeatureDropper()
    twin = __import__("copy").deepcopy(module)
    x = torch.randn(2, 3, 2, 3, dtype=f64)
    compiled = sd.compile_module(module, x, device="numpy")
    torch.manual_seed(11)
    ours = compiled(x)
    torch.manual_seed(11)
    theirs = twin(x)
    assert (ours == 0).any()  # some channels dropped: the masks were drawn
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=RTOL, atol=ATOL)
    ours.pow(2).sum().backward()
    theirs.pow(2).sum().backward()
    for (name, p), q in zip(module.named_parameters(), twin.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=RTOL, atol=ATOL, err_msg=name)


def test_attention_compiled_alone_gives_output_and_weights():
    """A layer kept whole as the module compiled (not inside a traced parent)
    returns torch's tuple; both parts differentiate as torch's."""
    torch.manual_seed(12)
    module = nn.MultiheadAttention(4, 2, dtype=f64)
    twin = __import__("copy").deepcopy(module)
    query, memory = torch.randn(3, 2, 4, dtype=f64), torch.randn(5, 2, 4, dtype=f64)
    compiled = sd.compile_module(module, query, memory, memory, device="numpy")
    grads = []
    for net in (compiled, twin):
        q, m = query.clone().requires_grad_(), memory.clone().requires_grad_()
        out, weights = net(q, m, m)
        (out.sin().sum() + (weights * weights).sum()).backward()
        grads.append([out.detach(), weights.detach(), q.grad, m.grad, *(p.grad for p in net.parameters())])
    for ours, theirs in zip(*grads):
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=RTOL, atol=ATOL)
