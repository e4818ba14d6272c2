"""Slang's C++ for one CPU module, cut into two translation units that g++
compiles at the same time, one per core (``compiler_cache``).

g++ -O3 spends most of a module's compile on its kernels, one function each
(``lowering.codegen`` names them ``k<number>_...``, with their runners and
worker slices), and on the program entry that calls them.  The entry calls a
kernel's functions only through its runners and slices, which are out of line
(``compiler_cache._entry_light``, and the pool calls slices through a
lambda), so kernels can be compiled apart from the entry without changing what
is inlined where.  The cut keeps each kernel's functions together (and any
kernels whose functions call each other), balances the lines of the two units,
and gives each unit a declaration of every function it calls in the other.

Reading Slang's C++: a function definition is a line at column 0 ending in its
parameter list, then a line ``{``, and its body ends at the next line ``}``
(Slang indents everything inside).  Text that does not read that way is not cut.
This module is loaded by the bare interpreter running the g++ wrapper (``library_store``): standard library only.
"""
from __future__ import annotations

import re
from typing import NamedTuple

ENTRY = "_run_program"  # Slang's C++ function holding the CPU program entry's body (lowering.codegen.PROGRAM)
_DEFINITION = re.compile(r"^(?:__attribute__\(\(.*?\)\) )?(static )?[A-Za-z_][^(]*?\b(\w+)\(.*\)$")
_GROUP = re.compile(r"^(k\d+)_")  # a kernel's functions, moved as one
_CALL = re.compile(r"\b(k\d+_\w*)\(")


class _Definition(NamedTuple):
    name: str
    start: int  # the line of its signature
    end: int  # the line of its closing brace
    static: bool


def _definitions(lines: list[str]) -> list[_Definition]:
    found, n = [], 0
    while n < len(lines) - 1:
        match = _DEFINITION.match(lines[n])
        if match and lines[n + 1] == "{":
            end = lines.index("}", n + 2)
            found.append(_Definition(match.group(2), n, end, match.group(1) is not None))
            n = end + 1
        else:
            n += 1
    return found


def _calls(lines: list[str], d: _Definition) -> set[str]:
    return {name for line in lines[d.start + 2:d.end] for name in _CALL.findall(line)}


def two_units(own: str, min_lines: int, entry_weight: float = 1.0) -> tuple[str, str] | None:
    """``own`` (a module's C++ after its shared prelude) as two translation units:
    the first with kernels, the second with the other kernels and the entry, their
    lines about even (the entry's count ``entry_weight`` times: its calls cost g++
    more a line); None where the kernels have fewer than ``min_lines`` lines or the
    text does not read as Slang's."""
    lines = own.split("\n")
    try:
        found = _definitions(lines)
    except ValueError:  # a definition without its closing line
        return None
    movable = {d.name: d for d in found if _GROUP.match(d.name)}
    others = [d for d in found if d.name not in movable]
    entry = next((d for d in others if d.name == ENTRY), None)
    if (entry is None or any(d.start > entry.start for d in movable.values())
            or sum(d.end - d.start + 1 for d in movable.values()) < min_lines):
        return None
    calls = {d.name: _calls(lines, d) & movable.keys() for d in found}
    if any(calls[d.name] for d in others if d is not entry):
        return None  # another function calls a kernel's: not the shape this cut knows
    group = {name: _GROUP.match(name).group(1) for name in movable}  # then kernels calling each other merged
    for name in movable:
        for callee in calls[name]:
            old, new = group[callee], group[name]
            if old != new:
                group = {k: new if g == old else g for k, g in group.items()}
    exposed = calls[ENTRY] | {c for n in movable for c in calls[n] if group[c] != group[n]}  # not static
    sizes: dict[str, int] = {}
    for name, d in movable.items():
        sizes[group[name]] = sizes.get(group[name], 0) + d.end - d.start + 1
    first, load = set(), [0.0, entry_weight * (entry.end - entry.start + 1)]
    for g in sorted(sizes, key=lambda g: (-sizes[g], g)):
        side = 0 if load[0] <= load[1] else 1
        load[side] += sizes[g]
        if side == 0:
            first.add(g)
    if not first:
        return None
    units = []
    for kept, holders in ((lines[:entry.start], first), (lines, sizes.keys() - first)):
        here = {n for n in movable if group[n] in holders}
        calling = [*here, *([ENTRY] if holders is not first else [])]
        units.append(_unit(kept, movable, here, exposed, {c for n in calling for c in calls[n]}))
    return units[0], units[1]


def _unit(lines: list[str], movable: dict[str, _Definition], here: set[str], exposed: set[str],
          called: set[str]) -> str:
    """``lines`` with the movable functions ``here`` defined, those of the others it
    calls declared, and the rest left out; a function ``exposed`` (called from
    another group) loses ``static`` (the other unit may call it)."""
    out: list[str] = []
    starts = {d.start: d for d in movable.values()}
    n = 0
    while n < len(lines):
        d = starts.get(n)
        if d is None:
            out.append(lines[n])
            n += 1
            continue
        signature = lines[d.start].replace("static ", "", 1) if d.name in exposed else lines[d.start]
        if d.name in here:
            out.extend([signature, *lines[d.start + 1:d.end + 1]])
        elif d.name in called:
            out.append(signature + ";")
        n = d.end + 1
    return "\n".join(out)
