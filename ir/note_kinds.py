"""What a note in a ``meta`` dict may hold, for ``tasklet_notes`` and ``graph_notes``.

The stages record their notes in plain ``meta`` dicts (graph copies, rewrites
and the disk cache's canonical text carry them unchanged), so nothing in
Python checks them: a misspelt key reads as absent, and a list where a tuple
was meant, or a name where a list of names was meant, fails (or silently
iterates characters) stages later.  Each note therefore has a ``Kind`` that
the notes modules check where a note is written and where it is read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Kind:
    """The values a note may hold: ``accepts`` says whether one fits, ``description`` what fits."""

    description: str
    accepts: Callable[[object], bool]


def of_type(*types: type) -> Kind:
    """Instances of ``types``."""
    return Kind(" or ".join(t.__name__ for t in types), lambda v: isinstance(v, types))


def optional(kind: Kind) -> Kind:
    """``kind`` or None."""
    return Kind(f"{kind.description} or None", lambda v: v is None or kind.accepts(v))


def each(container: type, item: Kind) -> Kind:
    """A ``container`` (list or tuple: the form the disk cache's text records) of ``item`` values."""
    return Kind(f"{container.__name__} of ({item.description})",
                lambda v: isinstance(v, container) and all(item.accepts(x) for x in v))


def one_of(*values: str) -> Kind:
    """One of the strings ``values``."""
    return Kind(f"one of {list(values)}", lambda v: isinstance(v, str) and v in values)


NAME = Kind("a name (str)", lambda v: isinstance(v, str))
NAME_MAP = Kind("dict of names to names (str: str)",
                lambda v: isinstance(v, dict) and all(isinstance(k, str) and isinstance(x, str) for k, x in v.items()))


def checked(kinds: Mapping[str, Kind], notes: Mapping[str, object], owner: str) -> dict:
    """``notes`` as a dict, each checked against its kind in ``kinds``; a TypeError names
    the ``owner`` ("tasklet", "container", "graph") and the note that does not fit."""
    for key, value in notes.items():
        if key not in kinds:
            raise TypeError(f"{owner} note {key!r} is not one of {sorted(kinds)}")
        if not kinds[key].accepts(value):
            raise TypeError(f"{owner} note {key!r} must be {kinds[key].description}, "
                            f"got {type(value).__name__} {value!r:.80}")
    return dict(notes)
