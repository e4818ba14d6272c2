"""ir.graph_notes: a graph's notes (argument and result order, seeds, gradients,
tangents, loops, custom rules, a memory budget's choice) are typed attributes
stored under their own keys in ``graph.meta``, so a misspelt note or a value of
the wrong type fails where it is written or read, not as a silently absent key
in a later stage, while the stored form (what the disk cache hashes) is the
one users read."""

import pytest

from symdiff import ir
from symdiff.ir.graph import DataflowGraph
from symdiff.ir.graph_notes import GraphNotes
from symdiff.ir.specs import ArraySpec

f32 = ArraySpec("float32", (3,))


def _pair(a, b):
    return a * b, a


def test_the_tracer_records_argument_and_result_order():
    g = ir.trace(_pair, f32, f32)
    notes = GraphNotes(g)
    assert (notes.arg_names, notes.result_names) == (["a", "b"], ["out0", "out1"])
    assert notes.seeds is None and notes.loops == () and notes.custom_vjps == ()


def test_unset_order_notes_read_as_the_container_roles():
    g = DataflowGraph("bare")
    g.add_container("y", (2,), "float32", "result")
    g.add_container("x", (2,), "float32", "argument")
    assert (GraphNotes(g).arg_names, GraphNotes(g).result_names) == (["x"], ["y"])
    assert g.meta == {}   # reading writes nothing


def test_notes_are_stored_under_their_keys_and_deleted():
    g = DataflowGraph("n")
    notes = GraphNotes(g)
    notes.seeds, notes.loop_state_bytes, notes.rematerialise = {"s": "seed_s"}, 1024, ["t0", "t1"]
    assert g.meta == {"seeds": {"s": "seed_s"}, "loop_state_bytes": 1024, "rematerialise": ["t0", "t1"]}
    del notes.seeds, notes.gradients   # an unset one is a no-op
    assert "seeds" not in g.meta and notes.seeds is None


@pytest.mark.parametrize("name, value", [
    ("seeds", ["seed_s"]),              # a list, not a map
    ("gradients", {"x": 0}),            # not a container name
    ("result_names", ("out",)),         # a tuple: the stored form is a list
    ("loops", ()),                      # loops are a list
    ("rematerialise", "t0"),            # a name, which would iterate as characters
    ("loop_state_bytes", "1k"),
])
def test_a_value_of_the_wrong_kind_is_refused_where_it_is_written(name, value):
    notes = GraphNotes(DataflowGraph("w"))
    with pytest.raises(TypeError, match=f"graph note '{name}' must be"):
        setattr(notes, name, value)


def test_a_bad_value_written_past_the_record_is_refused_where_it_is_read():
    g = ir.trace(_pair, f32, f32)
    g.meta["result_names"] = "out0"
    with pytest.raises(TypeError, match="'result_names' must be list"):
        GraphNotes(g).result_names


@pytest.mark.parametrize("use", [lambda n: n.seed, lambda n: setattr(n, "result_name", ["y"])])
def test_a_misspelt_note_raises_naming_the_notes(use):
    with pytest.raises(AttributeError, match=r"graph note '(seed|result_name)' is not one of \[.*'seeds'"):
        use(GraphNotes(DataflowGraph("m")))
