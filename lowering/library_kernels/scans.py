"""Device kernels for the scan ops (``ir.library.scan``): ``scan.add``,
``scan.multiply`` and ``scan.linear`` along one axis, O(n) work each.

An array of shape ``(outer, n, inner)`` around the scanned axis holds
``outer * inner`` *lines* of ``n`` elements, ``inner`` apart.

* Sequential targets (the CPU device): one loop in memory order, the
  running values of a row of ``inner`` lines in a scratch row (for
  ``inner == 1`` a register), so g++ vectorises across ``inner``; the sizes
  are uniforms, so one module serves every shape.
* GPU targets with many lines (or short ones): a thread per line, looping
  along it (neighbouring threads read neighbouring elements).
* lavapipe (a GPU target whose barriers cost more than they give,
  ``Target.workgroup_reductions`` off) with few long lines: a thread per
  piece of ``Tuning.scan_gpu_chunk`` elements, totalled, a line's totals scanned by one
  thread, the pieces scanned again from their offsets (``_in_chunks``).
* Vulkan and CUDA with few long lines: a reduce-then-scan in workgroups of
  ``GROUP`` threads (``Tuning.group_size``) over blocks of ``GROUP * per_thread``
  elements.  Each
  block's total (one dispatch: loaded into groupshared memory, each thread
  combining its own run of elements, then a Hillis-Steele scan of the
  threads' totals), the exclusive scan of a line's block totals (one
  workgroup per line, in chunks of ``GROUP`` with a carry), then each block
  scanned again from its line's offset and stored.  Two reads and one write
  per element, and the combining order is fixed, so results do not depend
  on timing.

Every op is a scan of a *state* under an associative ``combine`` (left is
earlier): a value for add and multiply, a pair ``(a, b)`` for the linear
recurrence (``(a1, b1)`` then ``(a2, b2)`` is ``(a1 a2, a2 b1 + b2)``; its
result is ``b``).

The sizes are the target's ``Tuning`` fields (``group_size``, ``max_groups``,
``scan_*``: ``lowering.targets``).
"""
from __future__ import annotations

import math
from typing import Sequence

from .. import targets, threads
from ..printer import SLANG_TYPES
from .registry import Dispatch, Kernel, Spec, register

# op -> (state fields, identity per field, combine(l, r) per field, the result's field)
_STATES = {
    "scan.add": (("v",), ("0",), ("l.v + r.v",), "v"),
    "scan.multiply": (("v",), ("1",), ("l.v * r.v",), "v"),
    "scan.linear": (("a", "b"), ("1", "0"), ("l.a * r.a", "r.a * l.b + r.b"), "b"),
}
# the sequential step from the previous result ``y`` (the identity's result field before the first)
_STEPS = {"scan.add": "y + A(in0[p])", "scan.multiply": "y * A(in0[p])", "scan.linear": "A(in0[p]) * y + A(in1[p])"}


def _accumulator(dtype: str) -> str:
    """The graph dtype a scan of ``dtype`` accumulates in: double for floats.
    A float32 running sum's error grows with the line (16M elements: 3e-2 of
    the largest value, sequentially); in double each result is its float32
    rounding, and + and * cost the same (also on lavapipe, whose double
    arithmetic is right)."""
    return "float64" if dtype.startswith("float") else dtype


def _prelude(op: str, dtype: str) -> str:
    fields, identity, combine, _ = _STATES[op]
    inputs = ", ".join(f"RWStructuredBuffer<T> in{k}" for k in range(len(fields)))
    return "\n".join([
        f"// {op} ({dtype}): a scan of states under an associative combine, left earlier, in A",
        f"typealias T = {SLANG_TYPES[dtype]};",
        f"typealias A = {SLANG_TYPES[_accumulator(dtype)]};",
        "struct S { " + " ".join(f"A {f};" for f in fields) + " };",
        "S identity() { S s; " + " ".join(f"s.{f} = A({i});" for f, i in zip(fields, identity)) + " return s; }",
        "S combine(S l, S r) { S s; " + " ".join(f"s.{f} = {c};" for f, c in zip(fields, combine))
        + " return s; }",
        f"S load({inputs}, int p) {{ S s; " + " ".join(f"s.{f} = A(in{k}[p]);" for k, f in enumerate(fields))
        + " return s; }",
        "S load_scratch(RWStructuredBuffer<A> scratch0, int q) { S s; "
        + " ".join(f"s.{f} = scratch0[q * {len(fields)} + {k}];" for k, f in enumerate(fields)) + " return s; }",
        "void store_scratch(RWStructuredBuffer<A> scratch0, int q, S s) { "
        + " ".join(f"scratch0[q * {len(fields)} + {k}] = s.{f};" for k, f in enumerate(fields)) + " }",
        "",
    ])


def _grid(groups: int, size: int, tuning: targets.Tuning) -> tuple[tuple[int, int, int], int]:
    """Thread counts for ``groups`` workgroups of ``size`` threads (rows of at
    most ``tuning.max_groups``) and the row's width in groups."""
    width = min(groups, tuning.max_groups)
    return (width * size, -(-groups // width), 1), width


def _sequential(op: str, outer: int, n: int, inner: int, reverse: bool, arity: int) -> tuple[str, Dispatch]:
    """One thread running every line in memory order (the CPU device).  The
    sizes are uniforms, so one module (one g++ compile) serves every scan of
    an op and dtype: a program's cumsum and its reverse pass's reversed one."""
    inputs = "".join(f", RWStructuredBuffer<T> in{k}" for k in range(arity))
    step = _STEPS[op]
    first = _STATES[op][1][_STATES[op][0].index(_STATES[op][3])]
    source = (
        f"[shader(\"compute\")]\n[numthreads(1, 1, 1)]\n"
        f"void scan_sequential(uint3 t: SV_DispatchThreadID, uniform int outer, uniform int n, uniform int inner, "
        f"uniform int reverse{inputs}, RWStructuredBuffer<T> out0, RWStructuredBuffer<A> scratch0)\n{{\n"
        "    for (int o = 0; o < outer; o++)\n    {\n"
        "        if (inner == 1)  // a line is contiguous: its running value in a register\n        {\n"
        f"            A y = A({first});\n"
        "            for (int kk = 0; kk < n; kk++)\n            {\n"
        "                int p = o * n + (reverse != 0 ? n - 1 - kk : kk);\n"
        f"                y = {step};\n                out0[p] = T(y);\n            }}\n"
        "            continue;\n        }\n"
        "        for (int kk = 0; kk < n; kk++)  // rows of lines: the running values in a row of scratch\n        {\n"
        "            int row = (o * n + (reverse != 0 ? n - 1 - kk : kk)) * inner;\n"
        "            for (int i = 0; i < inner; i++)\n            {\n"
        "                int p = row + i;\n"
        f"                A y = kk == 0 ? A({first}) : scratch0[i];\n"
        f"                y = {step};\n                scratch0[i] = y;\n                out0[p] = T(y);\n"
        "            }\n        }\n    }\n}\n")
    buffers = {**{f"in{k}": f"in{k}" for k in range(arity)}, "out0": "out0", "scratch0": "scratch0"}
    uniforms = {"outer": outer, "n": n, "inner": inner, "reverse": int(reverse)}
    return source, Dispatch("scan_sequential", (1, 1, 1), buffers, uniforms)


def _position(n: int, inner: int, reverse: bool) -> str:
    """Slang for ``pos(line, k)``: the flat index of a line's k-th element in scan order."""
    k = f"({n - 1} - k)" if reverse else "k"
    return (f"int pos(int line, int k) {{ return (line / {inner}) * {n * inner} + line % {inner} "
            f"+ {k} * {inner}; }}\n")


def _chunk_functions(op: str, n: int, inner: int, reverse: bool, arity: int, chunks: int) -> str:
    """Slang for scanning lines in ``chunks`` pieces each, piece ``q`` of line
    ``q / chunks`` a thread's: ``chunk_total`` (the piece's total state into
    scratch ``q``), ``line_offsets`` (a line's totals turned into each
    piece's exclusive prefix, in order) and ``chunk_scan`` (the piece scanned
    from its prefix, stored)."""
    typed = ", ".join(f"RWStructuredBuffer<T> in{k}" for k in range(arity))
    args = ", ".join(f"in{k}" for k in range(arity))
    bounds = (f"    int q = int(t.x), line = q / {chunks}, c = q % {chunks};\n"
              f"    int lo = int(int64_t({n}) * c / {chunks}), hi = int(int64_t({n}) * (c + 1) / {chunks});\n")
    return (
        _position(n, inner, reverse)
        + f"void chunk_total(uint3 t, {typed}, RWStructuredBuffer<A> scratch0)\n{{\n{bounds}"
        "    S acc = identity();\n"
        f"    for (int k = lo; k < hi; k++) acc = combine(acc, load({args}, pos(line, k)));\n"
        "    store_scratch(scratch0, q, acc);\n}\n\n"
        "void line_offsets(int line, RWStructuredBuffer<A> scratch0)\n{\n    S carry = identity();\n"
        f"    for (int q = line * {chunks}; q < (line + 1) * {chunks}; q++)\n    {{\n"
        "        S total = load_scratch(scratch0, q);\n        store_scratch(scratch0, q, carry);\n"
        "        carry = combine(carry, total);\n    }\n}\n\n"
        f"void chunk_scan(uint3 t, {typed}, RWStructuredBuffer<T> out0, RWStructuredBuffer<A> scratch0)\n{{\n"
        f"{bounds}    S acc = {'load_scratch(scratch0, q)' if chunks > 1 else 'identity()'};\n"
        "    for (int k = lo; k < hi; k++)\n    {\n"
        f"        int p = pos(line, k);\n        acc = combine(acc, load({args}, p));\n"
        f"        out0[p] = T(acc.{_STATES[op][3]});\n    }}\n}}\n\n")


def _on_workers(op: str, lines: int, n: int, reverse: bool, arity: int, workers: int,
                tuning: targets.Tuning) -> tuple[str, Dispatch, int]:
    """Contiguous lines over the CPU device's worker threads (``lowering.threads``):
    each line cut into ``chunks`` pieces (about ``tuning.scan_cpu_pieces`` in all, whatever
    the worker count); the workers total their pieces, one thread scans each
    line's totals (exclusive), and the workers scan their pieces again from
    those offsets.  The order is fixed, so every worker count gives the same
    bits.  Two passes over the input, each a dependent chain of additions per
    piece: ``2 / workers`` of the single loop's time, so it is taken only
    with more than two workers.  Returns the source, its dispatch and the
    scratch's length in states."""
    chunks = max(1, min(n // tuning.scan_cpu_chunk, -(-tuning.scan_cpu_pieces // lines)))
    pieces = lines * chunks
    ins = [f"RWStructuredBuffer<T> in{k}" for k in range(arity)]
    names = [f"in{k}" for k in range(arity)]
    totals, total_call = threads.parallel_kernel("chunk_total", ins + ["RWStructuredBuffer<A> scratch0"],
                                                 (pieces, 1), pieces, names + ["scratch0"], "totals")
    scans, scan_call = threads.parallel_kernel("chunk_scan", ins + ["RWStructuredBuffer<T> out0",
                                                                    "RWStructuredBuffer<A> scratch0"],
                                               (pieces, 1), pieces, names + ["out0", "scratch0"], "scans")
    source = (_chunk_functions(op, n, 1, reverse, arity, chunks) + totals + "\n" + scans + "\n"
              f"[shader(\"compute\")]\n[numthreads(1, 1, 1)]\n"
              f"void scan_workers(uint3 t: SV_DispatchThreadID, uniform int workers, {', '.join(ins)}, "
              "RWStructuredBuffer<T> out0, RWStructuredBuffer<A> scratch0)\n{\n")
    if chunks > 1:
        source += (f"    {total_call}\n"
                   f"    for (int line = 0; line < {lines}; line++) line_offsets(line, scratch0);\n")
    source += f"    {scan_call}\n}}\n"
    buffers = {**{f"in{k}": f"in{k}" for k in range(arity)}, "out0": "out0", "scratch0": "scratch0"}
    return source, Dispatch("scan_workers", (1, 1, 1), buffers, {"workers": workers}), pieces * len(_STATES[op][0])


def _in_chunks(op: str, lines: int, n: int, inner: int, reverse: bool,
               arity: int, tuning: targets.Tuning) -> tuple[str, tuple[Dispatch, ...], int]:
    """Few long lines on a GPU target without cheap barriers (lavapipe): a
    thread per piece of ``tuning.scan_gpu_chunk`` elements, the same three steps as
    ``_on_workers`` as three dispatches (pieces totalled, a thread per line
    scanning its totals, pieces scanned again).  The workgroup scan's
    barriers made lavapipe take 1.8 s over a 16M cumsum (measured)."""
    chunks = -(-n // tuning.scan_gpu_chunk)
    pieces = lines * chunks
    typed = "".join(f", RWStructuredBuffer<T> in{k}" for k in range(arity))
    args = "".join(f", in{k}" for k in range(arity))
    group = tuning.scan_line_group
    grid, width = _grid(-(-pieces // group), group, tuning)
    lines_grid, _ = _grid(-(-lines // group), group, tuning)
    head = f"[shader(\"compute\")]\n[numthreads({group}, 1, 1)]\n"
    piece = f"    int q = int(t.x) + int(t.y) * {width * group};\n    if (q >= {pieces}) return;\n"
    source = (_chunk_functions(op, n, inner, reverse, arity, chunks)
              + head + f"void piece_totals(uint3 t: SV_DispatchThreadID{typed}, RWStructuredBuffer<A> scratch0)\n{{\n"
              + piece + f"    chunk_total(uint3(q, 0, 0){args}, scratch0);\n}}\n\n"
              + head + "void piece_offsets(uint3 t: SV_DispatchThreadID, RWStructuredBuffer<A> scratch0)\n{\n"
              f"    if (int(t.x) < {lines}) line_offsets(int(t.x), scratch0);\n}}\n\n"
              + head + f"void piece_scans(uint3 t: SV_DispatchThreadID{typed}, RWStructuredBuffer<T> out0, "
              "RWStructuredBuffer<A> scratch0)\n{\n"
              + piece + f"    chunk_scan(uint3(q, 0, 0){args}, out0, scratch0);\n}}\n")
    ins = {f"in{k}": f"in{k}" for k in range(arity)}
    dispatches = (Dispatch("piece_totals", grid, {**ins, "scratch0": "scratch0"}),
                  Dispatch("piece_offsets", lines_grid, {"scratch0": "scratch0"}),
                  Dispatch("piece_scans", grid, {**ins, "out0": "out0", "scratch0": "scratch0"}))
    return source, dispatches, pieces * len(_STATES[op][0])


def _per_line(op: str, lines: int, n: int, inner: int, reverse: bool, arity: int,
              tuning: targets.Tuning) -> tuple[str, Dispatch]:
    """A thread per line (GPU targets, many or short lines)."""
    inputs = "".join(f", RWStructuredBuffer<T> in{k}" for k in range(arity))
    args = ", ".join(f"in{k}" for k in range(arity))
    result = _STATES[op][3]
    group = tuning.scan_line_group
    threads, width = _grid(-(-lines // group), group, tuning)
    source = (_position(n, inner, reverse)
              + f"[shader(\"compute\")]\n[numthreads({group}, 1, 1)]\n"
              f"void scan_lines(uint3 t: SV_DispatchThreadID{inputs}, RWStructuredBuffer<T> out0)\n{{\n"
              f"    int line = int(t.x) + int(t.y) * {width * group};\n"
              f"    if (line >= {lines}) return;\n"
              f"    S acc = identity();\n"
              f"    for (int k = 0; k < {n}; k++)\n    {{\n"
              f"        int p = pos(line, k);\n        acc = combine(acc, load({args}, p));\n"
              f"        out0[p] = T(acc.{result});\n    }}\n}}\n")
    buffers = {**{f"in{k}": f"in{k}" for k in range(arity)}, "out0": "out0"}
    return source, Dispatch("scan_lines", threads, buffers)


def _workgroups(op: str, dtype: str, lines: int, n: int, inner: int, reverse: bool,
                arity: int, tuning: targets.Tuning) -> tuple[str, tuple[Dispatch, ...], tuple[tuple[str, int], ...]]:
    """The reduce-then-scan of few long lines (GPU targets; see the module docstring)."""
    fields = len(_STATES[op][0])
    size = fields * (8 if _accumulator(dtype) == "float64" else 4)
    group = tuning.group_size
    per_thread = max(1, tuning.scan_tile_bytes // (group * size))
    block = group * per_thread
    blocks = -(-n // block)
    inputs = "".join(f", RWStructuredBuffer<T> in{k}" for k in range(arity))
    args = ", ".join(f"in{k}" for k in range(arity))
    result = _STATES[op][3]
    groups = lines * blocks
    threads, width = _grid(groups, group, tuning)
    scan_part = (
        "    for (int d = 1; d < GROUP; d *= 2)\n    {\n"
        "        S other = j >= d ? part[j - d] : identity();\n"
        "        GroupMemoryBarrierWithGroupSync();\n"
        "        if (j >= d) part[j] = combine(other, part[j]);\n"
        "        GroupMemoryBarrierWithGroupSync();\n    }\n")
    source = (
        _position(n, inner, reverse)
        + f"static const int GROUP = {group};\nstatic const int PER_THREAD = {per_thread};\n"
        f"groupshared S tile[{block}];\ngroupshared S part[GROUP];\n\n"
        "// Scan block `blk` of `line` from `carry`: its total; with `write`, its results stored.\n"
        f"S block_scan(int line, int blk, int j, S carry, bool write{inputs}, RWStructuredBuffer<T> out0)\n{{\n"
        f"    int k0 = blk * {block};\n"
        "    for (int e = 0; e < PER_THREAD; e++)\n    {\n"
        f"        int k = k0 + e * GROUP + j;\n"
        f"        tile[e * GROUP + j] = k < {n} ? load({args}, pos(line, k)) : identity();\n    }}\n"
        "    GroupMemoryBarrierWithGroupSync();\n"
        "    S acc = identity();\n"
        "    for (int e = 0; e < PER_THREAD; e++) acc = combine(acc, tile[j * PER_THREAD + e]);\n"
        "    part[j] = acc;\n    GroupMemoryBarrierWithGroupSync();\n"
        + scan_part +
        "    S total = part[GROUP - 1];\n"
        "    if (write)\n    {\n"
        "        S run = combine(carry, j > 0 ? part[j - 1] : identity());\n"
        "        for (int e = 0; e < PER_THREAD; e++)\n        {\n"
        "            run = combine(run, tile[j * PER_THREAD + e]);\n"
        "            tile[j * PER_THREAD + e] = run;\n        }\n"
        "        GroupMemoryBarrierWithGroupSync();\n"
        "        for (int e = 0; e < PER_THREAD; e++)\n        {\n"
        "            int k = k0 + e * GROUP + j;\n"
        f"            if (k < {n}) out0[pos(line, k)] = T(tile[e * GROUP + j].{result});\n        }}\n    }}\n"
        "    return total;\n}\n\n"
        f"[shader(\"compute\")]\n[numthreads({group}, 1, 1)]\n"
        f"void block_totals(uint3 g: SV_GroupID, uint3 l: SV_GroupThreadID{inputs}, RWStructuredBuffer<T> out0, "
        "RWStructuredBuffer<A> scratch0)\n{\n"
        f"    int q = int(g.x) + int(g.y) * {width};\n    if (q >= {groups}) return;\n"
        f"    S total = block_scan(q / {blocks}, q % {blocks}, int(l.x), identity(), false, {args}, out0);\n"
        "    if (l.x == 0) store_scratch(scratch0, q, total);\n}\n\n"
        f"[shader(\"compute\")]\n[numthreads({group}, 1, 1)]\n"
        "void scan_totals(uint3 g: SV_GroupID, uint3 l: SV_GroupThreadID, RWStructuredBuffer<A> scratch0)\n{\n"
        "    int line = int(g.x), j = int(l.x);\n    S carry = identity();\n"
        f"    for (int c = 0; c < {blocks}; c += GROUP)\n    {{\n"
        f"        int t = c + j;\n        part[j] = t < {blocks} ? load_scratch(scratch0, line * {blocks} + t) "
        ": identity();\n        GroupMemoryBarrierWithGroupSync();\n"
        + scan_part.replace("    ", "        ", 1).replace("\n    ", "\n        ") +
        f"        if (t < {blocks}) store_scratch(scratch0, line * {blocks} + t, "
        "combine(carry, j > 0 ? part[j - 1] : identity()));\n"
        "        carry = combine(carry, part[GROUP - 1]);\n        GroupMemoryBarrierWithGroupSync();\n    }\n}\n\n"
        f"[shader(\"compute\")]\n[numthreads({group}, 1, 1)]\n"
        f"void block_outputs(uint3 g: SV_GroupID, uint3 l: SV_GroupThreadID{inputs}, RWStructuredBuffer<T> out0, "
        "RWStructuredBuffer<A> scratch0)\n{\n"
        f"    int q = int(g.x) + int(g.y) * {width};\n    if (q >= {groups}) return;\n"
        f"    block_scan(q / {blocks}, q % {blocks}, int(l.x), load_scratch(scratch0, q), true, {args}, out0);\n}}\n")
    ins = {f"in{k}": f"in{k}" for k in range(arity)}
    dispatches = (Dispatch("block_totals", threads, {**ins, "out0": "out0", "scratch0": "scratch0"}),
                  Dispatch("scan_totals", (lines * group, 1, 1), {"scratch0": "scratch0"}),
                  Dispatch("block_outputs", threads, {**ins, "out0": "out0", "scratch0": "scratch0"}))
    return source, dispatches, ((_accumulator(dtype), groups * fields),)


def build(target: targets.Target, inputs: Sequence[Spec], outputs: Sequence[Spec], params: dict,
          op: str) -> Kernel | None:
    """The scan's kernel (see the module docstring); None for a dtype without one (bool)."""
    shape, dtype = inputs[0]
    if dtype not in ("float32", "float64", "int32"):
        return None
    axis, reverse = params["axis"], bool(params.get("reverse", False))
    outer, n, inner = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])
    lines, arity = outer * inner, len(inputs)
    prelude = _prelude(op, dtype)
    workers = threads.cpu_workers() if target.worker_threads else 1
    tuning = target.tuning
    if target.sequential and inner == 1 and lines * n >= tuning.scan_on_workers and workers > 2:
        source, dispatch, states = _on_workers(op, lines, n, reverse, arity, workers, tuning)
        return Kernel(prelude + source, (dispatch,), ((_accumulator(dtype), states),))
    if target.sequential:
        source, dispatch = _sequential(op, outer, n, inner, reverse, arity)
        return Kernel(prelude + source, (dispatch,), ((_accumulator(dtype), inner),))
    if lines >= tuning.scan_few_lines or n <= tuning.group_size * 2:
        source, dispatch = _per_line(op, lines, n, inner, reverse, arity, tuning)
        return Kernel(prelude + source, (dispatch,))
    if not target.workgroup_reductions:
        source, dispatches, states = _in_chunks(op, lines, n, inner, reverse, arity, tuning)
        return Kernel(prelude + source, dispatches, ((_accumulator(dtype), states),))
    source, dispatches, scratch = _workgroups(op, dtype, lines, n, inner, reverse, arity, tuning)
    return Kernel(prelude + source, dispatches, scratch)


for _op in _STATES:
    register(_op, lambda target, inputs, outputs, params, op=_op: build(target, inputs, outputs, params, op))
