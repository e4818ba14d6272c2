"""``sd.map`` writes and reads through the interpreter, against numpy written
independently: plain writes must be provably one element per iteration
(otherwise the trace is refused), and views read at shifted indices must read
the right elements (exact integer index arithmetic)."""
import numpy as np
import pytest

from symdiff import ir
from symdiff.ir.specs import f32
from symdiff.ir.tracer import UnsupportedOperationError

rng = np.random.default_rng(0)


def reshaped_sum_of_squares(a):
    t = (a * 1.0).reshape(-1)
    s = np.zeros(1, dtype=np.float32)
    for i in ir.map[1:9]:
        s[0] += t[i - 1] * t[i - 1]
    return s[0]


def reshaped_shift(a):
    t = (a * 1.0).reshape(-1)
    out = np.zeros(75, dtype=np.float32)
    for i in ir.map[2:75]:
        out[i] = t[i - 2]
    return out


def test_reshaped_view_read_at_negative_offset():
    """Regression: floor(i/3 - 1/3) was evaluated in floats (1.9999999999999998 at i = 7)."""
    a = np.arange(1, 10, dtype=np.float32).reshape(3, 3)
    out = ir.run(ir.trace(reshaped_sum_of_squares, f32[3, 3]), {"a": a}, float_dtype="float64")
    assert float(out["out"]) == float(np.sum(a.reshape(-1)[:8].astype(np.float64) ** 2))  # 204


def test_reshaped_view_shifted_copy():
    a = rng.standard_normal((5, 3, 5)).astype(np.float32)
    out = ir.run(ir.trace(reshaped_shift, f32[5, 3, 5]), {"a": a})["out"]
    expected = np.zeros(75, dtype=np.float32)
    expected[2:] = a.reshape(-1)[:73]
    np.testing.assert_array_equal(out, expected)


def halves(a):
    out = np.zeros(4, dtype=np.float32)
    for i in ir.map[0:8]: out[i // 2] = a[i]  # noqa: E701 (the failing line must be the first)
    return out


def constant_target(a):
    out = np.zeros(4, dtype=np.float32)
    for i in ir.map[0:8]: out[0] = a[i]  # noqa: E701
    return out


def outer_loop_unused_by_index(a):
    out = np.zeros(4, dtype=np.float32)
    for i, j in ir.map[0:4, 0:2]: out[i] = a[i] * j  # noqa: E701
    return out


def colliding_linear(a):
    out = np.zeros(16, dtype=np.float32)
    for i, j in ir.map[0:4, 0:4]: out[i + 3 * j] = a[i] + j  # noqa: E701
    return out


def product_into_one_element(a):
    s = np.ones(1, dtype=np.float32)
    for i in ir.map[0:8]: s[0] *= a[i]  # noqa: E701
    return s


def scatter_plain(a, idx):
    out = np.zeros(8, dtype=np.float32)
    for i in ir.map[0:8]: out[idx[i]] = a[i]  # noqa: E701
    return out


@pytest.mark.parametrize("fn, specs", [
    (halves, [f32[8]]), (constant_target, [f32[8]]), (outer_loop_unused_by_index, [f32[4]]),
    (colliding_linear, [f32[4]]), (product_into_one_element, [f32[8]]),
    (scatter_plain, [f32[8], ir.specs.i32[8]]),
], ids=lambda v: getattr(v, "__name__", ""))
def test_plain_write_that_may_collide_is_refused(fn, specs):
    line = fn.__code__.co_firstlineno + 2
    with pytest.raises(UnsupportedOperationError) as err:
        ir.trace(fn, *specs)
    message = str(err.value)
    assert f"test_trace_map_writes.py:{line}" in message and "+=" in message, message


def _strided(a):
    out = np.zeros(16, dtype=np.float32)
    out[::2] = a
    return out


def strided(a):
    out = np.zeros(16, dtype=np.float32)
    for i in ir.map[0:8]: out[2 * i] = a[i]  # noqa: E701
    return out


def reversed_copy(a):
    out = np.zeros(8, dtype=np.float32)
    for i in ir.map[0:8]: out[7 - i] = a[i]  # noqa: E701
    return out


def flattened(a):
    out = np.zeros(12, dtype=np.float32)
    for i, j in ir.map[0:3, 0:4]: out[i * 4 + j] = a[i, j] * 2  # noqa: E701
    return out


def into_reshaped_view(a):
    out = np.zeros((3, 4), dtype=np.float32)
    flat = out.reshape(-1)
    for i in ir.map[0:12]: flat[i] = a[i] + 1  # noqa: E701
    return out


def same_value_every_iteration(a):
    out = np.zeros(4, dtype=np.float32)
    for i, j in ir.map[0:4, 0:3]: out[i] = a[i]  # noqa: E701 (j unused: every j writes the same value)
    return out


@pytest.mark.parametrize("fn, shape, expected", [
    (strided, (8,), _strided),
    (reversed_copy, (8,), lambda a: a[::-1]),
    (flattened, (3, 4), lambda a: (a * 2).reshape(-1)),
    (into_reshaped_view, (12,), lambda a: (a + 1).reshape(3, 4)),
    (same_value_every_iteration, (4,), lambda a: a),
], ids=lambda v: getattr(v, "__name__", ""))
def test_provably_injective_plain_write_is_accepted(fn, shape, expected):
    a = rng.standard_normal(shape).astype(np.float32)
    out = ir.run(ir.trace(fn, f32[shape]), {"a": a})["out"]
    np.testing.assert_allclose(out, expected(a), rtol=1e-6)
