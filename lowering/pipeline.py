"""The planner as data: the records ``lowering.plan`` lists its passes and
trials in, and the loop that runs them.

A plan is one run of a fixed list of named passes (``Pass``) over a
``Planning`` record, for one ``Choice`` of what to recompute.  The trials are
``Alternative`` records: each says which field of the choice it changes,
proposes a new choice from the plan so far, and says how the winner is chosen
(``keep``).  Listing them as data lets a test hold the order to the one
``docs/design.md`` documents, and lets a plan say which passes made it
(``Plan.passes``).

A pass says which fields of the choice it reads (``Pass.reads``), so the
passes before the first one reading a field two choices differ in give both
the same state.  ``Pipeline`` runs them once: it keeps the state before each
pass that reads the choice (a fork of the graph), and a trial starts from the
latest kept state its choice agrees with, running only the passes after it
(the first five of the list, a tenth of a run over the bench workloads, run
once per plan instead of once per trial).
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
    # the element sets ``in_place.share_versions`` enumerated, for the runs after (their steps are mostly the same)
    elements: dict = field(default_factory=dict, compare=False)


# Which values expanding their inputs a run recomputes where read (``rematerialise.recompute_expansions``):
# none, those whose recomputation reads nothing more (a seed's broadcast), or all.
EXPANSIONS = ("none", "free", "all")


@dataclass(frozen=True)
class Choice:
    """What one run of the pipeline recomputes: the producers named by origin
    (``rematerialise.rematerialise``) and which values expanding their inputs
    are recomputed where read (one of ``EXPANSIONS``)."""
    recompute: tuple[str, ...]
    expand: str = "none"

    def __post_init__(self) -> None:
        if self.expand not in EXPANSIONS:
            raise ValueError(f"expand={self.expand!r} is not one of {EXPANSIONS}")


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

    def fork(self, choice: Choice) -> "Planning":
        """This state, for ``choice``, to rewrite apart from this one (``DataflowGraph.fork``:
        the rewrites go on naming new nodes as they would here).  Only a state before
        placement forks: kernels and plans are not copied."""
        if self.kernels or self.plan is not None:
            raise ValueError("a pass reading the choice runs after placement: only a graph's state forks")
        return Planning(self.problem, choice, self.graph.fork(), dict(self.empty_fills), ran=list(self.ran))


def always(planning: Planning) -> bool:
    """A pass's condition when it runs in every plan."""
    return True


@dataclass(frozen=True)
class Pass:
    """One named step of the pipeline, run where ``when`` holds; ``reads``: the
    fields of ``Choice`` that ``run`` or ``when`` reads (none: every choice's
    run shares what it does)."""
    name: str
    run: Callable[[Planning], None]
    when: Callable[[Planning], bool] = always
    reads: tuple[str, ...] = ()

    def step(self, planning: Planning) -> None:
        """Run this pass over ``planning`` where its condition holds."""
        if self.when(planning):
            self.run(planning)
            planning.ran.append(self.name)


def _finished(planning: Planning) -> Plan:
    """The plan the last pass left, with the names of those run (``Plan.passes``)."""
    if planning.plan is None:
        raise ValueError("the pipeline's passes built no plan (the list must end with the write modes)")
    return replace(planning.plan, passes=tuple(planning.ran))


class Pipeline:
    """The runs of ``passes`` over one ``Problem``, one per ``Choice``, sharing
    what their choices share (the module docstring).  The state before a pass
    reading the choice depends only on the fields read before it: the first
    run keeps it (a fork, so that the run going on cannot change it), and a
    later run whose choice has the same values of those fields starts there.
    A run gives the plan a run of every pass from the traced graph gives.

    Only the first run's states are kept (a fork costs a copy of the graph,
    about what the passes before ``rematerialise`` cost): each trial changes
    one field of a choice that agrees with the first choice on every field
    read before that field's first pass (``plan.ALTERNATIVES`` change the
    recompute list, read first; the expansions trial keeps the first choice's
    list).  A run that shares no kept state runs every pass."""

    def __init__(self, passes: tuple[Pass, ...], problem: Problem):
        self.passes, self.problem = passes, problem
        # the positions of the passes reading the choice, each with the fields read before it
        self._branches: list[tuple[int, tuple[str, ...]]] = []
        before: tuple[str, ...] = ()
        for k, p in enumerate(passes):
            if p.reads:
                self._branches.append((k, before))
                before += tuple(f for f in p.reads if f not in before)
        self._kept: dict[tuple, Planning] = {}

    def run(self, choice: Choice) -> Plan:
        """The plan for ``choice``: the passes after the latest kept state it shares."""
        start, planning = 0, None
        for k, fields in reversed(self._branches):
            kept = self._kept.get(self._key(k, fields, choice))
            if kept is not None:
                start, planning = k, kept.fork(choice)
                break
        planning = planning or Planning(self.problem, choice, self.problem.graph)
        branches = {} if self._kept else dict(self._branches)  # the first run keeps its states
        for k in range(start, len(self.passes)):
            if k in branches:
                self._kept[self._key(k, branches[k], choice)] = planning.fork(choice)
            self.passes[k].step(planning)
        return _finished(planning)

    @staticmethod
    def _key(k: int, fields: tuple[str, ...], choice: Choice) -> tuple:
        return (k, *(getattr(choice, f) for f in fields))


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
