"""The notes the stages keep on a whole graph, as a typed record.

The tracer records a program's argument and result order, the differentiator
the containers it added (seeds, gradients, tangents), ``sd.fori_loop`` the
loops it keeps out of the graph, ``sd.custom_vjp`` its calls, and a memory
budget its choices; every later stage reads them back.  They still live in
``graph.meta`` under the same keys, so that ``DataflowGraph.copy``, the
lowering's rewrites and the disk cache's canonical text (whose hash keys the
cache) carry them unchanged, and users read them there (``docs/guide.md``).
But only this module names those keys: ``GraphNotes(graph)`` reads and writes
them as attributes, checked against their kind (``note_kinds``) on every
write and read, and a misspelt attribute raises AttributeError instead of
reading as absent.

Graph notes are replaced, never mutated in place: ``DataflowGraph.copy``
copies ``meta`` shallowly, so a copy shares its values with the original.

``arg_names``      the program's arguments in call order (list of str; unset: the
                   graph's argument containers);
``result_names``   its results in return order (list of str; unset: the result
                   containers);
``seeds``          ``{output: cotangent argument}`` of the reverse passes (dict);
``gradients``      ``{input: gradient result}`` of the reverse passes (dict);
``tangent_inputs`` ``{input: tangent argument}`` of the tangent passes (dict);
``tangents``       ``{output: tangent result}`` of the tangent passes (dict);
``loops``          the loops ``sd.fori_loop`` / ``sd.while_loop`` keep out of the
                   graph (list of ``symdiff.loops.Loop``);
``loop_gradients`` ``{loop output: its gradient}``, ``loop_seeds`` ``{loop input:
                   its cotangent}``: where a reverse pass hands over to the loops'
                   (dict; unset: no reverse pass went through loops);
``loop_state_bytes`` the bytes a memory budget leaves the loops' stored states (int);
``custom_vjps``    the ``sd.custom_vjp`` calls (tuple or list of
                   ``symdiff.custom_vjp.CustomCall``);
``rematerialise``  the tasklets a memory budget chose to recompute where they are
                   read (sorted list of str; ``lowering.cost_model``);
``matmul_precision`` what float32 products may compute in, where not the default
                   (str; ``lowering.kernels.precision``).
The name maps, ``loop_state_bytes`` and ``matmul_precision`` read as None when unset.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .graph import DataflowGraph
from .note_kinds import NAME, NAME_MAP, Kind, checked, each, of_type


class _Note:
    """One graph note, stored in ``graph.meta`` under the attribute's name;
    ``unset`` gives what it reads as when the graph has none."""

    def __init__(self, kind: Kind, unset: Callable[[DataflowGraph], Any] = lambda graph: None):
        self.kind, self.unset = kind, unset

    def __set_name__(self, owner: type, name: str) -> None:
        self.key = name

    def __get__(self, notes: GraphNotes | None, owner: type | None = None) -> Any:
        if notes is None:
            return self
        meta = notes.graph.meta
        if self.key not in meta:
            return self.unset(notes.graph)
        return checked({self.key: self.kind}, {self.key: meta[self.key]}, "graph")[self.key]

    def __set__(self, notes: GraphNotes, value: Any) -> None:
        notes.graph.meta.update(checked({self.key: self.kind}, {self.key: value}, "graph"))

    def __delete__(self, notes: GraphNotes) -> None:
        notes.graph.meta.pop(self.key, None)


class GraphNotes:
    """The notes of ``graph`` (see the module docstring), read and written as
    attributes; ``del`` removes one (a no-op if unset)."""

    __slots__ = ("graph",)

    arg_names = _Note(each(list, NAME), lambda graph: graph.arguments)
    result_names = _Note(each(list, NAME), lambda graph: graph.results)
    seeds = _Note(NAME_MAP)
    gradients = _Note(NAME_MAP)
    tangent_inputs = _Note(NAME_MAP)
    tangents = _Note(NAME_MAP)
    loops = _Note(of_type(list), lambda graph: ())
    loop_gradients = _Note(NAME_MAP)
    loop_seeds = _Note(NAME_MAP)
    loop_state_bytes = _Note(of_type(int, float))
    custom_vjps = _Note(of_type(tuple, list), lambda graph: ())
    rematerialise = _Note(each(list, NAME), lambda graph: ())
    matmul_precision = _Note(of_type(str))

    def __init__(self, graph: DataflowGraph):
        object.__setattr__(self, "graph", graph)

    def __getattr__(self, name: str) -> Any:   # only for a name that is not a note
        raise AttributeError(f"graph note {name!r} is not one of {sorted(_NOTES)}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in _NOTES:
            raise AttributeError(f"graph note {name!r} is not one of {sorted(_NOTES)}")
        object.__setattr__(self, name, value)


_NOTES = frozenset(k for k, v in vars(GraphNotes).items() if isinstance(v, _Note))
