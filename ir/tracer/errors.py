"""Trace-time errors.  Each names the user's ``file:line`` and the operation,
because the user's program is the only place a user can fix them."""
from __future__ import annotations

import ast
import inspect
import os
import sys
import textwrap
import warnings

import numpy
import sympy

_IR_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_SKIP_PREFIXES = tuple(os.path.dirname(os.path.abspath(m.__file__)) + os.sep
                       for m in (numpy, sympy)) + (_IR_DIR + os.sep,)


def user_location(skip: tuple[str, ...] = ()) -> str | None:
    """``"file.py:LINE"`` of the innermost frame outside ``ir``, numpy and sympy
    (and the directories ``skip``, for callers outside ``ir``): the user's line
    that caused the current operation."""
    frame = sys._getframe(1)
    prefixes = _SKIP_PREFIXES + tuple(os.path.abspath(d) + os.sep for d in skip)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not os.path.abspath(filename).startswith(prefixes):
            return f"{os.path.basename(filename)}:{frame.f_lineno}"
        frame = frame.f_back
    return None


def return_location(fn) -> str | None:
    """``"file.py:LINE"`` of ``fn``'s ``return`` statement when it has exactly
    one, else of its ``def`` line: where a bad return value comes from (the
    function's frame is gone by the time the value is checked)."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    line = code.co_firstlineno
    try:
        lines, first = inspect.getsourcelines(fn)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError):
        tree = None
    if tree is not None and isinstance(tree.body[0], (ast.FunctionDef, ast.AsyncFunctionDef)):
        returns = [n for n in _own_nodes(tree.body[0]) if isinstance(n, ast.Return)]
        if len(returns) == 1:
            line = first + returns[0].lineno - 1
    return f"{os.path.basename(code.co_filename)}:{line}"


def _own_nodes(fn: ast.AST):
    """The nodes of a function body, not descending into nested functions or classes."""
    for child in ast.iter_child_nodes(fn):
        yield child
        if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            yield from _own_nodes(child)


def warn_user(op: str, detail: str, category: type[Warning] = RuntimeWarning) -> None:
    """A warning attributed to the user's line, as numpy's own would be."""
    frame = sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_SKIP_PREFIXES):
        frame = frame.f_back
    if frame is None:
        warnings.warn(f"{op}: {detail}", category, stacklevel=2)
        return
    warnings.warn_explicit(f"{op}: {detail}", category, frame.f_code.co_filename, frame.f_lineno,
                           module=frame.f_globals.get("__name__"),
                           registry=frame.f_globals.setdefault("__warningregistry__", {}))


class TraceError(ValueError):
    """A program that cannot be traced; the message names the user's line and the op.

    Subclasses deliberately do not also derive from TypeError or IndexError:
    numpy and Python catch those internally and would hide the message.
    ``location`` overrides the innermost user frame (a return value is
    checked after the user's function has returned)."""

    def __init__(self, op: str, detail: str, location: str | None = None):
        self.op = op
        self.location = location or user_location()
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


class UnsupportedAttributeError(TraceError, AttributeError):
    """A numpy array attribute or method traced arrays do not have.  Also an
    AttributeError, so ``hasattr``/``getattr(x, name, default)`` keep working."""
