"""A new device kind is one backend module and its registration
(lowering.backends.registry): modules registering kinds the rest of symdiff
has never heard of run programs through the public API, with nothing else
edited."""
import contextlib
import importlib.util
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

import symdiff as sd
from symdiff import lowering
from symdiff.lowering import backends, targets

HERE = Path(__file__).parent


@contextlib.contextmanager
def registered(module: str) -> Iterator[str]:
    """Import backend module ``module`` (a file here) for the block, and unregister its kind after."""
    spec = importlib.util.spec_from_file_location(f"fake_backends.{module}", HERE / f"{module}.py")
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    try:
        yield loaded.BACKEND.name
    finally:
        backends.unregister(loaded.BACKEND.name)


@pytest.fixture
def fake_interpreter():
    with registered("fake_interpreter") as name:
        yield name


@pytest.fixture
def fake_slangpy():
    with registered("fake_slangpy") as name:
        yield name


@sd.differentiable_program
def tanh_dot(x: sd.f32[64]):
    return np.sum(np.tanh(x) * x)


def _check_gradient(device: str, rtol: float) -> None:
    x = np.linspace(-2, 2, 64, dtype=np.float32)
    value, grads = tanh_dot.value_and_grad(x, device=device)
    t = np.tanh(x.astype(np.float64))
    np.testing.assert_allclose(value, np.sum(t * x), rtol=rtol)
    np.testing.assert_allclose(grads["x"], t + x * (1 - t * t), rtol=rtol, atol=1e-6)  # d/dx x tanh x


def test_a_registered_interpreter_runs_programs_under_its_name(fake_interpreter):
    assert fake_interpreter in lowering.available_devices()
    assert backends.resolve(fake_interpreter) == fake_interpreter
    assert backends.resolve("auto") != fake_interpreter  # auto_rank None: never picked
    _check_gradient(fake_interpreter, rtol=1e-6)
    exe = lowering.compile(tanh_dot.backward_graph(wrt=["x"]), device=fake_interpreter)
    assert exe.device == fake_interpreter and exe.source is None


def test_a_registered_slangpy_kind_generates_compiles_and_runs(fake_slangpy):
    assert targets.of(fake_slangpy) is backends.of(fake_slangpy).TARGET
    _check_gradient(fake_slangpy, rtol=1e-5)
    exe = lowering.compile(tanh_dot.backward_graph(wrt=["x"]), device=fake_slangpy)
    assert exe.device == fake_slangpy and "void" in exe.source
    array = sd.asarray(np.arange(3, dtype=np.float32), device=fake_slangpy)
    assert array.device == fake_slangpy
    np.testing.assert_array_equal(np.from_dlpack(array), np.arange(3, dtype=np.float32))  # host memory: a view


def test_an_unregistered_kind_is_unknown_again():
    with registered("fake_interpreter") as name:
        assert backends.resolve(name) == name
    with pytest.raises(ValueError, match="unknown device"):
        backends.resolve(name)
    assert name not in lowering.available_devices()
