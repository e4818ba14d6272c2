"""Library nodes on the Slang devices: the program is split into compiled
pieces with the library nodes run on the host between them
(``lowering.host_steps``).  A small sample against JAX float64 per device (each
piece compiles once, about a second); the numpy device's full checks are in
test_linalg_rules.py."""
from __future__ import annotations

import numpy as np
import pytest

import symdiff as sd
from linalg_oracle import check, general, spd
from symdiff.lowering import host_steps

rng = np.random.default_rng(11)


def test_split_puts_library_nodes_between_pieces():
    def fn(a, b):
        x = np.linalg.solve(a * 2, b)                # piece 0: a * 2; host: solve
        return np.sum(np.linalg.inv(x + 1))          # piece 1: + 1; host: inv; piece 2: the sum
    graph = sd.trace(fn, sd.f64[3, 3], sd.f64[3, 3])
    steps = host_steps.split(graph)
    kinds = ["piece" if isinstance(s, host_steps.Piece) else s.op for s in steps]
    assert kinds == ["piece", "linalg.solve", "piece", "linalg.inv", "piece"]


def test_an_accumulated_gradient_waits_for_both_sides():
    # grad a gets a contribution before the solve (through a * a) and one from the solve's rule
    graph = sd.trace(lambda a, b: np.sum(np.linalg.solve(a, b) + a * a), sd.f64[2, 2], sd.f64[2, 2])
    sd.add_backward_pass(graph, ["a"], graph.results)
    levels = host_steps.levels(graph)
    grad = graph.access(graph.meta["gradients"]["a"], 0)
    assert len({levels[w] for w, _ in graph.writers(grad)}) == 1


@pytest.mark.parametrize("name", ["solve", "cholesky", "slogdet", "eigvalsh"])
def test_functions_on_slang_devices(slang_device, name):
    cases = {
        "solve": (lambda xp, a, b: xp.linalg.solve(a, b) * 2, (general(rng, 4, 4), rng.normal(size=(2, 4, 3)))),
        "cholesky": (lambda xp, a: xp.linalg.cholesky(a), (spd(rng, 2, 3, 3),)),
        "slogdet": (lambda xp, a: xp.linalg.slogdet(a)[1], (general(rng, 3, 3),)),
        "eigvalsh": (lambda xp, a: xp.linalg.eigvalsh(a + 1.0), (spd(rng, 4, 4),)),
    }
    fn, args = cases[name]
    check(fn, *args, device=slang_device, rtol=1e-9)


def test_float32_on_slang_devices(slang_device):
    a = general(rng, 5, 5).astype(np.float32)
    b = rng.normal(size=(5, 2)).astype(np.float32)
    f = sd.differentiable_program(lambda a, b: np.sum(np.tanh(np.linalg.solve(a, b))))
    value, grads = f.value_and_grad(a, b, device=slang_device)
    want, want_grads = f.value_and_grad(a.astype(np.float64), b.astype(np.float64), device="numpy")
    np.testing.assert_allclose(value, want, rtol=1e-4)
    for k in grads:
        assert grads[k].dtype == np.float32
        np.testing.assert_allclose(grads[k], want_grads[k], rtol=1e-3, atol=1e-4)


def test_second_order_on_cpu():
    if "cpu" not in sd.available_devices():
        pytest.skip("no cpu device")
    a = spd(rng, 3, 3)
    first = sd.differentiable_program(lambda a: np.sum(np.linalg.cholesky(a) ** 3)).grad_program()
    v = rng.normal(size=a.shape)
    _, on_cpu = first.vjp(a, cotangent=v, device="cpu")
    _, on_numpy = first.vjp(a, cotangent=v, device="numpy")
    np.testing.assert_allclose(on_cpu["a"], on_numpy["a"], rtol=1e-10)


def test_singular_matrix_raises_from_the_call(slang_device):
    f = sd.differentiable_program(lambda a: np.linalg.inv(a) * 2)
    with pytest.raises(np.linalg.LinAlgError):
        f(np.ones((3, 3)), device=slang_device)


def test_symbolic_sizes_bind_per_call(slang_device):
    n = sd.symbol("N")

    @sd.differentiable_program
    def f(a: sd.f64[n, n], b: sd.f64[n]):
        return np.sum(np.linalg.solve(a, b) ** 2)
    for size in (3, 4):
        a, b = general(rng, size, size), rng.normal(size=size)
        value, grads = f.value_and_grad(a, b, device=slang_device)
        want, want_grads = f.value_and_grad(a, b, device="numpy")
        np.testing.assert_allclose(value, want, rtol=1e-12)
        np.testing.assert_allclose(grads["a"], want_grads["a"], rtol=1e-10, atol=1e-14)


def test_export_and_memory_budget_refuse_library_nodes():
    a, b = general(rng, 3, 3), rng.normal(size=(3, 2))
    f = sd.differentiable_program(lambda a, b: np.sum(np.linalg.solve(a, b) ** 2))
    f(a, b, device="numpy")
    with pytest.raises(sd.ProgramError, match="no standalone Slang module"):
        f.export_slang()
    if "cpu" in sd.available_devices():
        budgeted = sd.differentiable_program(lambda a, b: np.sum(np.linalg.solve(a, b) ** 2), memory_budget=10 ** 6)
        with pytest.raises(sd.MemoryBudgetError, match="library nodes"):
            budgeted.value_and_grad(a, b, device="cpu")


def test_library_nodes_in_a_loop_body(slang_device):
    a, x = general(rng, 3, 3), rng.normal(size=(3, 1))

    @sd.differentiable_program
    def f(a: sd.f64[3, 3], x: sd.f64[3, 1]):
        return np.sum(sd.fori_loop(0, 3, lambda i, s: np.linalg.solve(a, s) + 0.1, x) ** 2)
    value, grads = f.value_and_grad(a, x, device=slang_device)
    want, want_grads = f.value_and_grad(a, x, device="numpy")
    np.testing.assert_allclose(value, want, rtol=1e-12)
    np.testing.assert_allclose(grads["a"], want_grads["a"], rtol=1e-10)


def test_device_arrays_in_and_out(slang_device):
    a, b = general(rng, 3, 3), rng.normal(size=(3, 2))
    f = sd.differentiable_program(lambda a, b: np.linalg.solve(a * 2, b))
    out = f(sd.asarray(a, device=slang_device), b, device=slang_device, device_arrays=True)
    assert isinstance(out, sd.DeviceArray)
    np.testing.assert_allclose(out.numpy(), np.linalg.solve(2 * a, b), rtol=1e-12)
