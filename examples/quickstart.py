"""Quickstart: a two-layer MLP with softmax cross-entropy, forward + backward on Slang.

Run:  python examples/quickstart.py          (SYMDIFF_DEVICE=cpu|vulkan|numpy to choose)
"""
import time

import numpy as np

import symdiff as sd

B = sd.symbol("B")                     # batch size, bound at call time
IN, HIDDEN, CLASSES = 32, 64, 10
WRT = ["w1", "b1", "w2"]


@sd.differentiable_program
def mlp_loss(x: sd.f32[B, IN], w1: sd.f32[IN, HIDDEN], b1: sd.f32[HIDDEN],
             w2: sd.f32[HIDDEN, CLASSES], y: sd.f32[B, CLASSES]):
    h = np.tanh(x @ w1 + b1)
    logits = h @ w2
    shifted = logits - np.max(logits, axis=1, keepdims=True)
    log_p = shifted - np.log(np.sum(np.exp(shifted), axis=1, keepdims=True))
    return -np.mean(np.sum(y * log_p, axis=1))


def data(batch: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return dict(
        x=rng.standard_normal((batch, IN)).astype(np.float32),
        w1=(rng.standard_normal((IN, HIDDEN)) / np.sqrt(IN)).astype(np.float32),
        b1=np.full(HIDDEN, 0.1, np.float32),
        w2=(rng.standard_normal((HIDDEN, CLASSES)) / np.sqrt(HIDDEN)).astype(np.float32),
        y=np.eye(CLASSES, dtype=np.float32)[rng.integers(0, CLASSES, batch)],
    )


def main() -> None:
    rng = np.random.default_rng(0)
    args = data(1024, rng)

    t0 = time.perf_counter()
    loss, grads = mlp_loss.value_and_grad(*args.values(), wrt=WRT)
    first = time.perf_counter() - t0
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        loss, grads = mlp_loss.value_and_grad(*args.values(), wrt=WRT)
        runs.append(time.perf_counter() - t0)

    stats = next(iter(mlp_loss.stats().values()))
    print(f"device:      {stats['device']}")
    print(f"loss:        {float(loss):.6f}  (batch 1024)")
    print(f"kernels:     {stats['kernels']} for forward + backward")
    print(f"first call:  {first * 1e3:.0f} ms (trace, differentiate, generate, compile "
          f"{stats['compile_time'] * 1e3:.0f} ms, run)")
    print(f"warm calls:  {min(runs) * 1e3:.2f} ms (best of 5)")
    for name, g in grads.items():
        print(f"grad {name:<3} shape={g.shape} |g|={np.linalg.norm(g):.5f}")

    # float64 central differences on the interpreter verify the gradients (batch 4 keeps it quick);
    # the device's float32 gradients at the same point must agree with them.
    small = data(4, rng)
    verified = sd.gradcheck(mlp_loss, *small.values(), wrt=WRT)
    _, on_device = mlp_loss.value_and_grad(*small.values(), wrt=WRT)
    worst = max(np.abs(on_device[n] - verified[n]).max() / max(np.abs(verified[n]).max(), 1e-12) for n in WRT)
    print(f"gradcheck:   analytic == float64 central differences; device gradients agree to {worst:.1e} "
          "(relative to the largest element)")


if __name__ == "__main__":
    main()
