"""Quickstart: a two-layer MLP with softmax cross-entropy, forward + backward on Slang.

Run:  python examples/quickstart.py          (SYMDIFF_DEVICE=cpu|vulkan|numpy to choose)
"""
import time

import numpy as np

import symdiff as sd

BATCH, IN, HIDDEN, CLASSES = 256, 64, 64, 10


@sd.differentiable_program
def mlp_loss(x: sd.f32[BATCH, IN], w1: sd.f32[IN, HIDDEN], b1: sd.f32[HIDDEN],
             w2: sd.f32[HIDDEN, CLASSES], y: sd.f32[BATCH, CLASSES]):
    h = np.tanh(x @ w1 + b1)
    logits = h @ w2
    shifted = logits - np.max(logits, axis=1, keepdims=True)
    log_p = shifted - np.log(np.sum(np.exp(shifted), axis=1, keepdims=True))
    return -np.mean(np.sum(y * log_p, axis=1))


def main() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, IN)).astype(np.float32)
    w1 = (rng.standard_normal((IN, HIDDEN)) / np.sqrt(IN)).astype(np.float32)
    b1 = np.zeros(HIDDEN, np.float32)
    w2 = (rng.standard_normal((HIDDEN, CLASSES)) / np.sqrt(HIDDEN)).astype(np.float32)
    y = np.eye(CLASSES, dtype=np.float32)[rng.integers(0, CLASSES, BATCH)]

    t0 = time.perf_counter()
    loss, grads = mlp_loss.value_and_grad(x, w1, b1, w2, y, wrt=["w1", "b1", "w2"])
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    loss, grads = mlp_loss.value_and_grad(x, w1, b1, w2, y, wrt=["w1", "b1", "w2"])
    warm = time.perf_counter() - t0

    stats = next(iter(mlp_loss.stats().values()))
    print(f"device:                 {stats['device']}")
    print(f"loss:                   {float(loss):.6f}")
    print(f"kernels:                {stats['kernels']}")
    print(f"first call (trace+differentiate+compile+run): {first * 1e3:.1f} ms "
          f"(compile {stats['compile_seconds'] * 1e3:.1f} ms)")
    print(f"second call (run only): {warm * 1e3:.2f} ms")
    for name, g in grads.items():
        print(f"grad {name:<3} shape={g.shape} |g|={np.linalg.norm(g):.5f}")

    small = {k: v[:8] if k in ("x", "y") else v for k, v in dict(x=x, w1=w1, b1=b1, w2=w2, y=y).items()}
    report = sd.gradcheck(mlp_loss.function, *small.values(), wrt=["w1", "b1", "w2"])
    print(f"gradcheck vs float64 central differences (batch 8): max error {report.max_error:.2e} -> ok")


if __name__ == "__main__":
    main()
