"""sd.to_torch against torch's own autograd of the same function (float64 on
the numpy interpreter; float32 on slangpy's CPU device)."""
import subprocess
import sys

import numpy as np
import pytest

import symdiff as sd
from symdiff.interop import torch_bridge

torch = pytest.importorskip("torch")


def _two_outputs(a, b, idx):
    """Two outputs, a gather through an int32 index argument (no gradient)."""
    return np.sum(np.tanh(a * b) ** 2) + np.sum(a[idx]), np.sin(a) * b


def _torch_two_outputs(a, b, idx):
    return (torch.tanh(a * b) ** 2).sum() + a[idx].sum(), torch.sin(a) * b


def _inputs(requires_grad=(True, True)):
    rng = np.random.default_rng(3)
    a, b = (torch.tensor(rng.standard_normal(6), requires_grad=r) for r in requires_grad)
    return a, b, torch.tensor([0, 2, 2, 5], dtype=torch.int32)


def _objective(outs, ct):
    """A scalar using both outputs, so both cotangents are non-trivial."""
    return outs[0] * 1.5 + (outs[1] * ct).sum()


def test_import_symdiff_imports_neither_torch_nor_jax():
    code = "import sys, symdiff; print(sorted(m for m in ('torch', 'jax') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_values_and_gradients_match_torch_autograd():
    fn = sd.to_torch(sd.differentiable_program(_two_outputs), device="numpy")
    a, b, idx = _inputs()
    ct = torch.tensor(np.random.default_rng(4).standard_normal(6))
    outs, ref = fn(a, b, idx), _torch_two_outputs(a, b, idx)
    for o, r in zip(outs, ref):
        torch.testing.assert_close(o, r, rtol=1e-12, atol=1e-12)
    got = torch.autograd.grad(_objective(outs, ct), (a, b))
    want = torch.autograd.grad(_objective(ref, ct), (a, b))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)


def test_backward_computes_only_the_gradients_torch_needs():
    fn = sd.to_torch(sd.differentiable_program(_two_outputs), device="numpy")
    a, b, idx = _inputs(requires_grad=(False, True))
    s, _ = fn(a, b, idx)
    s.backward()
    assert [names for _, names in fn._backward] == [("b",)]  # one VJP program, for b alone
    torch.testing.assert_close(b.grad, torch.autograd.grad(_torch_two_outputs(a, b, idx)[0], b)[0])
    assert a.grad is None


def test_arguments_outside_wrt_are_constants():
    fn = sd.to_torch(sd.differentiable_program(_two_outputs), wrt=["a"], device="numpy")
    a, b, idx = _inputs()
    fn(a, b, idx)[0].backward()
    assert b.grad is None
    torch.testing.assert_close(a.grad, torch.autograd.grad(_torch_two_outputs(a, b, idx)[0], a)[0])


def test_keyword_arguments_and_plain_functions():
    fn = sd.to_torch(lambda x, w: np.sum(x * w), device="numpy")
    x, w = torch.ones(3, dtype=torch.float64, requires_grad=True), torch.arange(3.0, dtype=torch.float64)
    fn(w=w, x=x).backward()
    torch.testing.assert_close(x.grad, w)


def test_second_order_matches_torch_autograd():
    """torch.autograd.grad(create_graph=True) then a second grad, through our VJP program's own backward pass."""
    fn = sd.to_torch(sd.differentiable_program(_two_outputs), device="numpy")
    a, b, idx = _inputs()
    ct = torch.tensor(np.random.default_rng(5).standard_normal(6))
    results = []
    for f in (fn, _torch_two_outputs):
        ga, gb = torch.autograd.grad(_objective(f(a, b, idx), ct), (a, b), create_graph=True)
        results.append(torch.autograd.grad((ga * gb).sum() + (ga ** 2).sum(), (a, b)))
    for g, w in zip(*results):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)


def test_autograd_function_fallback_matches(monkeypatch):
    """Where torch has no custom_op (< 2.4) an autograd.Function carries the same formula."""
    monkeypatch.setattr(torch_bridge, "_custom_ops_available", lambda: False)
    fn = sd.to_torch(sd.differentiable_program(_two_outputs), device="numpy")
    a, b, idx = _inputs()
    ga, gb = torch.autograd.grad(fn(a, b, idx)[0], (a, b), create_graph=True)
    ra, rb = torch.autograd.grad(_torch_two_outputs(a, b, idx)[0], (a, b), create_graph=True)
    torch.testing.assert_close(ga, ra)
    torch.testing.assert_close(torch.autograd.grad(gb.sum(), a)[0], torch.autograd.grad(rb.sum(), a)[0])


def test_torch_compile_matches_eager():
    fn = sd.to_torch(sd.differentiable_program(_two_outputs), device="numpy")
    a, b, idx = _inputs()

    def loss(a, b):
        s, v = fn(a, b, idx)
        return s * torch.cos(v).sum()

    compiled = torch.compile(loss, backend="aot_eager", fullgraph=True)
    got = torch.autograd.grad(compiled(a, b), (a, b))
    want = torch.autograd.grad(loss(a, b), (a, b))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)


def test_unknown_wrt_is_refused():
    with pytest.raises(sd.ProgramError, match="wrt='z' is not an argument"):
        sd.to_torch(sd.differentiable_program(_two_outputs), wrt=["z"])


@sd.differentiable_program
def _mlp(x: sd.f32[8, 5], w: sd.f32[5, 4], b: sd.f32[4]):
    return np.mean(np.tanh(x @ w + b) ** 2)


def test_cpu_device_reads_tensors_in_place_and_returns_views_of_its_buffers(monkeypatch):
    """On slangpy's CPU device: the upload reads the tensor's own memory, and
    the result tensor is a view of the buffer the kernels wrote (DLPack)."""
    from symdiff import lowering
    import symdiff.lowering.dlpack
    from symdiff import lowering
    import symdiff.lowering.runtime
    read, exported = {}, []
    host_argument, export = lowering.runtime.host_argument, lowering.dlpack.export

    def record_read(name, value, dtype):
        read[name] = value.ctypes.data
        return host_argument(name, value, dtype)

    def record_export(array, **kwargs):
        exported.append(array.buffer.device_address)
        return export(array, **kwargs)

    monkeypatch.setattr(lowering.runtime, "host_argument", record_read)
    monkeypatch.setattr(lowering.dlpack, "export", record_export)
    rng = np.random.default_rng(0)
    x, w, b = (torch.tensor(rng.standard_normal(s), dtype=torch.float32) for s in ((8, 5), (5, 4), (4,)))
    w.requires_grad_()
    loss = sd.to_torch(_mlp, device="cpu")(x, w, b)
    assert read == {"x": x.data_ptr(), "w": w.data_ptr(), "b": b.data_ptr()}
    assert exported == [loss.data_ptr()]
    loss.backward()
    w64 = w.detach().double().requires_grad_()
    ref = torch.tanh(x.double() @ w64 + b.double()).pow(2).mean()
    torch.testing.assert_close(loss.double(), ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(w.grad.double(), torch.autograd.grad(ref, w64)[0], rtol=1e-4, atol=1e-6)


def test_results_survive_later_calls_on_the_cpu_device():
    """A result tensor holds its buffer: a later call writes into another one."""
    fn = sd.to_torch(_mlp, device="cpu")
    ones = [torch.ones(s) for s in ((8, 5), (5, 4), (4,))]
    first = fn(*ones)
    kept = first.clone()
    for _ in range(3):
        fn(*(2 * t for t in ones))
    torch.testing.assert_close(first, kept)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("device", ["numpy", "cpu"])
def test_sixteen_bit_tensors_in_and_out(dtype, device):
    """float16 and bfloat16 tensors reach the program as they are stored, and come back
    in their dtype: outputs and gradients are torch's float32 ones rounded once."""
    half = getattr(torch, dtype)
    rng = np.random.default_rng(5)
    a, b = (torch.tensor(rng.standard_normal(6), dtype=half, requires_grad=True) for _ in range(2))
    idx = torch.tensor([0, 2, 2, 5], dtype=torch.int32)
    fn = sd.to_torch(sd.differentiable_program(_two_outputs), device=device)
    outs = fn(a, b, idx)
    ct = torch.tensor(rng.standard_normal(6), dtype=half)
    got = torch.autograd.grad(_objective(outs, ct), (a, b))
    wide = [t.detach().double().requires_grad_() for t in (a, b)]
    ref = _torch_two_outputs(*wide, idx)
    want = torch.autograd.grad(_objective(ref, ct.double()), wide)
    for g, w in [*zip(outs, ref), *zip(got, want)]:
        assert g.dtype == half
        # the float32 program's value rounded once (the objective's own 16-bit arithmetic on top for the grads)
        torch.testing.assert_close(g.double(), w.detach(), rtol=2 * torch.finfo(half).eps, atol=1e-6)
