"""Every bad program raises its own error naming this file, the line and the op.

Each bad function's first body line is the offending one.
"""
from __future__ import annotations

import numpy as np
import pytest

from symdiff import ir
from symdiff.ir.specs import f32, i32
from symdiff.ir.tracer import (MissingSpecError, ScalarConversionError, ShapeMismatchError, TracedBranchError,
                       TraceIndexError, UnsupportedAttributeError, UnsupportedOperationError, UntracedWriteError)

UNTRACED = np.zeros(4, dtype=np.float32)


def branch(x):
    if x.sum() > 0:
        return x
    return -x


def float_of(x):
    return x * float(x.sum())


def unsupported_fn(x):
    return np.convolve(x, x)


def unsupported_ufunc_method(x):
    return np.add.reduce(x)


def shape_mismatch(x, y):
    return x + y


def matmul_mismatch(x, y):
    return x @ y


def index_out_of_range(x):
    return x[4]


def too_many_indices(x):
    return x[0, 1]


def store_scalar_untraced(x):
    UNTRACED[0] = x[0]
    return x


def store_slice_untraced(x):
    UNTRACED[:] = x
    return x


def mix_with_untraced_in_map(x):
    for i in ir.map[0:4]: UNTRACED[i] = x[i]  # noqa: E701 (the failing line must be the first)
    return x


def bad_reshape(x):
    return x.reshape(3, 3)


def bad_broadcast_store(x, y):
    x[1:] = y
    return x


def plain_write_race(x):
    for i, j in ir.map[0:4, 0:2]: x[i] = x[i] * j  # noqa: E701
    return x


def data_dependent_where(x):
    return np.where(x > 0)


def boolean_mask(x):
    return x[x > 0]


def write_broadcast_view(x):
    np.broadcast_to(x, (2, 4))[0, 0] = 1.0
    return x


def return_dict(x):
    return {"y": x * 2}


def return_none(x):
    return None


def tolist(x):
    return x.tolist()


def missing_method(x):
    return x.searchsorted(0.5)


def max_of_nothing(x):
    return np.max(x[:0])


def slice_bound_from_array(x, rows):
    return np.sum(x[rows[0]:rows[1]])  # a CSR row: the range is data


def slice_bound_in_map(x, rows):
    for i in ir.map[0:2]: x[i] = np.sum(x[rows[i]:4])  # noqa: E701
    return x


def scattered_write_through_reshape(x):
    x.reshape(2, 6)[:, 1:5:2] = -1.0
    return x


RESHAPED = "writing through a reshaped view of x is not supported; reshape a copy (x.reshape(...).copy())"

BAD = [
    (branch, [f32[4]], TracedBranchError, "np.where"),
    (float_of, [f32[4]], ScalarConversionError, "float()"),
    (unsupported_fn, [f32[4]], UnsupportedOperationError, "convolve"),
    (unsupported_ufunc_method, [f32[4]], UnsupportedOperationError, "add.reduce"),
    (shape_mismatch, [f32[4], f32[3]], ShapeMismatchError, "(4,) and (3,)"),
    (matmul_mismatch, [f32[2, 3], f32[4, 5]], ShapeMismatchError, "(2, 3) and (4, 5)"),
    (index_out_of_range, [f32[4]], TraceIndexError, "index 4 is out of range"),
    (too_many_indices, [f32[4]], TraceIndexError, "too many indices"),
    (store_scalar_untraced, [f32[4]], UntracedWriteError, "tracer cannot see"),
    (store_slice_untraced, [f32[4]], UntracedWriteError, "tracer cannot see"),
    (mix_with_untraced_in_map, [f32[4]], UntracedWriteError, "tracer cannot see"),
    (bad_reshape, [f32[4]], ShapeMismatchError, "(4,)"),
    (bad_broadcast_store, [f32[4], f32[2]], ShapeMismatchError, "(2,)"),
    (plain_write_race, [f32[4]], UnsupportedOperationError, "+="),
    (data_dependent_where, [f32[4]], UnsupportedOperationError, "numpy.where"),
    (boolean_mask, [f32[4]], UnsupportedOperationError, "data-dependent shape"),
    (write_broadcast_view, [f32[4]], UnsupportedOperationError, "read-only"),
    (return_dict, [f32[4]], UnsupportedOperationError, "a dict cannot be returned; return a tuple"),
    (return_none, [f32[4]], UnsupportedOperationError, "returned None"),
    (tolist, [f32[4]], UnsupportedAttributeError, "'tolist' (a traced array has no Python value"),
    (missing_method, [f32[4]], UnsupportedAttributeError, "no attribute 'searchsorted'"),
    (max_of_nothing, [f32[4]], UnsupportedOperationError, "zero-size array to reduction operation max"),
    (slice_bound_from_array, [f32[6], i32[3]], UnsupportedOperationError, "slice bounds must be Python ints"),
    (slice_bound_in_map, [f32[6], i32[3]], UnsupportedOperationError, "data-dependent shape"),
    (scattered_write_through_reshape, [f32[3, 4]], UnsupportedOperationError, RESHAPED),
]


@pytest.mark.parametrize("fn, specs, error, text", BAD, ids=[b[0].__name__ for b in BAD])
def test_error_names_line_and_op(fn, specs, error, text):
    with pytest.raises(error) as info:
        ir.trace(fn, *specs)
    message = str(info.value)
    assert f"test_trace_errors.py:{fn.__code__.co_firstlineno + 1}" in message, message
    assert text in message, message


def test_missing_spec_names_the_parameter():
    def f(x, y: f32[3]):
        return x + y
    with pytest.raises(MissingSpecError, match="parameter 'x' has no spec"):
        ir.trace(f)
    assert ir.trace(f, f32[3]).arguments == ["x", "y"]
    assert ir.trace(f, x=f32[3]).arguments == ["x", "y"]


def test_map_value_used_after_its_loop():
    def f(x):
        out = np.zeros(4, dtype=np.float32)
        for i in ir.map[0:4]:
            v = x[i]
        out[0] = v
        return out
    with pytest.raises(ir.TraceError, match="after that loop ended"):
        ir.trace(f, f32[4])


def test_map_outside_trace():
    with pytest.raises(ir.TraceError, match="only usable inside a program being traced"):
        for _ in ir.map[0:3]:
            pass


def test_map_index_is_not_an_int():
    def f(x):
        out = np.zeros(3, dtype=np.float32)
        for i in ir.map[0:3]:
            for _ in range(i):
                out[i] = x[i]
        return out
    with pytest.raises(ScalarConversionError, match="loop index is symbolic"):
        ir.trace(f, f32[3])


def test_return_without_return_statement_names_the_def_line():
    def no_return(x):
        x * 2
    with pytest.raises(UnsupportedOperationError, match="returned None") as info:
        ir.trace(no_return, f32[4])
    assert f"test_trace_errors.py:{no_return.__code__.co_firstlineno}:" in str(info.value)


def test_return_error_in_a_tuple_names_the_return_line():
    def several(x):
        y = x * 2
        return y, {"z": y}
    with pytest.raises(UnsupportedOperationError, match="a dict cannot be returned") as info:
        ir.trace(several, f32[4])
    assert f"test_trace_errors.py:{several.__code__.co_firstlineno + 2}:" in str(info.value)


def test_missing_attributes_keep_hasattr_working():
    def probe(x):
        assert not hasattr(x, "tolist") and getattr(x, "searchsorted", None) is None
        assert not hasattr(x, "__array_interface__")
        return x * 1
    ir.trace(probe, f32[4])


def test_mean_of_an_empty_slice_warns_at_the_users_line():
    def empty_mean(x):
        return np.mean(x[:0])
    with pytest.warns(RuntimeWarning, match="mean of an empty slice is nan") as record:
        graph = ir.trace(empty_mean, f32[4])
    assert record[0].filename == __file__ and record[0].lineno == empty_mean.__code__.co_firstlineno + 1
    assert np.isnan(ir.run(graph, {"x": np.ones(4, np.float32)})["out"])


def test_map_stencil_past_the_end_is_refused_at_its_line():
    """``a[i + 1]`` at the last ``i`` of a static range: refused while tracing
    (the Slang devices read 0 or garbage there, silently)."""
    def stencil(a):
        out = np.zeros_like(a)
        for i in ir.map[0:8]:
            out[i] = a[i] + a[i + 1]
        return out

    with pytest.raises(TraceIndexError) as info:
        ir.trace(stencil, f32[8])
    message = str(info.value)
    assert f"test_trace_errors.py:{stencil.__code__.co_firstlineno + 3}" in message, message
    assert "reaches 8, outside axis 0 of 'a' (extent 8)" in message, message
