"""Trace-time errors.  Each names the user's ``file:line`` and the operation,
because the user's program is the only place a user can fix them."""
from __future__ import annotations

import ast
import inspect
import os
import re
import sys
import textwrap
import warnings

import numpy
import sympy
from sympy.printing.precedence import PRECEDENCE
from sympy.printing.str import StrPrinter

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


def _user_frame():
    """The innermost frame outside ``ir``, numpy and sympy, or None."""
    frame = sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_SKIP_PREFIXES):
        frame = frame.f_back
    return frame


def user_names() -> dict[str, str]:
    """Internal names -> the names the user gave them: a container (``multiply``,
    ``zeros``) -> the variable of the user's frame that holds a traced array of
    it (``A``, ``out``), and an ``sd.map`` index symbol (``_m0``) -> the loop
    variable (``i``).  Messages speak of what the user wrote, not of what the
    tracer made of it; a name with no variable is left as it is."""
    frame = _user_frame()
    names: dict[str, str] = {}
    for var, value in (frame.f_locals.items() if frame is not None else ()):
        container = getattr(value, "container", None)     # a traced array (or a view of one)
        if isinstance(container, str) and hasattr(value, "trace"):
            names.setdefault(container, var)
        expr = getattr(value, "expr", None)               # an sd.map index or value
        if isinstance(expr, sympy.Symbol) and hasattr(value, "trace"):
            names.setdefault(expr.name, var)
    return names


class _UserPrinter(StrPrinter):
    """sympy's text, with index arithmetic back in Python's spelling:
    ``floor(i/2)`` is ``i // 2`` and ``Mod(i, 2)`` is ``i % 2``."""

    def _print_floor(self, expr) -> str:
        num, den = sympy.fraction(sympy.together(expr.args[0]))
        if den == 1:
            return f"floor({self._print(expr.args[0])})"
        return f"({self.parenthesize(num, PRECEDENCE['Mul'])} // {self.parenthesize(den, PRECEDENCE['Mul'])})"

    def _print_Mod(self, expr) -> str:
        a, b = expr.args
        return f"({self.parenthesize(a, PRECEDENCE['Mul'])} % {self.parenthesize(b, PRECEDENCE['Mul'])})"


def user_expr(expr, names: dict[str, str]) -> str:
    """``expr`` (an index or value of the trace) in the user's symbols and
    Python's spelling, e.g. ``floor(_m0/2)`` -> ``i // 2``."""
    expr = sympy.sympify(expr)
    renamed = {s: sympy.Symbol(names[s.name], **s.assumptions0) for s in expr.free_symbols
               if isinstance(s, sympy.Symbol) and s.name in names}
    text = _UserPrinter().doprint(expr.xreplace(renamed))
    return text[1:-1] if text.startswith("(") and text.endswith(")") and _balanced(text[1:-1]) else text


def in_user_names(text: str, names: dict[str, str]) -> str:
    """A message written in the graph's names (``access a[_m0 + 1] on 'a#0'``,
    from ``ir.validate``) in the user's: loop symbols and arrays renamed, the
    access node's version id dropped."""
    text = re.sub(r" on '[^']*#\d+'", "", text)
    text = re.sub(r"\b_m\d+\b", lambda m: names.get(m.group(), m.group()), text)
    return re.sub(r"\b(\w+)(?=\[)|(?<=')(\w+)(?=')",
                  lambda m: names.get(m.group(), m.group()), text)


def _balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth < 0:
            return False
    return depth == 0


def warn_user(op: str, detail: str, category: type[Warning] = RuntimeWarning) -> None:
    """A warning attributed to the user's line, as numpy's own would be."""
    frame = _user_frame()
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
