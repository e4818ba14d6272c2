"""Scatters: writes whose elements several points update (mode ``"atomic"``:
``np.add.at``, a gather's gradient), as calls of ``atomic_<op>(buf, i, v)``,
a helper in the one form the target needs (decided here, never by the Slang
compiler), declared once per module (``declaration``).  Applies to a kernel
with such a write."""
from __future__ import annotations

from symdiff.ir.graph import Tasklet

from .. import targets
from ..plan_types import LoweringError, Step, Write
from .writer import COMBINE, FUNCTION, STORAGE_TYPES, KernelShape, KernelWriter, UpdateForm

# a value's bits, to compare in a compare-and-swap loop (a NaN never equals itself)
_BITS = {"float": "asuint", "int": ""}


class Scatter(UpdateForm):
    name = "scatter"
    declares = FUNCTION

    def applies(self, shape: KernelShape) -> bool:
        return any(w.mode == "atomic" for step in shape.kernel.steps for w in step.writes)

    def update(self, w: KernelWriter, step: Step, write: Write, buf: str, idx: str, value: str,
               depth: int) -> None:
        storage = STORAGE_TYPES[w.g.containers[write.memlet.container].dtype]
        _check_atomic(w.target, storage, write.memlet.accumulate, step.tasklet)
        w.colliding = True
        w.declare(self, (storage, write.memlet.accumulate))
        w.emit(f"atomic_{write.memlet.accumulate}({buf}, {idx}, {value});", depth)

    def declaration(self, key: tuple[str, str], target: targets.Target) -> str:
        """The ``atomic_<op>`` helper of a (storage type, accumulation) pair (``helper``)."""
        storage, op = key
        return helper(storage, op, target)


def _check_atomic(target: targets.Target, storage: str, op: str, t: Tasklet) -> None:
    """Refuse colliding updates ``target`` has no exact form for: a double max,
    min or product needs a 64-bit float compare-and-swap, which Slang lacks."""
    if target.concurrent_updates and storage == "double" and op != "sum":
        where = f" ({t.source})" if t.source else ""
        raise LoweringError(f"tasklet {t.name}{where}: several threads update one float64 element with "
                            f"{op} on {target.name}, which has no 64-bit float compare-and-swap; "
                            "use float32, or device='cpu'")


def helper(storage: str, op: str, target: targets.Target) -> str:
    """``atomic_<op>(buf, i, v)``: ``buf[i] = buf[i] <op> v`` where threads may
    update one element together: a plain update where threads run one
    after another; the hardware atomic for sums (and integer max/min) where
    the target has one; else a compare-and-swap loop, which is also how float
    max/min get numpy's NaN propagation (hardware float atomic max/min drop
    NaNs, and CUDA has none).  Max and min return early when the element
    already wins: they only move one way, so a stale read decides that safely."""
    update = COMBINE[op].format(a="old", b="v")
    if target.sequential:
        body = [f"buf[i] = {COMBINE[op].format(a='buf[i]', b='v')};"]
    elif op == "sum" and (storage == "int" or target.float_atomic_add):
        body = ["InterlockedAdd(buf[i], v);"]
    elif op in ("max", "min") and storage == "int":
        body = [f"Interlocked{op.title()}(buf[i], v);"]
    else:
        bits = _BITS[storage]
        swap = "InterlockedCompareExchange" if storage == "int" else "InterlockedCompareExchangeFloatBitwise"
        body = [f"{storage} old = buf[i];", "for (;;)", "{", f"    {storage} updated = {update};"]
        if op in ("max", "min"):
            body.append(f"    if ({bits}(updated) == {bits}(old)) break;")
        body += [f"    {storage} seen;", f"    {swap}(buf[i], old, updated, seen);",
                 f"    if ({bits}(seen) == {bits}(old)) break;", "    old = seen;  // another thread came first", "}"]
    lines = "".join(f"    {line}\n" for line in body)
    return f"void atomic_{op}(RWStructuredBuffer<{storage}> buf, int i, {storage} v)\n{{\n{lines}}}"


FORM = Scatter()
