"""The notes the differentiator and the lowering keep on tasklets and containers, typed.

The differentiator records what a derived tasklet came from and how it reads
the forward values; a rewrite of the lowering (binding sizes, inlining,
fusing sibling reductions, splitting a reduction in two stages,
owner-computes scatters) records where a tasklet came from; later stages
(codegen, the runtime's ``kernels()``, explain, the views, bounds checks,
rematerialisation) read them back.  The notes still live in ``Tasklet.meta``
/ ``Container.meta``, so that copies, rewrites and the disk cache's canonical
text carry them unchanged, but only this module names their keys: a misspelt
note or a value of the wrong type (``note_kinds``) raises here instead of
reading as "absent" three stages later.  The graph's own notes are
``graph_notes``.

Tasklet notes written by the differentiator (``symdiff``):
  ``forward_tasklet``  the forward tasklet a backward tasklet differentiates (str,
                       None for a seed copy, a custom or a library rule's tasklet);
  ``forward_tasklets`` a stencil gather's forward tasklets, in order (list);
  ``forward_values``   how it gets the forward values: ``"stored"`` (reads forward
                       results), ``"recompute"`` (from the forward inputs), ``"none"``,
                       ``"custom_vjp"`` (a user's backward rule);
  ``strategy``         ``"gather"`` (a transposed stencil) or ``"owner-computes"``
                       (a deterministic scatter, ``lowering.deterministic``);
  ``tangent_of``       the forward tasklet a tangent tasklet differentiates (str);
  ``custom_vjp``, ``custom_vjp_call``  the ``sd.custom_vjp`` function and call
                       (``"<name>#<k>"``) a tasklet belongs to (str);
  ``torch_op``         the torch operator an imported tasklet comes from (str).
Tasklet notes written by the tracer's rewrites:
  ``batched``  the copies of one product a batched product stands for, one a step
               (tuple of str, ``ir.batch_products``).
Tasklet notes written by the lowering:
  ``origin``   the graph tasklet's name before any split renamed it (str);
  ``folded``   the graph tasklets inlined or fused into it (tuple of str);
  ``siblings`` the reductions fused into it, by name (tuple of str);
  ``scatter``  the scatter write an owner-computes loop replaces (Memlet).
Container notes:
  ``two_stage`` a partial-sums container of a two-stage reduction (bool).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from .graph import Container, Memlet, Tasklet
from .note_kinds import NAME, Kind, checked, each, of_type, one_of, optional

if TYPE_CHECKING:
    from .library.node import LibraryNode

FORWARD_VALUES = ("stored", "recompute", "none", "custom_vjp")
STRATEGIES = ("gather", "owner-computes")
_TASKLET_NOTES: dict[str, Kind] = {
    "forward_tasklet": optional(NAME), "forward_tasklets": each(list, optional(NAME)),
    "forward_values": one_of(*FORWARD_VALUES), "strategy": one_of(*STRATEGIES), "tangent_of": NAME,
    "custom_vjp": NAME, "custom_vjp_call": NAME, "torch_op": NAME, "batched": each(tuple, NAME),
    "origin": NAME, "folded": each(tuple, NAME), "siblings": each(tuple, NAME), "scatter": of_type(Memlet)}
_CONTAINER_NOTES: dict[str, Kind] = {"two_stage": of_type(bool)}


def tasklet_notes(meta: Mapping, **notes: object) -> dict:
    """``meta`` with ``notes`` set (in this order, after its other keys); raises
    TypeError for a note that is not one of the above or has the wrong type."""
    return {**meta, **checked(_TASKLET_NOTES, notes, "tasklet")}


def annotate(t: Tasklet | LibraryNode, **notes: object) -> None:
    """Set ``notes`` on ``t`` in place (a tasklet or library node already in a
    graph); checked as ``tasklet_notes`` checks."""
    t.meta.update(checked(_TASKLET_NOTES, notes, "tasklet"))


def container_notes(**notes: object) -> dict:
    """The meta keywords for ``add_container`` that record ``notes``; checked as
    ``tasklet_notes`` checks."""
    return checked(_CONTAINER_NOTES, notes, "container")


def _note(meta: Mapping, key: str, default: object, owner: str) -> object:
    value = meta.get(key, default)
    if value is not default:
        checked(_TASKLET_NOTES if owner == "tasklet" else _CONTAINER_NOTES, {key: value}, owner)
    return value


def forward_tasklet(t: Tasklet) -> str | None:
    """The forward tasklet backward tasklet ``t`` differentiates, or None."""
    return _note(t.meta, "forward_tasklet", None, "tasklet")


def forward_tasklets(t: Tasklet) -> list[str | None]:
    """The forward tasklets ``t`` is derived from: a stencil gather's several, else
    its ``forward_tasklet`` alone (empty if it has none)."""
    listed = _note(t.meta, "forward_tasklets", None, "tasklet")
    if listed:
        return listed
    single = forward_tasklet(t)
    return [] if single is None else [single]


def forward_values(t: Tasklet) -> str | None:
    """How derived tasklet ``t`` gets the forward values (``FORWARD_VALUES``), or None."""
    return _note(t.meta, "forward_values", None, "tasklet")


def strategy(t: Tasklet) -> str | None:
    """How ``t`` avoids atomic writes (``STRATEGIES``), or None."""
    return _note(t.meta, "strategy", None, "tasklet")


def tangent_of(t: Tasklet) -> str | None:
    """The forward tasklet tangent tasklet ``t`` differentiates, or None."""
    return _note(t.meta, "tangent_of", None, "tasklet")


def custom_vjp(t: Tasklet) -> str | None:
    """The ``sd.custom_vjp`` function ``t`` belongs to (forward or backward), or None."""
    return _note(t.meta, "custom_vjp", None, "tasklet")


def custom_vjp_call(t: Tasklet) -> str | None:
    """The ``sd.custom_vjp`` call (``"<name>#<k>"``) ``t`` belongs to, or None."""
    return _note(t.meta, "custom_vjp_call", None, "tasklet")


def torch_op(t: Tasklet) -> str | None:
    """The torch operator ``t`` was imported from (``symdiff.interop``), or None."""
    return _note(t.meta, "torch_op", None, "tasklet")


def batched(t: Tasklet) -> tuple[str, ...]:
    """The copies of one product ``t`` computes at once, one a step (empty if none)."""
    return _note(t.meta, "batched", (), "tasklet")


def origin(t: Tasklet) -> str:
    """The graph tasklet ``t`` stands for: its ``origin`` note, else its own name
    (before ``lowering.rewrites.bind`` stamped one)."""
    return _note(t.meta, "origin", t.name, "tasklet")


def folded(t: Tasklet) -> tuple[str, ...]:
    """The graph tasklets inlined or fused into ``t`` (empty if none)."""
    return _note(t.meta, "folded", (), "tasklet")


def siblings(t: Tasklet) -> tuple[str, ...]:
    """The sibling reductions fused into ``t``, by name (empty if none)."""
    return _note(t.meta, "siblings", (), "tasklet")


def scatter(t: Tasklet) -> Memlet | None:
    """The scatter write an owner-computes ``t`` replaces, or None."""
    return _note(t.meta, "scatter", None, "tasklet")


def two_stage(c: Container) -> bool:
    """Whether ``c`` holds the partial sums of a two-stage reduction."""
    return _note(c.meta, "two_stage", False, "container")
