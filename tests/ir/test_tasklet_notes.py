"""ir.tasklet_notes: the differentiator's and the lowering's notes on tasklets
and containers are typed,
so a misspelt note or a value of the wrong type fails where it is written or
read, not as a silently absent key in a later stage."""

import pytest
import sympy

from symdiff.ir import tasklet_notes as notes
from symdiff.ir.graph import DataflowGraph, Memlet, index_symbol

i = index_symbol("i")


def _graph_with_tasklet(**meta):
    g = DataflowGraph("notes")
    g.add_container("x", (4,), "float32", "argument")
    g.add_container("y", (4,), "float32", "result")
    t = g.add_tasklet("double", [(i, 0, 4)], {"o": 2 * sympy.Symbol("a")}, {"a": (g.access("x"), (i,))},
                      {"o": (g.new_version("y"), (i,))}, **meta)
    return g, t


def test_unset_notes_read_as_their_defaults():
    g, t = _graph_with_tasklet()
    assert notes.origin(t) == "double"  # before bind stamps one, a tasklet stands for itself
    assert notes.folded(t) == () and notes.siblings(t) == () and notes.scatter(t) is None
    assert notes.two_stage(g.containers["y"]) is False


def test_unset_derivation_notes_read_as_none():
    _, t = _graph_with_tasklet()
    assert [f(t) for f in (notes.forward_tasklet, notes.forward_values, notes.strategy, notes.tangent_of,
                           notes.custom_vjp, notes.custom_vjp_call, notes.torch_op)] == [None] * 7
    assert notes.forward_tasklets(t) == []


def test_derivation_notes_read_back_under_their_keys():
    meta = notes.tasklet_notes({}, forward_tasklet="f", forward_values="stored", strategy="gather")
    _, t = _graph_with_tasklet(**meta)
    assert t.meta == {"forward_tasklet": "f", "forward_values": "stored", "strategy": "gather"}
    assert notes.forward_tasklets(t) == ["f"]   # a gather lists several; any other its one
    notes.annotate(t, forward_tasklets=["f", None], custom_vjp="softmax", custom_vjp_call="softmax#0")
    assert (notes.forward_tasklets(t), notes.custom_vjp_call(t)) == (["f", None], "softmax#0")


def test_set_notes_read_back_and_keep_the_other_keys():
    m = Memlet("y", (i,), "o")
    meta = notes.tasklet_notes({"strategy": "owner-computes"}, origin="f", folded=("g", "h"), scatter=m)
    _, t = _graph_with_tasklet(**meta)
    assert (notes.origin(t), notes.folded(t), notes.scatter(t)) == ("f", ("g", "h"), m)
    assert t.meta["strategy"] == "owner-computes"
    g = DataflowGraph("c")
    c = g.add_container("p", (2,), "float32", **notes.container_notes(two_stage=True))
    assert notes.two_stage(c) is True


@pytest.mark.parametrize("write", [
    lambda: notes.tasklet_notes({}, orgin="f"),            # misspelt
    lambda: notes.tasklet_notes({}, folded=["g"]),         # a list, not a tuple
    lambda: notes.tasklet_notes({}, siblings=("g", 1)),    # not names
    lambda: notes.tasklet_notes({}, scatter=("y", 0)),     # not a Memlet
    lambda: notes.container_notes(two_stage=1),            # not a bool
    lambda: notes.container_notes(origin="f"),             # a tasklet note on a container
    lambda: notes.tasklet_notes({}, forward_values="store"),   # not one of FORWARD_VALUES
    lambda: notes.tasklet_notes({}, strategy="owner_computes"),
    lambda: notes.tasklet_notes({}, forward_tasklets=("f",)),  # a tuple: the stored form is a list
    lambda: notes.tasklet_notes({}, forward_tasklet=0),
    lambda: notes.annotate(_graph_with_tasklet()[1], custom_vjp_cal="f#0"),
])
def test_a_bad_note_is_refused_where_it_is_written(write):
    with pytest.raises(TypeError, match="note"):
        write()


def test_a_bad_note_written_past_the_module_is_refused_where_it_is_read():
    _, t = _graph_with_tasklet(folded="g")  # a string, which would iterate as characters
    with pytest.raises(TypeError, match="'folded' must be tuple"):
        notes.folded(t)
