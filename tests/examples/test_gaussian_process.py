"""examples/gaussian_process.py: its likelihood and gradient agree with JAX's
(float64, jax.scipy.linalg.solve_triangular), and gradient descent fits the
noise level the data was made with."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))
import gaussian_process as gp  # noqa: E402


def jax_nll(log_params, x, y):
    from jax.scipy.linalg import solve_triangular
    lengthscale, signal, noise = jnp.exp(log_params)
    d = x[:, None] - x[None, :]
    k = signal ** 2 * jnp.exp(-0.5 * d ** 2 / lengthscale ** 2) + noise ** 2 * jnp.eye(x.shape[0])
    low = jnp.linalg.cholesky(k)
    alpha = solve_triangular(low.T, solve_triangular(low, y, lower=True), lower=False)
    return 0.5 * jnp.sum(y * alpha) + jnp.sum(jnp.log(jnp.diag(low))) + 0.5 * x.shape[0] * jnp.log(2 * jnp.pi)


def devices():
    from symdiff import lowering
    return ["numpy"] + [d for d in ("cpu",) if d in lowering.available_devices()]


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("log_params", [[0.0, 0.0, np.log(0.5)], [-0.5, 0.3, -2.0]])
def test_likelihood_and_gradient_match_jax(device, log_params):
    x, y = gp.data(25)
    p = np.array(log_params)
    value, grads = gp.negative_log_likelihood.value_and_grad(p, x, y, wrt=["log_params"], device=device)
    want, want_grad = jax.value_and_grad(jax_nll)(jnp.asarray(p), jnp.asarray(x), jnp.asarray(y))
    np.testing.assert_allclose(value, float(want), rtol=1e-9)
    np.testing.assert_allclose(grads["log_params"], np.asarray(want_grad), rtol=1e-8, atol=1e-10)


def test_gradient_descent_fits_the_noise():
    x, y = gp.data()
    log_params, losses = gp.fit(x, y, steps=60, device="numpy")
    assert losses[-1] < losses[0] - 30
    assert 0.07 < np.exp(log_params[2]) < 0.15     # the data's noise is 0.1


def test_example_runs_as_written():
    done = subprocess.run([sys.executable, str(EXAMPLES / "gaussian_process.py"), "20"], capture_output=True,
                          text=True, timeout=600, env={**os.environ, "SYMDIFF_DEVICE": "numpy"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "negative log likelihood" in done.stdout
