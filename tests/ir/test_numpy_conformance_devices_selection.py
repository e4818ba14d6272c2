"""A small sample of the selections, masks, indexing and traced-scalar forms
(issue 31) on the Slang devices (cpu and lavapipe), value and VJP against
jax.numpy float64: one program per group, each combining several functions
(every program compiles kernels, about a second each)."""
import numpy as np
import pytest

from numpy_oracle import SLANG_DEVICES, arrays, check, need

X, Y = arrays((3, 4), (3, 4), seed=31)
XN = X.copy()
XN[1, 2] = np.nan
I = np.array([2, 0, 1, 1], dtype=np.int32)


def selections(xp, x, y):
    best = xp.take_along_axis(y, xp.argmax(x, axis=1)[:, None], 1)[:, 0] + y[0][xp.argmin(x[0])]
    masked = xp.sum(x, axis=0, where=y > 0) + xp.max(y, axis=0, where=x < 1, initial=-3.0) + xp.nansum(x, axis=0)
    return best.sum() + masked + xp.average(x, axis=0, weights=xp.abs(y[:, 0])) + xp.cov(x)[0, :3].sum()


def masks_and_indexing(xp, x, y, i):
    if xp is np:
        z = x * 1.0
        z[y > 0] = 0.5
        total = xp.sum(x[y < 0]) + z
    else:
        total = xp.sum(x, where=y < 0) + xp.where(y > 0, 0.5, x)
    return total[:, i][1:, :3] + x[1, :, None][i[:3], 0] + xp.linspace(x[0, 0], y[0, 0], 3)


SAMPLES = {"selections": (selections, XN, Y), "masks_and_indexing": (masks_and_indexing, X, Y, I)}


@pytest.mark.parametrize("device", SLANG_DEVICES)
@pytest.mark.parametrize("name", list(SAMPLES))
def test_sample_on_slang_devices(name, device):
    need(device)
    body, *inputs = SAMPLES[name]
    check(body, *inputs, device=device)
