"""Device kernels for library nodes: a library op (``ir.library``) may bring
its own Slang per target, so a program holding it stays on the device instead
of stopping for a host step (``lowering.host_steps``).

The contract, for whoever adds a kernel (one module per op family in this
package, imported by the package's ``__init__`` so that it registers):

* ``register(op_name, builder)``; ``builder(target, inputs, outputs, params)``
  gets the ``lowering.targets.Target`` being compiled for, the node's
  arguments and results as ``Spec``s (concrete shape, graph dtype), in the
  op's argument / result order, and the node's static ``params``.  It returns
  a ``Kernel``, or ``None`` where it has none for these shapes, dtypes or this
  target: the node then runs on the host as before (so a builder may cover
  only the cases worth a kernel).  It is called once per size binding.
* A ``Kernel`` is Slang ``source`` (one module, compiled at full optimisation
  and cached by its text like the programs' modules) and the ``dispatches``
  that run it, recorded in order into one command encoder (each sees the
  writes of those before).  A ``Dispatch`` names its compute ``entry`` point,
  the ``threads`` to launch (slangpy's ``thread_count``: each dimension's
  group count must stay at most 65535), ``buffers`` (entry-point parameter ->
  ``"in<k>"``, ``"out<k>"`` or ``"scratch<k>"``) and scalar ``uniforms``.
* Buffers are flat ``RWStructuredBuffer``s of the storage type of their dtype
  (``lowering.buffer_plan.STORAGE``: float, double, int; bool as int), C-order,
  at least one element long even for an empty array.  Inputs are the
  producers' buffers and must not be written.  Outputs are fresh and *not*
  cleared: the kernel writes every element.  ``scratch`` lists ``(dtype,
  count)`` per scratch buffer; each is allocated once per size binding and
  holds zeros at the start of every call.
* ``failure``, where an op can fail on its values (a singular matrix):
  ``(k, message)``, scratch<k> is int32 with one flag per matrix that the
  kernel sets nonzero where it failed, and the call raises numpy's
  ``LinAlgError(message)`` once the kernel has run (reading the flags waits
  for the device), as the op's host step would.
* A node with an empty argument or result never reaches a builder: it runs
  on the host (nothing to compute), so no kernel handles zero-size arrays.

``build`` is what the runner asks; ``has_kernel`` says whether an op has a
builder at all (``HostSteps.stats`` counts the others as host steps before a
call has bound shapes).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from .. import targets

Spec = tuple[tuple[int, ...], str]   # (concrete shape, graph dtype)


@dataclass(frozen=True)
class Dispatch:
    """One launch of a ``Kernel`` (see the module docstring)."""

    entry: str
    threads: tuple[int, int, int]
    buffers: Mapping[str, str]                 # entry-point parameter -> "in0" / "out0" / "scratch0"
    uniforms: Mapping[str, int | float] = field(default_factory=dict)


@dataclass(frozen=True)
class Kernel:
    """A library node's device implementation for one binding of its shapes."""

    source: str
    dispatches: tuple[Dispatch, ...]
    scratch: tuple[tuple[str, int], ...] = ()  # (dtype, element count) per scratch buffer
    failure: tuple[int, str] | None = None     # (int32 scratch buffer of flags, LinAlgError message)

    def __post_init__(self) -> None:
        known = {f"scratch{k}" for k in range(len(self.scratch))}
        for d in self.dispatches:
            bad = [b for b in d.buffers.values() if not (b.startswith(("in", "out")) or b in known)]
            if bad:
                raise ValueError(f"dispatch {d.entry!r} binds {bad}: buffers are 'in<k>', 'out<k>' or one of "
                                 f"the kernel's {len(self.scratch)} scratch buffers 'scratch<k>'")


Builder = Callable[[targets.Target, Sequence[Spec], Sequence[Spec], dict], "Kernel | None"]

_BUILDERS: dict[str, Builder] = {}


def register(op: str, builder: Builder) -> Builder:
    """Give the library op named ``op`` a device kernel builder (one per op)."""
    if op in _BUILDERS and _BUILDERS[op] is not builder:
        raise ValueError(f"library op {op!r} already has a device kernel builder")
    _BUILDERS[op] = builder
    return builder


def has_kernel(op: str) -> bool:
    return op in _BUILDERS


def build(op: str, target: targets.Target, inputs: Sequence[Spec], outputs: Sequence[Spec],
          params: dict) -> Kernel | None:
    """The op's kernel for these concrete shapes on ``target``, or None (host step)."""
    builder = _BUILDERS.get(op)
    return None if builder is None else builder(target, tuple(inputs), tuple(outputs), dict(params))


__all__ = ["Dispatch", "Kernel", "Spec", "build", "has_kernel", "register"]
