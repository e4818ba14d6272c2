"""The registry of library operations: what a ``LibraryNode``'s ``op`` names.

A ``LibraryOp`` bundles everything the pipeline needs to know about one
whole-array operation, so that adding one is a single module that builds a
``LibraryOp`` and calls ``register`` (``ir.library.linalg`` has one per
function; ``sd.library_node`` is the same for users):

* ``shapes(specs, params)``: the shape rule.  ``specs`` is one
  ``(shape, dtype)`` per argument (shapes are tuples of sympy expressions);
  it returns one ``(shape, dtype)`` per result, or raises a ``TraceError``
  naming what is wrong (the tracer adds the user's line).
* ``numpy(*arrays, **params)``: the implementation the numpy device runs,
  and the Slang devices too where the op has no device kernel for the shapes
  (on the host, between compiled kernels: ``lowering.host_steps``;
  ``lowering.library_kernels`` has the kernels); returns a tuple with one
  array per result.
* ``vjp(params, inputs, outputs, cotangents)`` and ``jvp(params, inputs,
  outputs, tangents)``: the derivative rules, written with traced numpy
  (``np.matmul``, other library calls...).  They are *traced* into the graph
  by the reverse / tangent pass, so whatever they compute is itself an
  ordinary differentiable graph: gradients of gradients go through them.
  ``inputs``/``outputs`` are the call's primal values as traced arrays; a
  cotangent (tangent) is None where it is known to be zero, and a rule returns
  None for a zero result.  ``vjp`` returns one cotangent per argument, shaped
  like it; ``jvp`` one tangent per result, shaped like it.
* ``nondifferentiable``: result positions that carry no derivative (the
  sign of ``slogdet``); activity analysis stops there.
* ``integers``: int32 arguments are taken as they are (a cumsum of
  integers); otherwise every argument is cast to the call's float dtype.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

Spec = tuple[tuple, str]   # (shape as sympy expressions, dtype name)


@dataclass(frozen=True)
class LibraryOp:
    name: str
    shapes: Callable[[Sequence[Spec], dict], list[Spec]]
    numpy: Callable[..., tuple]
    vjp: Callable | None = None
    jvp: Callable | None = None
    nondifferentiable: frozenset = field(default_factory=frozenset)
    doc: str = ""
    integers: bool = False


_OPS: dict[str, LibraryOp] = {}


def register(op: LibraryOp, replace: bool = False) -> LibraryOp:
    """Add ``op`` under ``op.name``; a second op of the same name is refused
    unless ``replace`` (graphs name ops by string, so two meanings of one name
    would make a stored graph ambiguous)."""
    if op.name in _OPS and not replace and _OPS[op.name] is not op:
        raise ValueError(f"a library operation named {op.name!r} is already registered; pick another name "
                         "or pass replace=True")
    _OPS[op.name] = op
    return op


def unregister(name: str) -> None:
    _OPS.pop(name, None)


def lookup(name: str) -> LibraryOp:
    try:
        return _OPS[name]
    except KeyError:
        raise KeyError(f"no library operation named {name!r} is registered (known: {sorted(_OPS)})") from None


def registered() -> list[str]:
    return sorted(_OPS)
