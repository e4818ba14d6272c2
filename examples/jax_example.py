"""The quickstart MLP inside JAX: `jax.jit(jax.value_and_grad(...))` over `sd.to_jax(mlp_loss)`.

JAX traces, jits and differentiates the program like any JAX function; each
call runs symdiff's generated forward and backward kernels as host callbacks
(the CPU device by default).  The gradients are checked against JAX's own
autodiff of the same model in jax.numpy (float64), then a few plain
gradient-descent steps run under `jit`.

Run:  python examples/jax_example.py [--steps 100]   (SYMDIFF_DEVICE=cpu|vulkan|numpy to choose)
"""
import argparse

import jax
import jax.numpy as jnp
import numpy as np

import symdiff as sd
from quickstart import CLASSES, IN, data, mlp_loss

jax.config.update("jax_enable_x64", True)  # for the float64 reference; the program itself stays float32
PARAMETERS = ("w1", "b1", "w2")


def jax_loss(x, w1, b1, w2, y):
    """The same loss in jax.numpy, for checking symdiff's gradients."""
    log_p = jax.nn.log_softmax(jnp.tanh(x @ w1 + b1) @ w2, axis=1)
    return -jnp.mean(jnp.sum(y * log_p, axis=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    steps = parser.parse_args().steps
    rng = np.random.default_rng(0)
    teacher = rng.standard_normal((IN, CLASSES)).astype(np.float32)
    x = rng.standard_normal((256, IN)).astype(np.float32)
    y = np.eye(CLASSES, dtype=np.float32)[np.argmax(x @ teacher, axis=1)]
    params = {n: v for n, v in data(1, rng).items() if n in PARAMETERS}

    loss = sd.to_jax(mlp_loss, wrt=PARAMETERS)
    step = jax.jit(jax.value_and_grad(lambda p, x, y: loss(x, p["w1"], p["b1"], p["w2"], y)))

    _, grads = step(params, x, y)
    ref = jax.grad(lambda p: jax_loss(x.astype(np.float64), p["w1"], p["b1"], p["w2"], y.astype(np.float64)))(
        {n: v.astype(np.float64) for n, v in params.items()})
    worst = max(float(jnp.abs(grads[n] - ref[n]).max() / jnp.abs(ref[n]).max()) for n in PARAMETERS)
    print(f"gradients vs jax.grad (float64): max relative difference {worst:.1e}")

    first = None
    for _ in range(steps):
        value, grads = step(params, x, y)
        params = jax.tree.map(lambda p, g: p - 0.5 * g, params, grads)
        first = float(value) if first is None else first
    print(f"loss {first:.4f} -> {float(value):.4f} after {steps} jitted gradient steps")


if __name__ == "__main__":
    main()
