"""Programs with library nodes split into compiled pieces and library steps
(lowering.host_steps): a version written on both sides of a library node."""
import numpy as np
import pytest

import symdiff as sd
from symdiff import lowering
from symdiff.ir.library import LibraryNode
from symdiff.lowering import host_steps


def cumprod_then_add(x: sd.f64[3, 4]):
    v = np.cumprod(x, axis=1)
    v += x[:, 3:2:-1]
    return np.sum(v * v)


def test_a_gradient_added_before_and_after_a_scan_gets_its_steps():
    """``d x`` is written by the slice's add (whose tasklet also feeds cumprod's
    reverse scan) and after that scan: the two writes share a level only once
    the add's tasklet is split, where raising it whole never stopped (fuzz
    seed 2009 hung on cpu and vulkan)."""
    graph = sd.differentiable_program(cumprod_then_add).backward_graph(wrt=["x"])
    steps = host_steps.split(graph)
    scans = [k for k, s in enumerate(steps) if isinstance(s, LibraryNode)]
    grad = graph.latest("grad_x")
    writers = [k for k, s in enumerate(steps) if isinstance(s, host_steps.Piece) and grad in s.results.values()]
    assert len(scans) == 2 and writers == [len(steps) - 1] and scans[-1] < writers[0]


@pytest.mark.skipif("cpu" not in lowering.available_devices(), reason="no CPU device")
def test_its_gradient_matches_jax():
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)
    x = np.random.default_rng(3).uniform(-1.5, 1.5, (3, 4))
    _, got = sd.differentiable_program(cumprod_then_add).value_and_grad(x, device="cpu")

    def reference(x):
        v = jnp.cumprod(x, axis=1) + x[:, 3:2:-1]
        return jnp.sum(v * v)
    np.testing.assert_allclose(got["x"], jax.jit(jax.grad(reference))(x), rtol=1e-12)


def scan_of_zeros(x: sd.f64[3], i: sd.i32[2]):
    v = np.zeros((3,))
    np.add.at(v, i, np.cumsum(v, axis=0)[i] + x[:2])
    return np.sum(v * x)


@pytest.mark.skipif("cpu" not in lowering.available_devices(), reason="no CPU device")
def test_a_scan_of_a_version_nothing_writes_reads_zeros():
    """``np.cumsum`` of ``np.zeros`` before anything adds into it: the scan's input
    is a version no step writes, which reads as zeros (fuzz seed 9111 failed
    with a KeyError on the cpu device)."""
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)
    x, i = np.array([0.5, -1.0, 2.0]), np.array([2, 0], np.int32)
    value, got = sd.differentiable_program(scan_of_zeros).value_and_grad(x, i, wrt=["x"], device="cpu")

    def reference(x):
        v = jnp.zeros(3)
        v = v.at[i].add(jnp.cumsum(v)[i] + x[:2])
        return jnp.sum(v * x)
    want_value, want = jax.jit(jax.value_and_grad(reference))(x)
    np.testing.assert_allclose(value, want_value, rtol=1e-12)
    np.testing.assert_allclose(got["x"], want, rtol=1e-12)
