"""Gaussian-process regression: fit an RBF kernel's hyperparameters by gradient
descent on the negative log marginal likelihood (Cholesky + triangular solves).

Run:  python examples/gaussian_process.py [steps]   (SYMDIFF_DEVICE=numpy|cpu|vulkan to choose)

The likelihood of targets ``y`` at inputs ``x`` under a zero-mean GP with
kernel ``K = s^2 exp(-|x_i - x_j|^2 / (2 l^2)) + noise^2 I`` is, with the
Cholesky factor ``K = L L^T`` and ``alpha = K^-1 y``,

    -log p(y) = y^T alpha / 2 + sum(log diag L) + n/2 log(2 pi).

``np.linalg.cholesky`` and ``sd.linalg.solve_triangular`` are library nodes:
their gradients are the standard Cholesky and triangular-solve rules.  The
hyperparameters are optimised in log space, so they stay positive.
"""
import sys

import numpy as np

import symdiff as sd


@sd.differentiable_program
def negative_log_likelihood(log_params: sd.f64[3], x, y):    # x, y: shapes from the first call
    lengthscale, signal, noise = np.exp(log_params[0]), np.exp(log_params[1]), np.exp(log_params[2])
    d = x[:, None] - x[None, :]
    k = signal ** 2 * np.exp(-0.5 * d ** 2 / lengthscale ** 2) + noise ** 2 * np.eye(x.shape[0])
    low = np.linalg.cholesky(k)
    z = sd.linalg.solve_triangular(low, y, lower=True)             # L^-1 y
    alpha = sd.linalg.solve_triangular(low.T, z, lower=False)      # K^-1 y
    return 0.5 * np.sum(y * alpha) + np.sum(np.log(np.diagonal(low))) + 0.5 * y.shape[0] * np.log(2 * np.pi)


def data(n: int = 40, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Noisy samples of a smooth function on [0, 5]."""
    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(0, 5, n))
    return x, np.sin(2 * x) + 0.3 * x + 0.1 * rng.standard_normal(n)


def fit(x: np.ndarray, y: np.ndarray, steps: int = 100, lr: float = 0.01,
        device: str | None = None) -> tuple[np.ndarray, list[float]]:
    """Gradient descent on the log hyperparameters; returns them and the loss per step."""
    log_params = np.log(np.array([1.0, 1.0, 0.5]))
    losses = []
    for _ in range(steps):
        loss, grads = negative_log_likelihood.value_and_grad(log_params, x, y, wrt=["log_params"], device=device)
        losses.append(float(loss))
        log_params = log_params - lr * grads["log_params"]
    return log_params, losses


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    x, y = data()
    log_params, losses = fit(x, y, steps)
    lengthscale, signal, noise = np.exp(log_params)
    print(f"negative log likelihood {losses[0]:.4f} -> {losses[-1]:.4f} in {steps} steps")
    print(f"lengthscale {lengthscale:.3f}, signal {signal:.3f}, noise {noise:.3f}")


if __name__ == "__main__":
    main()
