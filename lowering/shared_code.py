"""Kernels that are the same code run one Slang function.

An unrolled Python loop plans one kernel per step and per step's reverse,
and most of them differ only in the buffers they touch or in a few integer
constants (the element a step updates, the length of its row): cavity flow's
190 kernels are 38 texts, ludcmp's 199 are 35 texts with their constants as
parameters.  Every text costs Slang's front end, its C++ or SPIR-V
generation, g++ (CPU device) and, on a GPU driver, a pipeline compile at its
first dispatch, so a module writes each text once and the other kernels
dispatch it with their own buffers bound to its parameters.

Two kernels share when their texts are equal after renaming what is the
kernel's own: its buffers (numbered by first use) and its tasklets' locals (a
local is the tasklet's identifier, ``_`` and a suffix, ``lowering.kernels.writer``;
the tasklet is numbered by its step).  The renaming is injective (a renamed
word holds ``@``, which no Slang identifier does, and a local takes its
longest tasklet prefix), so equal keys mean the same program up to a
consistent renaming: sharing never changes what a kernel computes.

A small kernel's integer literals may differ too (``Tuning.lift_max_work``): those
that differ between the kernels sharing a text become ``int`` parameters,
each kernel passing its own values, so each still computes exactly what its
own text did.  Literals Slang needs at compile time stay in the key: those on
a line declaring an array or opening an unrolled loop (its bound and sizes;
the rest of the kernel's literals may still be lifted: the backward steps of
an unrolled RNN, register tiles differing only in the time step's offset,
share one function), and every literal of a kernel with workgroup scratch or
wave operations.  A large kernel's loops run faster with constant bounds and
strides, so its literals stay but for offsets, terms added last to an index
or a value outside a loop's header (``a[256*i + j + 16384]``: the steps of an
RNN reading their slice of a batched product, ``ir.batch_products``), which
cost the same as parameters.
Comments are left out of the key; the shared text keeps the first kernel's
and names the others.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

# comments, words and numbers (a number runs to its suffix: 0.25l, 1.e-05f, 64u, 0x7F800000u)
_TOKEN = re.compile(r"(//[^\n]*)|([A-Za-z_]\w*)|((?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?\w*)")
# a kernel whose integer literals Slang may need as compile-time constants anywhere
_CONSTANT_KERNEL = re.compile(r"groupshared|Wave|Barrier")
# a line whose integer literals Slang needs at compile time: an unrolled loop's bound, an array's size
_CONSTANT_LINE = re.compile(r"\[(?:ForceUnroll|unroll)|^\s*(?:static\s+|const\s+)*\w+ \w+\[")
_LOOP_LINE = re.compile(r"\b(?:for|while)\s*\(")  # a loop's header: its literals are its bounds and steps
_NO_OPERAND = ("", "(", "[", ",", "=", "*", "/", "%", "<", ">", "?", ":")  # what ends text before a unary sign
_WINDOW = 64  # characters either side of a literal that _offset reads
LIFTED = "constant"  # a lifted literal's parameter: constant0, constant1, ...
SHARED_BY = "//   the same code runs as "  # the shared function's comment line naming the other kernels


def _is_int_literal(token: str) -> bool:
    return token.isdigit() and int(token) < 2**31


@dataclass
class KernelCode:
    """One kernel's text as sharing sees it."""

    key: tuple  # the text with its own names renamed (and literals, where liftable), and ``extra``
    literals: list[int]  # its integer literals in text order
    buffers: list[str]  # its own buffer parameters, in the order the renaming numbered them
    liftable: bool


def kernel_code(body: str, buffers: list[str], tasklets: list[str], extra: tuple, work: int,
                max_work: int) -> KernelCode:
    """The key of a kernel's ``body``: ``buffers`` are its parameters,
    ``tasklets`` the identifiers prefixing its steps' locals in step order,
    ``extra`` what else must be equal (the buffers' element types); its
    literals may be lifted where its ``work`` (points times loop lengths) is at
    most ``max_work`` (the target's ``Tuning.lift_max_work``)."""
    own_buffers = set(buffers)
    prefixes = sorted(enumerate(tasklets), key=lambda it: -len(it[1]))
    renamed: dict[str, str] = {}
    order: list[str] = []
    literals: list[int] = []
    constant_kernel = bool(_CONSTANT_KERNEL.search(body))
    liftable = work <= max_work and not constant_kernel
    fixed = [] if constant_kernel else _constant_lines(body)

    def rename(match: re.Match) -> str:
        comment, word, number = match.groups()
        if comment:
            return ""
        if number:
            if not _is_int_literal(number):
                return number
            literals.append(int(number))
            kept = (not (liftable or (not constant_kernel and _offset(body, match.start(), match.end())))
                    or any(start <= match.start() < end for start, end in fixed))
            return number if kept else "@n"
        known = renamed.get(word)
        if known is None:
            known = word
            if word in own_buffers:
                known = f"@b{len(order)}"
                order.append(word)
            else:
                for position, prefix in prefixes:
                    if word == prefix or word.startswith(prefix + "_"):
                        known = f"@t{position}{word[len(prefix):]}"
                        break
            renamed[word] = known
        return known

    text = _TOKEN.sub(rename, body)
    order += sorted(own_buffers - set(order))  # a parameter the body never names still has its place
    return KernelCode((text, extra), literals, order, liftable)


def _offset(body: str, start: int, end: int) -> bool:
    """Whether the literal at ``body[start:end]`` is a term added or subtracted last
    (``a[256*i + j + 16384]``): an offset costs the same passed as a parameter, where a
    stride or a loop's bound does not."""
    # a window around it, not the body's whole prefix: a large kernel asks this of every literal
    before, after = body[max(0, start - _WINDOW):start].rstrip(), body[end:end + _WINDOW].lstrip()
    line = body[body.rfind("\n", 0, start) + 1:start]
    binary = before[:-1].rstrip()[-1:] not in _NO_OPERAND  # a unary sign has no term before it
    return (before.endswith(("+", "-")) and not before.endswith(("++", "--")) and binary
            and after[:1] in ("]", ")", ";", ",", "+", "-") and not after.startswith(("++", "--"))
            and not _LOOP_LINE.search(line))


def _constant_lines(body: str) -> list[tuple[int, int]]:
    """Character spans of ``body``'s lines whose literals must stay constants (``_CONSTANT_LINE``)."""
    spans, start = [], 0
    for line in body.splitlines(keepends=True):
        if _CONSTANT_LINE.search(line):
            spans.append((start, start + len(line)))
        start += len(line)
    return spans


def lift(body: str, positions: dict[int, str]) -> str:
    """``body`` with its integer literals at ``positions`` (text order) replaced by parameter names."""
    count = -1

    def replace(match: re.Match) -> str:
        nonlocal count
        comment, word, number = match.groups()
        if number and _is_int_literal(number):
            count += 1
            return positions.get(count, number)
        return match.group(0)

    return _TOKEN.sub(replace, body)


@dataclass
class Shared:
    """What a kernel runs: the function of the first kernel of its text, with
    its buffers bound to that function's parameters and its own values of the
    lifted literals."""

    function: str
    bound: dict[str, str]  # parameter of the function -> this kernel's buffer parameter
    constants: dict[str, int] = field(default_factory=dict)  # lifted parameter -> this kernel's value


def share(names: list[str], codes: list[KernelCode]) -> tuple[list[Shared], dict[str, dict[int, str]],
                                                             dict[str, list[str]]]:
    """For kernels ``names`` with their ``codes``: what each runs; per function
    written, its literals lifted to parameters (text position -> name); per
    function, the other kernels running it."""
    groups: dict[tuple, list[int]] = {}
    for n, code in enumerate(codes):
        groups.setdefault(code.key, []).append(n)  # the literals kept as constants are in it
    runs: list[Shared | None] = [None] * len(codes)
    lifted: dict[str, dict[int, str]] = {}
    also: dict[str, list[str]] = {}
    for members in groups.values():
        first = codes[members[0]]
        varying = [k for k in range(len(first.literals)) if len({codes[m].literals[k] for m in members}) > 1]
        positions = {k: f"{LIFTED}{j}" for j, k in enumerate(varying)}
        function = names[members[0]]
        lifted[function] = positions
        for m in members:
            runs[m] = Shared(function, dict(zip(first.buffers, codes[m].buffers)),
                             {p: codes[m].literals[k] for k, p in positions.items()})
        if len(members) > 1:
            also[function] = [names[m] for m in members[1:]]
    return runs, lifted, also
