"""Trace-time errors.  Each names the user's ``file:line`` and the operation,
because the user's program is the only place a user can fix them."""
from __future__ import annotations

import os
import sys

import numpy
import sympy

_IR_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_SKIP_PREFIXES = tuple(os.path.dirname(os.path.abspath(m.__file__)) + os.sep
                       for m in (numpy, sympy)) + (_IR_DIR + os.sep,)


def user_location() -> str | None:
    """``"file.py:LINE"`` of the innermost frame outside ``ir``, numpy and sympy:
    the user's line that caused the current operation."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not os.path.abspath(filename).startswith(_SKIP_PREFIXES):
            return f"{os.path.basename(filename)}:{frame.f_lineno}"
        frame = frame.f_back
    return None


class TraceError(ValueError):
    """A program that cannot be traced; the message names the user's line and the op.

    Subclasses deliberately do not also derive from TypeError or IndexError:
    numpy and Python catch those internally and would hide the message."""

    def __init__(self, op: str, detail: str):
        self.op = op
        self.location = user_location()
        where = f"{self.location}: " if self.location else ""
        super().__init__(f"{where}{op}: {detail}")


class MissingSpecError(TraceError):
    """A parameter has neither a spec passed to ``trace`` nor an ``ArraySpec`` annotation."""


class TracedBranchError(TraceError):
    """Python control flow (``if``, ``while``, ``and``) on a traced value."""


class ScalarConversionError(TraceError):
    """``float(x)``, ``int(x)`` or ``x.item()`` on a traced value (its value is
    unknown while tracing).  Not a TypeError on purpose: numpy swallows
    TypeErrors from ``__float__`` while storing into an array and would report
    a confusing error instead."""


class UnsupportedOperationError(TraceError):
    """A numpy function, method or argument form the tracer does not implement."""


class ShapeMismatchError(TraceError):
    """Operand shapes that do not broadcast or contract; the message shows both."""


class TraceIndexError(TraceError):
    """An index provably outside its axis at trace time."""


class UntracedWriteError(TraceError):
    """A traced value stored into a numpy array the tracer cannot see
    (created before tracing or outside the traced program)."""
