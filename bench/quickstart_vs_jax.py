"""The quickstart MLP's value_and_grad against JAX's jit(value_and_grad), growing the
batch until JAX takes at least 10 ms (issue "Lowering": where the time goes at a
size that is not all overhead).

    python -m bench.quickstart_vs_jax [--batches 1024 16384 65536]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

import symdiff as sd
from bench.timing import measure

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import quickstart  # noqa: E402  (the README's main job, measured as users run it)


def jax_loss(jnp, x, w1, b1, w2, y):
    """quickstart.mlp_loss written for jax.numpy (the quickstart body calls numpy)."""
    h = jnp.tanh(x @ w1 + b1)
    logits = h @ w2
    shifted = logits - jnp.max(logits, axis=1, keepdims=True)
    log_p = shifted - jnp.log(jnp.sum(jnp.exp(shifted), axis=1, keepdims=True))
    return -jnp.mean(jnp.sum(y * log_p, axis=1))


def jax_runner(args: dict[str, np.ndarray]):
    import jax
    import jax.numpy as jnp
    vg = jax.jit(jax.value_and_grad(lambda *a: jax_loss(jnp, *a), argnums=(1, 2, 3)))
    xs = [jnp.asarray(a) for a in args.values()]

    def call():
        return jax.block_until_ready(vg(*xs))
    return call


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, nargs="+", default=[1024, 16384, 65536])
    o = ap.parse_args()
    devices = [d for d in sd.available_devices() if d != "numpy"]
    print(f"{'batch':>7} {'JAX ms':>8} " + " ".join(f"{d + ' ms':>11} {'x' + d:>9} {'kernels':>7}" for d in devices))
    for batch in o.batches:
        args = quickstart.data(batch, np.random.default_rng(0))
        jax_t, _ = measure(jax_runner(args), budget=2.0, k_max=20, limit=120)
        row = f"{batch:>7} {jax_t.min * 1e3:>8.2f} "
        for dev in devices:
            on_dev = {k: sd.asarray(v, device=dev) for k, v in args.items()}
            t, _ = measure(lambda: float(np.asarray(quickstart.mlp_loss.value_and_grad(
                *on_dev.values(), wrt=quickstart.WRT, device=dev, device_arrays=True)[0])),
                budget=2.0, k_max=20, limit=120)
            kernels = max(s["kernels"] for s in quickstart.mlp_loss.stats().values() if s["device"] == dev)
            row += f"{t.min * 1e3:>11.2f} {t.min / jax_t.min:>9.2f} {kernels:>7} "
        print(row, flush=True)


if __name__ == "__main__":
    main()
