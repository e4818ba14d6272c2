"""Trace errors speak of what the user wrote: their arrays' names (``out``,
``A``), not the containers the tracer made (``zeros``, ``multiply``), and
``sd.map`` indices in their loop variables and Python's spelling (``i // 2``),
not the tracer's symbols (``floor(_m0/2)``)."""
import re

import numpy as np
import pytest
import sympy

from symdiff import ir
from symdiff.ir.specs import f32
from symdiff.ir.tracer import ImplicitBroadcastError
from symdiff.ir.tracer.errors import (TraceIndexError, UnsupportedOperationError, in_user_names, user_expr)

INTERNAL = re.compile(r"\b_m\d|floor|Mod\(|zeros|multiply|#0")
NO_OP_NAMES = re.compile(r"\b_m\d|#0")     # where "multiply" is the numpy function the message names


def _message(fn, *specs, error=Exception, internal=INTERNAL, **options) -> str:
    with pytest.raises(error) as info:
        ir.trace(fn, *specs, **options)
    message = str(info.value)
    assert not internal.search(message), message
    return message


def test_map_plain_write_names_the_array_and_the_index_as_written():
    def halves(a):
        out = np.zeros(4, dtype=np.float32)
        for i in ir.map[0:8]:
            out[i // 2] = a[i]
        return out

    message = _message(halves, f32[8], error=UnsupportedOperationError)
    assert "plain write out[i // 2] over i in [0, 8)" in message, message


def test_map_plain_write_in_two_loop_variables():
    def folded(a):
        out = np.zeros((2, 4), dtype=np.float32)
        for r, c in ir.map[0:4, 0:4]:
            out[r % 2, c] = a[r, c]
        return out

    message = _message(folded, f32[4, 4], error=UnsupportedOperationError)
    assert "out[r % 2, c] over r in [0, 4), c in [0, 4)" in message, message


def test_out_of_range_read_names_the_array_and_index_as_written():
    def stencil(a):
        b = a * 2
        out = np.zeros_like(a)
        for i in ir.map[0:8]:
            out[i] = b[i + 1]
        return out

    message = _message(stencil, f32[8], error=TraceIndexError)
    line = stencil.__code__.co_firstlineno + 4
    assert f"test_user_names_in_messages.py:{line}: sd.map: access b[i + 1]: index i + 1 reaches 8, " \
           "outside axis 0 of 'b' (extent 8)" in message, message


def test_write_through_a_reshaped_view_names_the_users_array():
    def scattered(A):
        A = A * 2
        A.reshape(2, 6)[:, 1:5:2] = 0
        return A

    message = _message(scattered, f32[3, 4], error=UnsupportedOperationError)
    assert "writing through a reshaped view of A is not supported" in message, message
    assert "A.reshape(...).copy()" in message, message


def test_index_expressions_print_in_pythons_spelling():
    m = sympy.Symbol("_m0", integer=True)
    names = {"_m0": "i"}
    assert user_expr(sympy.floor(m / 2), names) == "i // 2"
    assert user_expr(sympy.floor(m / 2) + 1, names) == "(i // 2) + 1"
    assert user_expr(2 * sympy.floor((m + 1) / 3), names) == "2*((i + 1) // 3)"
    assert user_expr(sympy.Mod(m, 4), names) == "i % 4"
    assert user_expr(m + 1, {}) == "_m0 + 1"   # no user name: left as it is
    assert in_user_names("access zeros[_m0 - 1] on 'zeros#2': outside axis 0 of 'zeros'",
                         {"_m0": "i", "zeros": "out"}) == "access out[i - 1]: outside axis 0 of 'out'"


def test_strict_broadcasting_writes_the_fix_with_the_operands_name():
    def scale(x, bias):
        return x * bias

    message = _message(scale, f32[4, 3], f32[3], error=ImplicitBroadcastError, strict_broadcasting=True,
                       internal=NO_OP_NAMES)
    assert "for bias of shape (3,): bias[None, :] (shape (1, 3)) or np.broadcast_to(bias, (4, 3))" in message


def test_strict_broadcasting_without_a_name_says_the_operand():
    message = _message(lambda x, b: x * (b + 1), f32[4, 3], f32[3], error=ImplicitBroadcastError,
                       strict_broadcasting=True, internal=NO_OP_NAMES)
    assert "for the operand of shape (3,): x[None, :]" in message, message
