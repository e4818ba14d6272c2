"""``sd.library_node``: register a whole-array operation with its own
implementation and derivative rules (the public face of ``ir.library``).

``sd.custom_vjp`` gives a traced *function* a backward rule; its forward is
still traced into tasklets.  A library node is opaque instead: the program
graph holds one node for it, the numpy device runs your numpy function, the
Slang devices run it on the host between their kernels
(``lowering.host_steps``), and differentiation traces your rules::

    import numpy as np
    import symdiff as sd

    def softplus_numpy(x):                      # any numpy code (LAPACK, a C extension...)
        return np.logaddexp(0.0, x)

    def softplus_vjp(params, inputs, outputs, cotangents):   # traced numpy
        (x,), (g,) = inputs, cotangents
        return [None if g is None else g / (1 + np.exp(-x))]

    softplus = sd.library_node("user.softplus", shape=lambda x: x, numpy=softplus_numpy,
                               vjp=softplus_vjp)

    @sd.differentiable_program
    def f(x: sd.f64[8]):
        return np.sum(softplus(x) ** 2)

* ``shape(*input_shapes, **params)``: the result's shape (a tuple), or a
  list of shapes for several results; raise ``ValueError`` for inputs that
  do not fit.  Every result has the inputs' float dtype.
* ``numpy(*arrays, **params)``: a tuple of result arrays (or one array).
* ``vjp(params, inputs, outputs, cotangents)`` returns one cotangent per
  input; ``jvp(params, inputs, outputs, tangents)`` one tangent per result.
  Both are written with numpy functions on traced arrays, and may call
  library ops (``np.linalg.solve``) themselves; a zero cotangent or tangent
  comes in, and may go out, as ``None``.  Gradients of gradients go through
  what they trace.
* ``nondifferentiable``: result positions without a derivative.

The returned function takes the arrays and the static keyword ``params``
(hashable: they are part of the traced program); called outside a traced
program it runs ``numpy`` directly.  ``name`` is global (graphs refer to ops
by name); registering it again needs ``replace=True``.
"""
from __future__ import annotations

from typing import Callable, Sequence

from symdiff.ir.library import LibraryOp, call, register
from symdiff.ir.tracer.errors import ShapeMismatchError


def _shape_rule(name: str, shape: Callable) -> Callable:
    def shapes(specs, params):
        try:
            out = shape(*(s for s, _ in specs), **params)
        except ValueError as err:
            raise ShapeMismatchError(name, str(err)) from None
        several = isinstance(out, list)
        dtype = "float64" if any(d == "float64" for _, d in specs) else specs[0][1] if specs else "float32"
        return [(tuple(s), dtype) for s in (out if several else [out])]
    return shapes


def _tuple_numpy(fn: Callable) -> Callable:
    def run(*arrays, **params):
        out = fn(*arrays, **params)
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)
    return run


def library_node(name: str, *, shape: Callable, numpy: Callable, vjp: Callable | None = None,
                 jvp: Callable | None = None, nondifferentiable: Sequence[int] = (),
                 replace: bool = False) -> Callable:
    """Register the operation ``name`` (see the module docstring) and return
    the function that applies it."""
    register(LibraryOp(name, _shape_rule(name, shape), _tuple_numpy(numpy), vjp, jvp,
                       frozenset(nondifferentiable), doc=(numpy.__doc__ or "").strip()), replace=replace)

    def apply(*arrays, **params):
        return call(name, *arrays, **params)
    apply.__name__ = name.rsplit(".", 1)[-1]
    apply.__doc__ = f"The library operation {name!r} (sd.library_node)."
    return apply
