"""Arrays of the enclosing program that a loop's body (or condition) reads:
closures, as ``jax.lax.fori_loop`` allows.

A loop body is traced into a graph of its own, whose only inputs are the
iteration and the state.  A closure array therefore becomes extra state that
the body returns unchanged: the loop machinery (runtime, checkpoints, reverse
pass) then needs nothing new, and the reverse pass, which carries each state
element's cotangent back through every iteration, gives a closure array the
sum of its gradients over the iterations.

Which arrays a body reads is known only by tracing it, so a loop whose body
reads any is traced twice: the first pass (``discover``) records them behind
stand-in arguments, the second traces the body with them in the state
(``bind``).  The tracer hands every traced array of an enclosing trace to
``Closures`` (``ir.tracer.traced_array.localized``).
"""
from __future__ import annotations

from symdiff.ir.tracer.context import Trace
from symdiff.ir.tracer.errors import TraceError
from symdiff.ir.tracer.traced_array import TracedArray


def _key(x: TracedArray) -> tuple:
    """Two uses of the same view of the same array are one closure."""
    return (id(x.trace), x.container, x.index, x.sym_shape, x.dtype_name)


class Closures:
    """The closure arrays of one loop, in first-use order (see the module docstring)."""

    def __init__(self, where: str | None):
        self.where = where
        self.arrays: dict[tuple, TracedArray] = {}            # key -> the enclosing program's array
        self._stand_ins: dict[tuple, TracedArray] = {}        # (id(trace), key) -> first-pass argument
        self._bound: dict[tuple, TracedArray] | None = None   # second pass: key -> state argument

    def __call__(self, tr: Trace, outer: TracedArray) -> TracedArray:
        """The array of trace ``tr`` standing for ``outer`` (``Trace.capture``)."""
        key = _key(outer)
        if self._bound is None:
            return self._discover(tr, key, outer)
        if key not in self._bound:
            raise TraceError("fori_loop", "the loop body read a different outer array on its second trace; "
                             "a body must read the same arrays each time it is traced", self.where)
        return self._bound[key]

    def _discover(self, tr: Trace, key: tuple, outer: TracedArray) -> TracedArray:
        self.arrays.setdefault(key, outer)
        slot = (id(tr), key)
        if slot not in self._stand_ins:
            name = tr.graph.unique_name("closure")
            tr.graph.add_container(name, outer.sym_shape, outer.dtype_name, role="argument")
            tr.graph.access(name)
            self._stand_ins[slot] = TracedArray(tr, name, outer.sym_shape, outer.dtype_name)
        return self._stand_ins[slot]

    def bind(self, args: tuple) -> None:
        """Second pass: the body's (or condition's) extra state arguments, in ``arrays`` order."""
        self._bound = dict(zip(self.arrays, args))
