"""matmul_precision (lowering.kernels.precision): per program, global and per
block as JAX's setting, a program's own winning; it reaches the graph a
program compiles (so its plans and caches are per precision), and "tf32"
still computes exact float32 where no tensor-core form applies."""
# (no ``from __future__ import annotations``: the programs' shape annotations close over local sizes)
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import symdiff as sd
from symdiff import lowering
from symdiff.lowering.kernels import precision

jax.config.update("jax_enable_x64", True)


def product_program(**options):
    def f(x: sd.f32[5, 3], y: sd.f32[3, 4]):
        return np.sum(np.tanh(x @ y))
    return sd.differentiable_program(f, **options)


def compiled_precisions(prog) -> set:
    """The precisions of the graphs the program's calls compiled."""
    return {precision.of(exe.graph) for exe in prog._executables.values()}


ARGS = [np.random.default_rng(0).standard_normal(s).astype(np.float32) for s in ((5, 3), (3, 4))]


@pytest.fixture
def global_precision():
    yield
    sd.set_matmul_precision("highest")


def test_per_program_global_and_block_settings(global_precision):
    def ran(prog):
        prog.value_and_grad(*ARGS, device="numpy")
        return compiled_precisions(prog)
    assert ran(product_program()) == {"highest"}
    assert ran(product_program(matmul_precision="tf32")) == {"tf32"}
    with sd.default_matmul_precision("tf32"):
        assert ran(product_program()) == {"tf32"}
        assert ran(product_program(matmul_precision="highest")) == {"highest"}
    assert ran(product_program()) == {"highest"}
    gradients = product_program(matmul_precision="tf32").grad_program()  # a derived program keeps it
    gradients(*ARGS, device="numpy")
    assert compiled_precisions(gradients) == {"tf32"}
    sd.set_matmul_precision("tf32")
    assert ran(product_program()) == {"tf32"}
    # a program set to one follows no change of the global
    assert ran(product_program(matmul_precision="highest")) == {"highest"}


@pytest.mark.parametrize("call", [lambda: product_program(matmul_precision="fp32"),
                                  lambda: sd.set_matmul_precision("TF32"),
                                  lambda: sd.default_matmul_precision("bf16").__enter__()])
def test_a_precision_not_offered_is_refused_with_what_to_write(call):
    with pytest.raises(ValueError, match=r'is not one of \['):
        call()


@pytest.mark.vulkan
def test_tf32_without_a_tensor_core_form_is_exact_float32():
    if "vulkan" not in lowering.available_devices():
        pytest.skip("no vulkan device here")
    prog = product_program(matmul_precision="tf32")
    value, grads = prog.value_and_grad(*ARGS, device="vulkan")
    assert compiled_precisions(prog) == {"tf32"}
    ref_value, ref_grads = jax.jit(jax.value_and_grad(lambda x, y: jnp.sum(jnp.tanh(x @ y)), argnums=(0, 1)))(
        *[jnp.asarray(a, dtype=jnp.float64) for a in ARGS])
    assert abs(value - float(ref_value)) <= 1e-6 * max(1.0, abs(float(ref_value)))
    for name, ref in zip("xy", ref_grads):
        np.testing.assert_allclose(grads[name], np.asarray(ref), rtol=0, atol=1e-6)  # far below TF32's 1e-3
