"""Strict broadcasting: refuse implicit rank promotion between arrays.

numpy silently prepends axes to the lower-rank operand of ``a + b``; a
``(4, 3) + (4,)`` that was meant as a column broadcast fails loudly, but a
``(3, 3) + (3,)`` mashes rows where columns were meant and runs.  With
``strict_broadcasting`` on (``ir.trace(..., strict_broadcasting=True)`` or
``sd.differentiable_program(strict_broadcasting=True)``) an elementwise op
whose array operands have different ranks is an error unless the user wrote
the broadcast: ``x[None, :]`` or ``np.broadcast_to(x, shape)`` give the
operands equal ranks, and size-1 axes of equal-rank operands still stretch
(that is what ``None`` indexing and ``keepdims=True`` are for).  Scalars (0-d
arrays, Python and numpy numbers) broadcast freely.
"""
from __future__ import annotations

from typing import Sequence

from .errors import ShapeMismatchError, user_names


class ImplicitBroadcastError(ShapeMismatchError):
    """An elementwise op would promote an operand's rank implicitly while
    strict broadcasting is on; the message shows the shapes and the fix."""


def _shape(shape) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def _explicit(name: str, shape, ndim: int) -> str:
    """The ``None`` index that lifts an operand of ``shape`` to ``ndim`` axes."""
    return name + "[" + ", ".join(["None"] * (ndim - len(shape)) + [":"] * len(shape)) + "]"


def check_ranks(op: str, shapes: Sequence[tuple], containers: Sequence[str] = ()) -> None:
    """Raise ``ImplicitBroadcastError`` when the non-scalar ``shapes`` of one
    elementwise op's array operands differ in rank.  ``containers`` (one per
    shape) let the message write the fix with the user's name for the
    operand (``b[None, :]``); an operand without one is called ``x``."""
    arrays = [tuple(s) for s in shapes if len(s) > 0]
    if len({len(s) for s in arrays}) <= 1:
        return
    out = max(arrays, key=len)
    low = min(arrays, key=len)
    container = dict(zip((tuple(s) for s in shapes), containers)).get(low)
    name = user_names().get(container, "x") if container else "x"
    raise ImplicitBroadcastError(
        op, f"shapes {' and '.join(_shape(s) for s in arrays)} would broadcast implicitly (ranks "
            f"{' and '.join(str(len(s)) for s in arrays)}) and strict_broadcasting is on; write the broadcast "
            f"for {'the operand' if name == 'x' else name} of shape {_shape(low)}: {_explicit(name, low, len(out))} "
            f"(shape {_shape((1,) * (len(out) - len(low)) + low)}) or np.broadcast_to({name}, {_shape(out)})")
