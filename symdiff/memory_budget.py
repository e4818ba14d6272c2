"""Store or recompute, chosen to fit a memory budget.

A program's kernels pass values to later kernels through buffers: the
forward values the reverse pass reads (``x - mean``, ``tanh(x)``), and the
reverse pass's own partial results.  Each is a buffer live from the kernel
that writes it to the last that reads it (``lowering.buffer_plan`` shares a
buffer only between values whose lifetimes do not overlap).  Recomputing an
elementwise value in every kernel that reads it instead
(``lowering.rematerialise``) removes its buffer, at the price of evaluating
its expression again there, and may keep its own inputs alive longer.

``fit`` starts from the program's own plan (every forward value stored, but
what the lowering recomputes anyway: ``lowering.rematerialise``) and, while
the planned buffers exceed the budget, switches values to recompute, the most bytes per recomputed
operation first (the order ``lowering.cost_model`` prices), keeping a switch only where the plan's peak really drops;
a value passed over is tried again once after the others (its inputs may
have been switched since).  Where that ends over the budget, it starts again
from every value recomputed (tasklets writing several values split) and
stores values back while the plan fits (``_store_back``).  Each trial re-plans the program (no Slang
compile): a greedy search measured on the real plan, not the ILP of the DaCe
AD paper (arXiv 2509.02197), which models costs instead.  When no switch
helps any more and the plan still exceeds the budget, the program is refused
with the smallest peak found.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

from symdiff import ir
from symdiff.ir.library import has_library_nodes
from symdiff import lowering
import symdiff.lowering.rematerialise
from symdiff.lowering.cost_model import CostModel, Price, Strategy, with_recomputed

STORE, RECOMPUTE = Strategy.STORE.value, Strategy.RECOMPUTE.value


class MemoryBudgetError(ValueError):
    """No choice of recomputation fits the program's buffers in the budget."""


@dataclass
class Choice:
    """One forward tasklet's decision and what it was measured to cost."""

    tasklet: str
    source: str | None  # the user's line
    decision: str  # a lowering.cost_model.Strategy's value: "recompute" | "store"
    bytes_saved: int  # drop of the planned peak this switch made (0 for "store")
    ops: int  # operations recomputed per call by one reader (sympy's count of the value, times its points)
    reason: str


@dataclass
class MemoryPlan:
    """What ``fit`` chose (``program.memory_plan()`` returns it)."""

    budget: int
    stored_peak_bytes: int  # the program's own plan (no value chosen for recompute)
    peak_bytes: int  # with the choices made
    choices: list[Choice] = field(default_factory=list)

    def __str__(self) -> str:
        lines = [f"memory budget {self.budget:,} bytes: planned buffers {self.peak_bytes:,} bytes "
                 f"(the program's own plan: {self.stored_peak_bytes:,})"]
        for c in self.choices:
            where = f" ({c.source})" if c.source else ""
            saved = f", saves {c.bytes_saved:,} bytes" if c.decision == RECOMPUTE else ""
            lines.append(f"  {c.tasklet}{where}: {c.decision}{saved}, {c.ops:,} ops a reader; {c.reason}")
        return "\n".join(lines)


def ranked(graph: ir.DataflowGraph, sizes: Mapping[str, int]) -> list[Price]:
    """The price (``(tasklet, bytes, ops)``) of each value ``lowering.rematerialise``
    could recompute, the most bytes per recomputed operation first
    (``lowering.cost_model.CostModel.priced``)."""
    return CostModel.priced(graph, lowering.rematerialise.candidates(graph), sizes)


def _store_back(graph: ir.DataflowGraph, sizes: Mapping[str, int], budget: int,
                planned_peak: Callable[[ir.DataflowGraph], int]) -> tuple | None:
    """The last resort of ``fit``: every value of ``graph`` recomputed, its
    tasklets writing several values split first
    (``rematerialise.split_for_recompute``); if that fits, values are stored
    again, the fewest bytes per recomputed operation first, while the plan
    still fits.  Switching one value at a time misses plans where a buffer
    goes only once all its neighbours are recomputed (n-body's pair values).
    None when even that does not fit."""
    split = lowering.rematerialise.split_for_recompute(graph)
    candidates = ranked(split, sizes)
    chosen = frozenset(name for name, _, _ in candidates)
    peak = planned_peak(with_recomputed(split, chosen))
    if peak > budget:
        return None
    decisions: dict[str, Choice] = {}
    for name, nbytes, ops in reversed(candidates):
        trial = planned_peak(with_recomputed(split, chosen - {name}))
        source = split.node(name).source
        if trial <= budget:
            decisions[name] = Choice(name, source, STORE, 0, ops, "stored again, the plan still fits")
            chosen, peak = chosen - {name}, trial
        else:
            decisions[name] = Choice(name, source, RECOMPUTE, trial - peak, ops,
                                     f"storing its {nbytes:,}-byte value would exceed the budget")
    return split, candidates, chosen, peak, decisions


def fit(graph: ir.DataflowGraph, sizes: Mapping[str, int], budget: int,
        planned_peak: Callable[[ir.DataflowGraph], int]) -> tuple[ir.DataflowGraph, MemoryPlan]:
    """``graph`` (a backward graph) with the values its lowering recomputes
    chosen so that its planned buffers fit ``budget`` bytes, storing as much
    as fits; ``planned_peak`` plans.  Raises ``MemoryBudgetError`` when no
    choice fits."""
    if budget < 0:
        raise MemoryBudgetError(f"memory_budget is a number of bytes >= 0, not {budget}")
    if has_library_nodes(graph):  # its pieces are planned one by one (lowering.host_steps): no single peak
        raise MemoryBudgetError("memory_budget does not apply yet to a program with library nodes (np.linalg): "
                                "its compiled pieces run with library steps on the host between them; leave "
                                "memory_budget out")
    chosen: frozenset[str] = frozenset()
    peak = stored_peak = planned_peak(graph)
    decisions: dict[str, Choice] = {}
    candidates = ranked(graph, sizes)
    for _ in range(2):  # a second round retries what did not pay before
        for name, nbytes, ops in candidates:
            if peak <= budget or name in chosen:
                continue
            trial_peak = planned_peak(with_recomputed(graph, chosen | {name}))
            source = graph.node(name).source
            if trial_peak < peak:
                decisions[name] = Choice(name, source, RECOMPUTE, peak - trial_peak, ops,
                                         f"its {nbytes:,}-byte value is recomputed where it is read")
                chosen, peak = chosen | {name}, trial_peak
            else:
                decisions[name] = Choice(name, source, STORE, 0, ops,
                                         "recomputing it did not lower the planned peak")
    stored_back = _store_back(graph, sizes, budget, planned_peak) if peak > budget else None
    if stored_back is not None:  # one switch at a time fell short: from everything recomputed, it fits
        graph, candidates, chosen, peak, decisions = stored_back
    plan = MemoryPlan(budget, stored_peak, peak,
                      [decisions.get(name) or Choice(name, graph.node(name).source, STORE, 0, ops,
                                                     "the plan fits without recomputing it")
                       for name, _, ops in candidates])
    if peak > budget:
        raise MemoryBudgetError(
            f"the program's buffers need at least {peak:,} bytes, over memory_budget={budget:,}, even "
            f"recomputing every value that helps (the program's own plan: {stored_peak:,} bytes).\n{plan}\n"
            "Raise the budget, or split the program (smaller batches, or fewer values returned).")
    return with_recomputed(graph, chosen), plan
