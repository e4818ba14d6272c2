"""A small sample of issue 31's numpy functions on the Slang devices (cpu and
lavapipe), value and VJP against jax.numpy float64: each program compiles
kernels (about a second each here), so one program per group, combining
several functions."""
import numpy as np
import pytest

from numpy_oracle import SLANG_DEVICES, arrays, check, need

X34, X3, B45 = arrays((3, 4), (3,), (4, 5))
D234 = arrays((2, 3, 4))[0]


def reshuffles(xp, x, v):
    shifted = xp.roll(x, 1, axis=-1) + xp.flip(x, 0) + xp.tile(v, (4, 1)).T
    padded = xp.pad(shifted, ((1, 2), (2, 1)), mode="reflect")[1:4, 2:6] + xp.pad(x, 1, mode="edge")[:3, 1:5]
    return xp.triu(padded, -1) + xp.diag(v)[:, :1] + xp.repeat(v, 4).reshape(3, 4) + xp.add.outer(v, v[:1] * 0 + 1.0)


def contractions(xp, d, b):
    attention = xp.einsum("bqd,bkd->bqk", d, d * 0.5)
    return xp.einsum("bqk,bkd,de->bqe", attention, d, b) + xp.tensordot(d, b, 1) + xp.kron(b[:1, :2], b[:2, :1])[0, 0]


def elementwise(xp, x, y):
    return (xp.logaddexp(x, y) + xp.round(x * 3.3) * x + xp.fmod(x * 3, y) + xp.sinc(x) + xp.copysign(x, y)
            + xp.linalg.norm(x, axis=1, keepdims=True) + xp.linalg.norm(y, np.inf))


SAMPLES = {"reshuffles": (reshuffles, X34, X3), "contractions": (contractions, D234, B45),
           "elementwise": (elementwise, X34, X34[::-1] * 0.7)}


@pytest.mark.parametrize("device", SLANG_DEVICES)
@pytest.mark.parametrize("name", list(SAMPLES))
def test_sample_on_slang_devices(name, device):
    need(device)
    body, *inputs = SAMPLES[name]
    if device == "vulkan" and name == "elementwise":
        # lavapipe refuses float64 exp/log/sin (it computes them wrongly): float32, at float32's precision
        check(body, *(x.astype(np.float32) for x in inputs), device=device, rtol=2e-5, atol=2e-5)
        return
    check(body, *inputs, device=device)
