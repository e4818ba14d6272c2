"""16-bit floats are storage formats: held in 16 bits, computed on in float32.

float16 and bfloat16 arrays halve the bytes a program moves, and that is
what users choose them for; their arithmetic, rounded to 16 bits after every
operation, would lose digits for nothing on devices whose ALUs are float32
anyway.  So a program's 16-bit arrays stay 16-bit only where the caller sees
them: its arguments are widened to float32 as they are read and its results
(gradients of 16-bit arguments included) are rounded to nearest even as they
are stored.  Every value in between, transient arrays of a 16-bit dtype too,
is float32.  (JAX and PyTorch round each operation's result to 16 bits; here a
16-bit program's results are the float32 program's, rounded once.)

``computed_in_float32`` makes that explicit in the graph, once, before a
graph runs anywhere: devices and the interpreter then only need to load and
store 16-bit elements in the copies it adds, and every other stage sees
float32.
"""
from __future__ import annotations

from .graph import STORAGE_FLOATS, DataflowGraph, connector_symbol, index_symbol


def computed_in_float32(graph: DataflowGraph) -> DataflowGraph:
    """``graph`` with float32 arithmetic behind its 16-bit arguments and results
    (``graph`` itself where it has none).

    A 16-bit transient becomes float32.  A 16-bit argument or result keeps its
    name and dtype, and the versions the program computes move to a float32
    container ``<name>_f32``: a copy widens the argument's data into it, or
    rounds its last version into the result."""
    if not any(c.dtype in STORAGE_FLOATS for c in graph.containers.values()):
        return graph
    if "computed_in_float32" not in graph.derived:
        graph.derived["computed_in_float32"] = _widened(graph)
    return graph.derived["computed_in_float32"]


def _widened(graph: DataflowGraph) -> DataflowGraph:
    g = graph.copy()
    for c in list(g.containers.values()):
        if c.dtype not in STORAGE_FLOATS:
            continue
        if c.role == "transient":
            c.dtype = "float32"
            continue
        versions = g.versions(c.name)
        if not versions:
            continue
        wide = g.add_container(g.unique_name(f"{c.name}_f32"), c.shape, "float32").name
        g.move_versions(c.name, wide)
        if c.role == "argument" and versions[0] == 0:
            _copy(g, f"widen_{c.name}", g.access(c.name, 0), g.access(wide, 0), c.shape)
        elif c.role == "result":
            _copy(g, f"round_{c.name}", g.access(wide, versions[-1]), g.access(c.name, 0), c.shape)
    return g


def _copy(g: DataflowGraph, name: str, source: str, target: str, shape: tuple) -> None:
    """An elementwise copy ``target[i] = source[i]``: the dtypes of the two say what it converts."""
    index = tuple(index_symbol(f"i{k}") for k in range(len(shape)))
    value = connector_symbol("value", g.containers[g.node(source).container].dtype)
    g.add_tasklet(name, [(i, 0, n) for i, n in zip(index, shape)], {"out": value},
                  {"value": (source, index)}, {"out": (target, index)})
