"""sd.compile_module against torch's own forward and autograd of the same
module: float64 on the numpy interpreter, one operator (or layer) per case.

Tolerance: each case computes a few hundred float64 operations per value;
its rounding differs from torch's kernels by reassociation (sums, matmul
blocking) only, a few ulp per operation, so values and gradients agree to
~1e-13 relative; we allow 1e-10 (absolute 1e-12 for values near zero).  The
exact GELU's erf is a 49-point Clenshaw-Curtis quadrature accurate to 5e-16.
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


def _in_place(x, w):
    """Later uses of ``h`` see what the in-place calls made of it, as in torch."""
    h = x * w
    h.add_(1)
    F.relu(h, inplace=True)
    return h * 2


def _cases():
    """name -> (module factory, inputs factory)."""
    elementwise = {
        "relu": F.relu, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu,
        "tanh": torch.tanh, "sigmoid": torch.sigmoid, "softplus": F.softplus,
        "softplus_beta": lambda x: F.softplus(x * 10, beta=2, threshold=5), "leaky_relu": F.leaky_relu,
        "elu": F.elu, "exp_log": lambda x: torch.log(torch.exp(x) + 1), "rsqrt": lambda x: torch.rsqrt(x * x + 1),
        "clamp": lambda x: torch.clamp(x, -0.5, 0.7), "hardtanh": F.hardtanh,
        "hardswish": lambda x: F.hardswish(x * 4), "hardsigmoid": lambda x: F.hardsigmoid(x * 4),
        "mish": F.mish, "selu": F.selu, "celu": lambda x: F.celu(x, 0.5), "relu6": lambda x: F.relu6(x * 8),
        "logsigmoid": F.logsigmoid, "softsign": F.softsign, "glu": lambda x: F.glu(x[:, :4]),
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
        "prelu": (lambda: nn.Sequential(nn.Conv1d(2, 3, 1, dtype=torch.float64),
                                        nn.PReLU(3, dtype=torch.float64)), lambda: (_x(2, 2, 4),)),
        "bce_with_logits": (lambda: Fn(lambda x, w: F.binary_cross_entropy_with_logits(
            x * w, torch.full((3, 4), 0.3, dtype=torch.float64), weight=torch.full((4,), 0.7, dtype=torch.float64),
            pos_weight=torch.full((4,), 1.5, dtype=torch.float64)),
            (3, 4)), lambda: (_x(3, 4),)),
        "bce": (lambda: Fn(lambda x, w: F.binary_cross_entropy(
            torch.sigmoid(x * w), torch.full((3, 4), 0.3, dtype=torch.float64), reduction="sum"), (3, 4)),
            lambda: (_x(3, 4),)),
        "smooth_l1_huber": (lambda: Fn(lambda x, w: F.smooth_l1_loss(x * w, x, beta=0.5)
                                       + F.huber_loss(x, w * 2, delta=0.7), (3, 4)), lambda: (_x(3, 4),)),
        "kl_div": (lambda: Fn(lambda x, w: F.kl_div(F.log_softmax(x * w, 1), torch.tensor(
            [[0.0, 0.5, 0.5, 0.0]] * 3, dtype=torch.float64), reduction="batchmean")
            + F.kl_div(F.log_softmax(x, 1), F.log_softmax(w, 1), reduction="sum", log_target=True), (3, 4)),
            lambda: (_x(3, 4),)),
        "interpolate_nearest": (lambda: nn.Sequential(nn.Conv2d(1, 2, 1, dtype=torch.float64),
                                                      nn.Upsample(scale_factor=2)), lambda: (_x(2, 1, 3, 2),)),
        "interpolate_size": (lambda: Fn(lambda x, w: F.interpolate(x * w, size=(5, 3)), (1, 1, 1)),
                             lambda: (_x(1, 2, 3, 2),)),
        "pool3d": (lambda: Fn(lambda x, w: F.max_pool3d(x * w, 2) + F.avg_pool3d(x, 2)
                              + F.adaptive_avg_pool3d(x, 1), (1, 1, 1, 1)), lambda: (_x(1, 2, 2, 4, 4),)),
        "var_std": (lambda: Fn(lambda x, w: torch.stack([torch.var(x * w, 1), (x * w).std(dim=0, correction=0)[:3],
                                                         x.var(1, unbiased=False)]), (3, 3)), lambda: (_x(3, 3),)),
        "normalize": (lambda: Fn(lambda x, w: F.normalize(x * w, dim=-1) + F.normalize(x, p=3.0, dim=0), (3, 4)),
                      lambda: (_x(3, 4),)),
        "in_place": (lambda: Fn(_in_place, (3, 4)), lambda: (_x(3, 4),)),
        "casts": (lambda: Fn(lambda x, w: (x * w > 0).to(x.dtype) * w + (x > w).to(torch.float64) * x
                             + (x < 0).type_as(x) + (x * w).float().double() + (x > 1).to("cpu", x.dtype), (3, 4)),
                  lambda: (_x(3, 4),)),
        "sdpa_causal_mask_in_forward": (
            lambda: Fn(lambda x, w: F.scaled_dot_product_attention(x * w, x, x, attn_mask=torch.triu(
                torch.full((x.size(1), x.size(1)), float("-inf"), dtype=torch.float64), diagonal=1))
                + F.scaled_dot_product_attention(x, x * w, x, is_causal=True), (4,)), lambda: (_x(2, 3, 4),)),
        "sdpa_bool_mask": (lambda: Fn(lambda x, w: F.scaled_dot_product_attention(
            x, x * w, x, attn_mask=torch.tril(torch.ones(3, 3, dtype=torch.bool))), (4,)), lambda: (_x(2, 3, 4),)),
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


def _compare(module, inputs, steps=1, rtol=RTOL):
    """Outputs, parameter and input gradients, and buffers, compiled vs torch, on copies of one module."""
    twin = __import__("copy").deepcopy(module)
    compiled = sd.compile_module(module, *[x.detach() for x in inputs], device="numpy")
    for _ in range(steps):
        ours_in = [x.detach().clone().requires_grad_(x.requires_grad) for x in inputs]
        theirs_in = [x.detach().clone().requires_grad_(x.requires_grad) for x in inputs]
        ours, theirs = compiled(*ours_in), twin(*theirs_in)
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
        np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=rtol, atol=ATOL)
        ct = torch.randn(theirs.shape, dtype=theirs.dtype)
        (ours * ct).sum().backward()
        (theirs * ct).sum().backward()
        for (name, p), q in zip(module.named_parameters(), twin.parameters()):
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=rtol, atol=ATOL, err_msg=name)
        for a, b in zip(ours_in, theirs_in):
            if a.requires_grad:
                np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=rtol, atol=ATOL, err_msg="input")
    for (name, a), b in zip(module.named_buffers(), twin.buffers()):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=RTOL, atol=ATOL, err_msg=name)


# torch's float64 hardsigmoid/hardswish backward multiplies by 1/6 rounded to float32
# (relative error 2**-25): there the comparison can only be that close.
LOOSER = {"hardsigmoid": 1e-7, "hardswish": 1e-7}


@pytest.mark.parametrize("name", sorted(CASES))
def test_operator_matches_torch(name):
    torch.manual_seed(sorted(CASES).index(name))
    make_module, make_inputs = CASES[name]
    module = make_module()
    _compare(module, make_inputs(), steps=2 if name.startswith("batch_norm") else 1, rtol=LOOSER.get(name, RTOL))


def test_scalar_loss_runs_fused_and_differentiates_twice():
    """A scalar loss in training comes from one value_and_grad run; backward
    scales its gradient by the cotangent, and create_graph=True still gives
    torch's second derivatives (through the VJP program)."""
    torch.manual_seed(4)
    module = Fn(lambda x, w: torch.tanh(x @ w).sum(), (5, 3))
    twin = __import__("copy").deepcopy(module)
    compiled = sd.compile_module(module, _x(4, 5).detach(), device="numpy")
    x = _x(4, 5)
    loss = compiled(x)
    assert type(loss.grad_fn).__name__ == "FusedLossBackward"
    (ours,) = torch.autograd.grad(loss * 3, list(module.parameters()))
    (theirs,) = torch.autograd.grad(twin(x) * 3, list(twin.parameters()))
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=RTOL, atol=ATOL)
    for net in (compiled, twin):
        (grad,) = torch.autograd.grad(net(x), list(net.parameters()), create_graph=True)
        (curvature,) = torch.autograd.grad((grad * grad).sum(), list(net.parameters()))
        if net is compiled:
            ours = curvature
    np.testing.assert_allclose(ours.numpy(), curvature.numpy(), rtol=RTOL, atol=ATOL)


def test_batch_norm_eval_uses_running_stats():
    torch.manual_seed(1)
    module = nn.Sequential(nn.Linear(3, 4, dtype=torch.float64), nn.BatchNorm1d(4, dtype=torch.float64))
    module.train()(torch.randn(6, 3, dtype=torch.float64))  # some running statistics
    module.eval()
    _compare(module, (_x(5, 3),))


class Classifier(nn.Module):
    """Logits from a linear layer, scored against integer targets by ``loss``."""

    def __init__(self, loss, classes=4, dims=0):
        super().__init__()
        self.fc = nn.Linear(5, classes, dtype=torch.float64)
        self.loss, self.dims = loss, dims

    def forward(self, x, target):
        logits = self.fc(x)
        if self.dims:  # (N, C, d): the class axis second, as torch's losses want it
            logits = logits.permute(0, 2, 1)
        return self.loss(logits, target)


LOSSES = {
    "cross_entropy": F.cross_entropy,
    "cross_entropy_sum_ignore": lambda z, t: F.cross_entropy(z, t, reduction="sum", ignore_index=2),
    "cross_entropy_weighted_smoothing": lambda z, t: F.cross_entropy(
        z, t, weight=torch.tensor([1.0, 2.0, 0.5, 1.5], dtype=torch.float64), ignore_index=1, label_smoothing=0.2),
    "cross_entropy_none": lambda z, t: F.cross_entropy(z, t, reduction="none"),
    "nll_loss": lambda z, t: F.nll_loss(F.log_softmax(z, 1), t),
    "nll_loss_weighted": lambda z, t: F.nll_loss(torch.log_softmax(z, dim=1), t,
                                                 weight=torch.tensor([1.0, 2.0, 0.5, 1.5], dtype=torch.float64)),
    "cross_entropy_module": nn.CrossEntropyLoss(label_smoothing=0.1),
}


@pytest.mark.parametrize("name", sorted(LOSSES))
@pytest.mark.parametrize("dims", [0, 1], ids=["NC", "NCd"])
def test_losses_with_integer_targets(name, dims):
    torch.manual_seed(2)
    x = _x(6, 3, 5) if dims else _x(6, 5)
    target = torch.randint(0, 4, (6, 3) if dims else (6,))
    _compare(Classifier(LOSSES[name], dims=dims), (x, target))


def test_cross_entropy_with_probabilities():
    torch.manual_seed(3)
    probs = torch.softmax(torch.randn(6, 4, dtype=torch.float64), 1)
    _compare(Classifier(lambda z, p: F.cross_entropy(z, p, label_smoothing=0.1)), (_x(6, 5), probs))


class Embedder(nn.Module):
    def __init__(self, padding_idx=None):
        super().__init__()
        self.emb = nn.Embedding(7, 3, padding_idx=padding_idx, dtype=torch.float64)
        self.fc = nn.Linear(3, 2, dtype=torch.float64)

    def forward(self, idx):
        return self.fc(torch.tanh(self.emb(idx))).sum(1)


@pytest.mark.parametrize("padding_idx", [None, 0])
def test_embedding(padding_idx):
    torch.manual_seed(4)
    idx = torch.tensor([[0, 3, 3, 6], [1, 0, 2, 5]])
    _compare(Embedder(padding_idx), (idx,))


class Dropper(nn.Module):
    """Dropout as a layer, as a function and per channel, between linear maps."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(2, 3, 1, dtype=torch.float64)
        self.drop2d = nn.Dropout1d(0.5)
        self.fc = nn.Linear(4, 5, dtype=torch.float64)
        self.drop = nn.Dropout(0.3)

    def forward(self, x):
        h = self.drop(torch.tanh(self.fc(self.drop2d(self.conv(x)))))
        return F.dropout(h, 0.25, self.training) + F.dropout(h, 0.0, self.training)


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_dropout_draws_torch_masks(mode):
    """Same seed, same masks: compiled and plain torch agree exactly, step after step."""
    torch.manual_seed(5)
    module = Dropper().train(mode == "train")
    twin = __import__("copy").deepcopy(module)
    x = torch.randn(3, 2, 4, dtype=torch.float64)
    compiled = sd.compile_module(module, x, device="numpy")
    for seed in (1, 2):
        torch.manual_seed(seed)
        ours = compiled(x)
        torch.manual_seed(seed)
        theirs = twin(x)
        np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=RTOL, atol=ATOL)
        ours.sum().backward()
        theirs.sum().backward()
        for p, q in zip(module.parameters(), twin.parameters()):
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=RTOL, atol=ATOL)
    torch.manual_seed(3)
    compiled(x)
    after_ours = torch.rand(())
    torch.manual_seed(3)
    twin(x)
    assert torch.rand(()) == after_ours  # the generator advanced as torch's own dropout advances it


class Scan(nn.Module):
    def forward(self, x):
        return torch.cumsum(x, 1)


class Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.ModuleList([nn.Sequential(nn.Linear(3, 3), Scan())])

    def forward(self, x):
        return self.layer[0](x)


def test_unsupported_operator_is_refused_with_module_path():
    with pytest.raises(sd.ProgramError) as err:
        sd.compile_module(Branchy(), torch.randn(2, 3))
    message = str(err.value)
    assert "model.layer.0.1 (Scan)" in message
    assert "torch.cumsum" in message
    assert "torch.nn.functional.gelu" in message  # the forms that work


def test_unsupported_argument_is_refused_at_compile_time():
    module = nn.Sequential(nn.Conv2d(1, 1, 1), nn.MaxPool2d(2, ceil_mode=True))
    with pytest.raises(sd.ProgramError, match=r"model\.1 \(MaxPool2d\).*ceil_mode=True"):
        sd.compile_module(module)


def test_control_flow_names_the_module():
    class Gate(nn.Module):
        def forward(self, x):
            return x if x.sum() > 0 else -x

    module = nn.Sequential(nn.Linear(2, 2), nn.Sequential(Gate()))
    with pytest.raises(sd.ProgramError, match=r"model\.1\.0.*torch\.where"):
        sd.compile_module(module)


def test_same_parameters_new_shapes_and_modes():
    """The compiled module holds the module's own Parameter objects (an
    optimiser on either changes both); a new input shape traces again."""
    torch.manual_seed(6)
    module = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 1))
    compiled = sd.compile_module(module, torch.randn(5, 3), device="numpy")
    assert [id(p) for p in compiled.parameters()] == [id(p) for p in module.parameters()]
    assert [id(b) for b in compiled.buffers()] == [id(b) for b in module.buffers()]
    x = torch.randn(5, 3)
    before = compiled(x).detach().clone()
    with torch.no_grad():
        module[3].bias += 1.0  # as an optimiser step would
    assert torch.allclose(compiled(x), before + 1.0, atol=1e-5)  # batch statistics: the same
    for batch in (5, 8):
        assert compiled(torch.randn(batch, 3)).shape == (batch, 1)
    assert len(compiled.program._graphs) == 2
    compiled.eval()
    assert not module.training
    np.testing.assert_allclose(compiled(x).detach().numpy(), module(x).detach().numpy(), rtol=1e-5, atol=1e-6)


class Attend(nn.Module):
    def __init__(self, batch_first, kdim=None):
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=batch_first, kdim=kdim, vdim=kdim, dtype=torch.float64)

    def forward(self, x, memory, padding):
        out, weights = self.attn(x, memory, memory, key_padding_mask=padding)
        return out.sum() + (weights * weights).sum()


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("kdim", [None, 5])
def test_multihead_attention(batch_first, kdim):
    torch.manual_seed(7)
    x = _x(2, 3, 8) if batch_first else _x(3, 2, 8)
    memory = _x(2, 4, kdim or 8) if batch_first else _x(4, 2, kdim or 8)
    padding = torch.tensor([[False, False, True, False], [False, False, False, False]])
    _compare(Attend(batch_first, kdim), (x, memory, padding))


class Encoder(nn.Module):
    def __init__(self, **options):
        super().__init__()
        layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True, dtype=torch.float64, **options)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(8, 3, dtype=torch.float64)

    def forward(self, x, mask):
        return self.head(self.encoder(x, mask=mask)).mean(1)


@pytest.mark.parametrize("options", [{}, {"norm_first": True, "activation": "gelu"}], ids=["post", "pre_gelu"])
def test_transformer_encoder(options):
    torch.manual_seed(8)
    causal = torch.triu(torch.ones(4, 4, dtype=torch.bool), 1)
    _compare(Encoder(**options), (_x(2, 4, 8), causal))


def test_encoder_tasklets_carry_submodule_paths():
    """Layers kept whole label their submodules' tasklets with the submodules' paths."""
    torch.manual_seed(8)
    compiled = sd.compile_module(Encoder(), _x(2, 4, 8).detach(), torch.zeros(4, 4, dtype=torch.bool),
                                 device="numpy")
    sources = {t.source for t in compiled.program.graph.tasklets()}
    layer = "model.encoder.layers.1"
    assert {f"{layer} (TransformerEncoderLayer)", f"{layer}.self_attn (MultiheadAttention)",
            f"{layer}.self_attn.out_proj (NonDynamicallyQuantizableLinear)", f"{layer}.linear1 (Linear)",
            f"{layer}.linear2 (Linear)", f"{layer}.norm1 (LayerNorm)", f"{layer}.norm2 (LayerNorm)",
            "model.head (Linear)"} <= sources
    (grouping,) = compiled.program.view(device="numpy", collapse=True).groupings()
    assert f"{layer}.self_attn (MultiheadAttention)" in grouping.labels.values()


def test_attention_dropout_in_training_is_refused():
    module = nn.TransformerEncoderLayer(8, 2, 16)  # dropout=0.1
    with pytest.raises(sd.ProgramError, match=r"model \(TransformerEncoderLayer\).*dropout=0\.0"):
        sd.compile_module(module)


def test_inputs_by_name_and_wrong_count():
    torch.manual_seed(9)
    module = Classifier(F.cross_entropy)
    compiled = sd.compile_module(module, device="numpy")
    x, target = torch.randn(4, 5, dtype=torch.float64), torch.tensor([0, 1, 3, 2])
    np.testing.assert_allclose(compiled(x, target=target).item(), module(x, target).item(), rtol=RTOL)
    with pytest.raises(TypeError, match="takes 2 tensors"):
        compiled(x)


class Nested(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv1d(2, 3, 3), nn.ReLU())
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(3, 2))

    def forward(self, x):
        return torch.tanh(self.head(self.features(x))).sum()


def test_graph_view_groups_tasklets_by_module_path():
    """Each tasklet's source is the module it comes from; the view's groups
    are those modules (forward, and backward apart), each holding only its
    module's tasklets."""
    torch.manual_seed(10)
    compiled = sd.compile_module(Nested(), torch.randn(4, 2, 3), device="numpy")
    graph = compiled.program.backward_graph()
    forward = {t.source for t in graph.tasklets() if not t.backward}
    assert forward == {"model.features.0 (Conv1d)", "model.features.1 (ReLU)", "model.head.1 (Linear)",
                       "model (Nested)"}  # Flatten is a view: no tasklet
    assert {t.source for t in graph.tasklets() if t.backward} <= forward
    conv = [t for t in graph.tasklets() if t.source == "model.features.0 (Conv1d)" and not t.backward]
    assert {t.meta["torch_op"] for t in conv} == {"torch.nn.functional.conv1d"}
    (grouping,) = compiled.program.view(device="numpy", collapse=True).groupings()
    labels = set(grouping.labels.values())
    assert {"model.features.0 (Conv1d)", "model.head.1 (Linear)", "model.features.0 (Conv1d), backward"} <= labels
    for gid, members in grouping.members.items():
        tasklets = [graph.node(v) for v in members if v in {t.name for t in graph.tasklets()}]
        path, backward = grouping.labels[gid].removesuffix(", backward"), grouping.labels[gid].endswith("backward")
        assert tasklets and all(t.source == path and t.backward == backward for t in tasklets), gid


class Cumulative(nn.Module):
    def forward(self, x):
        return x.cumsum(1)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(4, 2, dropout=0.1)
        self.scan = Cumulative()

    def forward(self, x):
        return self.scan(self.attn(x, x, x)[0])


class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.ModuleList([Block()])

    def forward(self, x):
        return self.layer[0](x)


def test_refusal_names_the_nested_module_and_what_works():
    """The issue's form: ``model.layer.0.attn (MultiheadAttention)``, the
    operator or argument, and what to write instead."""
    module = Stack()
    with pytest.raises(sd.ProgramError, match=r"model\.layer\.0\.attn \(MultiheadAttention\): .*dropout=0\.0"):
        sd.compile_module(module)
    module.layer[0].attn.dropout = 0.0
    with pytest.raises(sd.ProgramError) as err:
        sd.compile_module(module)
    assert "model.layer.0.scan (Cumulative): calls the tensor method .cumsum()" in str(err.value)
    assert "Supported methods: abs, add," in str(err.value)


class Mutates(nn.Module):
    def __init__(self, method):
        super().__init__()
        self.w = nn.Parameter(torch.ones(3))
        self.method = method

    def forward(self, x):
        if self.method:
            self.w.add_(1)
        else:
            F.relu(self.w, inplace=True)
        return x * self.w


@pytest.mark.parametrize("method", [True, False], ids=["method", "inplace_kwarg"])
def test_in_place_update_of_a_parameter_is_refused(method):
    with pytest.raises(sd.ProgramError, match=r"model \(Mutates\): updates w in place"):
        sd.compile_module(Mutates(method))


class Structured(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3, dtype=torch.float64)

    def forward(self, x, target):
        z = self.fc(x)
        return {"loss": F.cross_entropy(z, target), "pred": z.argmax(1), "parts": (z, z > 0)}


def test_structured_outputs_with_integer_and_bool_leaves():
    torch.manual_seed(11)
    module = Structured()
    x, target = torch.randn(5, 4, dtype=torch.float64), torch.tensor([0, 2, 1, 1, 0])
    out, ref = sd.compile_module(module, device="numpy")(x, target), module(x, target)
    assert out["pred"].dtype == torch.int64 and torch.equal(out["pred"], ref["pred"])
    assert out["parts"][1].dtype == torch.bool and torch.equal(out["parts"][1], ref["parts"][1])
    out["loss"].backward()
    grad = module.fc.weight.grad.clone()
    module.zero_grad()
    ref["loss"].backward()
    np.testing.assert_allclose(grad.numpy(), module.fc.weight.grad.numpy(), rtol=RTOL, atol=ATOL)


class Optional(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3, dtype=torch.float64)

    def forward(self, x, bias=None, scale=2.0):
        y = self.fc(x)
        if bias is not None:
            y = y + bias
        return y * scale


def test_optional_inputs_keep_their_defaults():
    """Inputs left out keep their defaults as constants (a trace per number of inputs given)."""
    torch.manual_seed(12)
    module = Optional()
    x, bias = torch.randn(2, 3, dtype=torch.float64), torch.randn(3, dtype=torch.float64)
    compiled = sd.compile_module(module, x, device="numpy")
    for args, kwargs in (((x,), {}), ((x, bias), {}), ((x,), {"bias": bias})):
        np.testing.assert_allclose(compiled(*args, **kwargs).detach().numpy(),
                                   module(*args, **kwargs).detach().numpy(), rtol=RTOL, atol=ATOL)


def test_frozen_parameters_no_grad_and_a_new_dtype():
    torch.manual_seed(13)
    module = nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 2))
    x = torch.randn(3, 4)
    compiled = sd.compile_module(module, x, device="numpy")
    with torch.no_grad():
        assert not compiled(x).requires_grad
    module[0].weight.requires_grad_(False)  # frozen: no gradient asked for, none computed
    compiled(x).sum().backward()
    assert module[0].weight.grad is None and module[2].weight.grad is not None
    module.double()  # new parameter dtypes: traced again
    np.testing.assert_allclose(compiled(x.double()).detach().numpy(), module(x.double()).detach().numpy(),
                               rtol=RTOL, atol=ATOL)
