"""The planner as data: the passes and trials ``lowering.plan`` lists are the
ones ``docs/design.md`` documents, in its order, and a plan names the passes
that made it."""
import re
from pathlib import Path

from symdiff.backward import add_backward_pass
from symdiff.lowering.plan import ALTERNATIVES, PASSES, WHOLE_PLAN_ALTERNATIVES, plan
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
