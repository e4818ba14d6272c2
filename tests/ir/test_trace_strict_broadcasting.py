"""``strict_broadcasting``: implicit rank promotion is refused, written broadcasts are not."""
import numpy as np
import pytest

from symdiff import ir
import symdiff as sd
from symdiff.ir.tracer import ImplicitBroadcastError


def _line_of(fn, text: str) -> int:
    import inspect
    lines, first = inspect.getsourcelines(fn)
    return first + next(k for k, line in enumerate(lines) if text in line)


def implicit(a: sd.f32[4, 3], b: sd.f32[3]):
    return np.sum(a * b)


def test_implicit_rank_promotion_is_refused_naming_line_op_shapes_and_fix():
    with pytest.raises(ImplicitBroadcastError) as err:
        ir.trace(implicit, strict_broadcasting=True)
    msg = str(err.value)
    assert f"test_trace_strict_broadcasting.py:{_line_of(implicit, 'a * b')}" in msg
    assert "multiply" in msg and "(4, 3)" in msg and "(3,)" in msg
    assert "b[None, :]" in msg and "np.broadcast_to(b, (4, 3))" in msg   # the argument by its name


def test_default_is_numpy_broadcasting():
    a = np.arange(12, dtype=np.float32).reshape(4, 3)
    b = np.arange(3, dtype=np.float32)
    out = ir.run(ir.trace(implicit), {"a": a, "b": b})
    np.testing.assert_allclose(out["out"], np.sum(a * b))


def explicit_none(a: sd.f32[4, 3], b: sd.f32[3]):
    return np.sum(a * b[None, :])


def explicit_broadcast_to(a: sd.f32[4, 3], b: sd.f32[3]):
    return np.sum(a * np.broadcast_to(b, (4, 3)))


def keepdims_and_scalars(a: sd.f32[4, 3], s: sd.f32[()]):
    centred = a - np.mean(a, axis=1, keepdims=True)   # (4, 3) - (4, 1): equal ranks
    return np.sum(centred ** 2 * s + 2.0) / a.shape[0]


def outer_product(a: sd.f32[4], b: sd.f32[3]):
    return np.sum(np.outer(a, b))


@pytest.mark.parametrize("fn", [explicit_none, explicit_broadcast_to, keepdims_and_scalars, outer_product])
def test_written_broadcasts_and_scalars_are_accepted(fn):
    strict = ir.trace(fn, strict_broadcasting=True)
    rng = np.random.default_rng(0)
    inputs = {c: rng.standard_normal([int(d) for d in strict.containers[c].shape]).astype(np.float32)
              for c in strict.arguments}
    np.testing.assert_allclose(ir.run(strict, inputs)["out"], ir.run(ir.trace(fn), inputs)["out"], rtol=1e-6)


def test_where_and_comparisons_are_checked_too():
    def f(a: sd.f32[4, 3], b: sd.f32[3]):
        return np.sum(np.where(a > 0, a, b))

    with pytest.raises(ImplicitBroadcastError, match="where"):
        ir.trace(f, strict_broadcasting=True)


def test_program_option_and_gradient_of_the_explicit_form():
    program = sd.differentiable_program(implicit, strict_broadcasting=True)
    a = np.ones((4, 3), np.float32)
    b = np.arange(3, dtype=np.float32)
    with pytest.raises(sd.ImplicitBroadcastError):
        program(a, b)
    fixed = sd.differentiable_program(explicit_none, strict_broadcasting=True)
    grads = fixed.grad(a, b, device="numpy")
    np.testing.assert_allclose(grads["b"], a.sum(axis=0))
    np.testing.assert_allclose(grads["a"], np.broadcast_to(b, (4, 3)))
