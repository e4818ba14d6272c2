"""Stores through index arrays (issue 31): ``x[idx] = v``, ``x[idx] += v``
(numpy's buffered semantics: of repeated positions the last wins, so ``+=``
adds once) and ``np.put_along_axis``, value and VJP against JAX's
``x.at[idx].set`` in float64 (whose gradient also goes to the winning
duplicate only), on the numpy device and a sample on the Slang devices."""
import numpy as np
import pytest

from numpy_oracle import SLANG_DEVICES, arrays, check, need

X, Y = arrays((5, 4), (3, 4), seed=41)
V = arrays((6,), seed=42)[0]
I = np.array([3, 0, 4], dtype=np.int32)
J = np.array([1, 1, 3, 1], dtype=np.int32)     # position 1 three times: the last occurrence wins


def stores(xp, x, y, v, i, j):
    """Rows, a column of repeated positions, an index array after a slice, a scalar value."""
    a, b, c = x * 1.0, x * 2.0, x * 3.0
    a[i] = y
    b[j, 2] = v[:4]
    c[1:, i[:2]] = 0.5
    return a, b, c


def jax_stores(xp, x, y, v, i, j):
    return x.at[i].set(y), (x * 2.0).at[j, 2].set(v[:4]), (x * 3.0).at[1:, i[:2]].set(0.5)


def updates(xp, x, v, j):
    """``+=`` through index arrays is a gather, an add and a store: repeated positions add once."""
    z = x * 1.0
    z[j] += v[:4]
    z[0, j] *= v[2:]
    return z


def jax_updates(xp, x, v, j):
    z = x.at[j].set(x[j] + v[:4])
    return z.at[0, j].set(z[0, j] * v[2:])


def put_along(xp, x, y):
    z = x[:3, :3] * 1.0
    xp.put_along_axis(z, xp.argsort(y[:, :3], axis=0), y[:, :3] ** 2, 0)
    w = x[0] * 1.0
    xp.put_along_axis(w, np.array([3, 1, 3], dtype=np.int32), y[0, :3], None)
    return z, w


def jax_put_along(xp, x, y):
    return (xp.put_along_axis(x[:3, :3], xp.argsort(y[:, :3], axis=0), y[:, :3] ** 2, 0, inplace=False),
            xp.put_along_axis(x[0], np.array([3, 1, 3]), y[0, :3], None, inplace=False))


def test_stores_through_index_arrays():
    """All three forms in one program (each program costs JAX compiles)."""
    check(lambda xp, x, y, v, i, j: stores(xp, x, y, v, i, j) + (updates(xp, x, v, j),) + put_along(xp, x, y),
          X, Y, V, I, J,
          jax_body=lambda xp, x, y, v, i, j: (jax_stores(xp, x, y, v, i, j) + (jax_updates(xp, x, v, j),)
                                              + jax_put_along(xp, x, y)))


@pytest.mark.parametrize("device", SLANG_DEVICES)
def test_stores_on_slang_devices(device):
    need(device)
    check(updates, X, V, J, device=device, jax_body=jax_updates)
