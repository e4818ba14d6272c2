"""The planner as data: the passes and trials ``lowering.plan`` lists are the
ones ``docs/design.md`` documents, in its order, a plan names the passes
that made it, and a trial runs only the passes its choice changes, planning
what every pass run afresh plans."""
import collections
import re
from dataclasses import replace
from pathlib import Path

import numpy as np

import symdiff as sd
from symdiff import ir
from symdiff.backward import add_backward_pass
from symdiff.lowering import targets
from symdiff.lowering.codegen import generate
from symdiff.lowering.cost_model import CostModel
from symdiff.lowering.pipeline import Choice, Pass, Pipeline, Problem
from symdiff.lowering.plan import ALTERNATIVES, PASSES, WHOLE_PLAN_ALTERNATIVES, plan
from symdiff.lowering.rematerialise import candidates
from lowering_graphs import chain

DESIGN = (Path(__file__).parents[2] / "docs" / "design.md").read_text()


def _documented_passes() -> list[str]:
    """The numbered list under the Pipeline bullet of "How lowering/ is put together"."""
    section = DESIGN[DESIGN.index("- **Pipeline**"):DESIGN.index("- **Code generation**")]
    return re.findall(r"^\s+\d+\. `(\w+)`", section, flags=re.M)


def _documented_alternatives() -> list[str]:
    """The trials in italics after "The trials are", in the order the text states."""
    section = DESIGN[DESIGN.index("The trials are `Alternative`"):DESIGN.index("- **Code generation**")]
    return re.findall(r"\*([a-z ]+)\*", section)


def test_the_pass_list_is_the_documented_order():
    documented = _documented_passes()
    assert len(documented) == 19
    assert [p.name for p in PASSES] == documented


def test_the_alternatives_are_the_documented_ones_in_order():
    assert [a.name for a in ALTERNATIVES + WHOLE_PLAN_ALTERNATIVES] == _documented_alternatives()
    assert [a.changes for a in ALTERNATIVES + WHOLE_PLAN_ALTERNATIVES] == ["recompute", "recompute", "expand"]


def test_a_plan_names_the_passes_that_ran_in_list_order():
    g, _ = chain(256, ops=3)
    add_backward_pass(g, ["x"], ["y"])
    conditional = {"recompute_expansions", "recompute_cheap", "finish_in_last_workgroup"}
    unconditional = [n for n in _documented_passes() if n not in conditional]
    # no target: no trials, no recomputed calls, no workgroup finish; nothing here expands its inputs
    assert list(plan(g, {}).passes) == unconditional
    # CUDA recomputes calls and finishes single-pass reductions in the last workgroup
    ran = list(plan(g, {}, "cuda").passes)
    assert ran == [n for n in _documented_passes() if n != "recompute_expansions"]


def _pairs(x: sd.f32[256], m: sd.f32[256]):
    d = x[:, None] - x[None, :]
    return np.sum(m[:, None] * m[None, :] / np.sqrt(d * d + 1.0))


def test_trials_run_only_the_passes_after_the_first_reading_what_they_change():
    g = ir.trace(_pairs).copy()
    sd.add_backward_pass(g, inputs=["x", "m"], outputs=g.results)
    target = targets.of("cpu")
    problem = Problem(g, {}, target, CostModel.of(target))
    runs = collections.Counter()

    def counted(p: Pass) -> Pass:
        def run(planning):
            runs[p.name] += 1
            p.run(planning)
        return replace(p, run=run)

    shared = Pipeline(tuple(counted(p) for p in PASSES), problem)
    recompute = tuple(candidates(g))  # (a traced graph's tasklets are their own origins)
    assert recompute
    choices = [Choice(()), Choice(recompute), Choice((), expand="all"), Choice(recompute, expand="all")]
    plans = [shared.run(c) for c in choices]
    # the graph rewrites before rematerialise ran once; the expansions trial started after the
    # first choice's rematerialise
    assert runs["bind"] == runs["split_free_copies"] == 1
    assert runs["rematerialise"] == 3 and runs["recompute_expansions"] == 2 and runs["share_versions"] == 4
    sources = []
    for choice, p in zip(choices, plans):
        alone = Pipeline(PASSES, problem).run(choice)  # every pass, from the traced graph
        assert p.passes == alone.passes
        sources.append(generate(p, target).source)
        assert sources[-1] == generate(alone, target).source
    assert len(set(sources)) == len(sources)  # each choice planned its own program


def _seeded(x: sd.f32[64, 64], w: sd.f32[64, 64]):
    return np.mean(np.tanh(x @ w))  # the reverse pass's seed: g / 4096 over a 64x64 matrix


def _pipeline_runs(monkeypatch, graph, target) -> list[Choice]:
    """The choices ``plan`` ran the pipeline for."""
    ran, original = [], Pipeline.run

    def run(self, choice):
        ran.append(choice)
        return original(self, choice)
    with monkeypatch.context() as m:
        m.setattr(Pipeline, "run", run)
        plan(graph, {}, target)
    return ran


def test_a_seeds_broadcast_is_recomputed_from_the_first_plan(monkeypatch):
    """A value expanding its inputs that reads nothing more (the seed's broadcast) is
    recomputed in every plan and needs no trial of its own; where the cost model recomputes
    calls (CUDA) the expansions trial decides, as it does for expansions that read more."""
    seeded = sd.differentiable_program(_seeded).backward_graph(wrt=["w"])
    cpu = _pipeline_runs(monkeypatch, seeded, targets.of("cpu"))
    assert {c.expand for c in cpu} == {"free"}
    seed = [t for t in plan(seeded, {}, targets.of("cpu")).graph.tasklets() if t.name.startswith("grad_mean")]
    assert not seed  # recomputed into its readers
    cuda = _pipeline_runs(monkeypatch, seeded, targets.of("cuda"))
    assert cuda[0].expand == "none" and "all" in {c.expand for c in cuda}
    pairs = ir.trace(_pairs).copy()
    sd.add_backward_pass(pairs, inputs=["x", "m"], outputs=pairs.results)
    assert "all" in {c.expand for c in _pipeline_runs(monkeypatch, pairs, targets.of("cpu"))}
