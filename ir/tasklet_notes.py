"""The notes the lowering keeps on tasklets and containers, typed.

A rewrite of the lowering (binding sizes, inlining, fusing sibling reductions,
splitting a reduction in two stages, owner-computes scatters) records where a
tasklet came from, and later stages (codegen, the runtime's ``kernels()``,
explain, bounds checks, rematerialisation) read it back.  The notes still
live in ``Tasklet.meta`` / ``Container.meta``, so that copies, rewrites and the
disk cache's canonical text carry them unchanged, but only this module names
their keys: a misspelt note or a value of the wrong type raises here instead
of reading as "absent" three stages later.

Tasklet notes:
  ``origin``   the graph tasklet's name before any split renamed it (str);
  ``folded``   the graph tasklets inlined or fused into it (tuple of str);
  ``siblings`` the reductions fused into it, by name (tuple of str);
  ``scatter``  the scatter write an owner-computes loop replaces (Memlet).
Container notes:
  ``two_stage`` a partial-sums container of a two-stage reduction (bool).
"""

from __future__ import annotations

from collections.abc import Mapping

from .graph import Container, Memlet, Tasklet

_TASKLET_NOTES: dict[str, type] = {"origin": str, "folded": tuple, "siblings": tuple, "scatter": Memlet}
_CONTAINER_NOTES: dict[str, type] = {"two_stage": bool}


def _checked(kinds: Mapping[str, type], notes: Mapping[str, object], owner: str) -> dict:
    for key, value in notes.items():
        if key not in kinds:
            raise TypeError(f"{owner} note {key!r} is not one of {sorted(kinds)}")
        if not isinstance(value, kinds[key]):
            raise TypeError(f"{owner} note {key!r} must be {kinds[key].__name__}, got {type(value).__name__}")
        if kinds[key] is tuple and not all(isinstance(v, str) for v in value):
            raise TypeError(f"{owner} note {key!r} must hold tasklet names (str), got {value!r}")
    return dict(notes)


def tasklet_notes(meta: Mapping, **notes: object) -> dict:
    """``meta`` with ``notes`` set (in this order, after its other keys); raises
    TypeError for a note that is not one of the above or has the wrong type."""
    return {**meta, **_checked(_TASKLET_NOTES, notes, "tasklet")}


def container_notes(**notes: object) -> dict:
    """The meta keywords for ``add_container`` that record ``notes``; checked as
    ``tasklet_notes`` checks."""
    return _checked(_CONTAINER_NOTES, notes, "container")


def _note(meta: Mapping, key: str, default: object, owner: str) -> object:
    value = meta.get(key, default)
    if value is not default:
        _checked(_TASKLET_NOTES if owner == "tasklet" else _CONTAINER_NOTES, {key: value}, owner)
    return value


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
