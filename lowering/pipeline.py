"""The planner as data: the records ``lowering.plan`` lists its passes and
trials in, and the loop that runs them.

A plan is one run of a fixed list of named passes (``Pass``) over a
``Planning`` record, for one ``Choice`` of what to recompute.  The trials
that used to re-run the whole driver are ``Alternative`` records: each says
which field of the choice it changes, proposes a new choice from the plan so
far, and says how the winner is chosen (``keep``).  Listing them as data lets
a test hold the order to the one ``docs/design.md`` documents, and lets a
plan say which passes made it (``Plan.passes``).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

from symdiff.ir.graph import DataflowGraph

from .cost_model import CostModel
from .plan_types import Kernel, Plan
from .targets import Target


@dataclass(frozen=True)
class Problem:
    """What every run of the pipeline for one ``plan`` call shares."""
    graph: DataflowGraph  # the traced graph, sizes not bound
    sizes: dict[str, int]
    target: Target | None
    model: CostModel


@dataclass(frozen=True)
class Choice:
    """What one run of the pipeline recomputes: the producers named by origin
    (``rematerialise.rematerialise``) and whether values expanding their inputs
    are recomputed where read (``rematerialise.recompute_expansions``)."""
    recompute: tuple[str, ...]
    expand: bool = False


@dataclass
class Planning:
    """The state the passes of one run read and replace, in the order they fill it."""
    problem: Problem
    choice: Choice
    graph: DataflowGraph  # the traced graph until ``bind``, then the concrete graph the passes rewrite
    empty_fills: dict[str, float] = field(default_factory=dict)  # versions whose writers were all empty
    kernels: list[Kernel] = field(default_factory=list)  # in dispatch order, once placed
    plan: Plan | None = None  # once write modes are decided
    ran: list[str] = field(default_factory=list)  # names of the passes run, in order


def always(planning: Planning) -> bool:
    """A pass's condition when it runs in every plan."""
    return True


@dataclass(frozen=True)
class Pass:
    """One named step of the pipeline, run where ``when`` holds."""
    name: str
    run: Callable[[Planning], None]
    when: Callable[[Planning], bool] = always


def run_passes(passes: tuple[Pass, ...], planning: Planning) -> Plan:
    """Run ``passes`` in order over ``planning``; the plan the last one left,
    with the names of those run (``Plan.passes``)."""
    for p in passes:
        if p.when(planning):
            p.run(planning)
            planning.ran.append(p.name)
    if planning.plan is None:
        raise ValueError("the pipeline's passes built no plan (the list must end with the write modes)")
    return replace(planning.plan, passes=tuple(planning.ran))


def one_round(model: CostModel) -> int:
    """An alternative's number of rounds when it is tried once."""
    return 1


@dataclass(frozen=True)
class Alternative:
    """A trial: another ``Choice`` planned and compared with the plan so far.

    ``propose`` gives the choice to try from the problem, the current plan and
    its choice (None: nothing to try, which also ends the rounds); ``keep``
    says whether the trial's plan replaces the current one; it is tried up to
    ``rounds(model)`` times, each from the plan kept so far."""
    name: str
    changes: str  # the field of ``Choice`` it changes
    propose: Callable[[Problem, Plan, Choice], "Choice | None"]
    keep: Callable[[CostModel, Plan, Plan], bool]  # (model, trial, current)
    rounds: Callable[[CostModel], int] = one_round


def evaluate(alternatives: tuple[Alternative, ...], problem: Problem, choice: Choice,
             planned: Callable[[Choice], Plan]) -> Plan:
    """The plan for ``choice`` (``planned``), then each alternative in order
    tried against the plan kept so far."""
    current = planned(choice)
    for alt in alternatives:
        for _ in range(alt.rounds(problem.model)):
            proposed = alt.propose(problem, current, choice)
            if proposed is None:
                break
            trial = planned(proposed)
            if alt.keep(problem.model, trial, current):
                current, choice = trial, proposed
    return current
