"""``lowering.remembered``: a question about a tasklet is answered once per plan
for the same tasklet, memlets and container shapes, and asked again whenever
one of them is another (a rewrite's new memlet, a fork's new container of
another shape), never outside ``remembering()``."""
from symdiff.ir.graph import Memlet
from symdiff.ir.rewrite import set_reads
from symdiff.lowering.matmul import matmul_shape
from symdiff.lowering.remembered import remembered, remembering
from lowering_graphs import chain, matmul

asked = []


@remembered
def _reads(graph, t):
    """A question whose answer shows what it saw: the shapes of the containers ``t`` reads."""
    asked.append(t.name)
    return tuple(graph.containers[m.container].shape for _, m in graph.reads(t.name))


def test_nothing_is_remembered_outside_a_plan():
    g, _ = chain(8, 2)
    t = g.node("op0")
    asked.clear()
    _reads(g, t)
    _reads(g, t)
    assert asked == ["op0", "op0"]


def test_one_answer_per_tasklet_and_its_forks_inside():
    g, _ = chain(8, 2)
    asked.clear()
    with remembering():
        fork = g.fork()  # shares the tasklets, memlets and shape tuples
        answers = {_reads(graph, graph.node(n)) for graph in (g, fork, g) for n in ("op0", "op1")}
        with remembering():  # a nested block shares the answers
            _reads(g, g.node("op0"))
    assert asked == ["op0", "op1"] and answers == {((8,),)}


def test_a_new_memlet_or_another_shape_is_asked_again():
    g, _ = chain(8, 2)
    asked.clear()
    with remembering():
        assert _reads(g, g.node("op1")) == ((8,),)
        (a, m), = g.reads("op1")
        set_reads(g, "op1", [(a, Memlet(m.container, m.index, m.connector))])  # an equal memlet, a new object
        _reads(g, g.node("op1"))
        fork = g.fork()
        c = fork.containers["h0"]
        fork.containers["h0"] = type(c)(c.name, (16,), c.dtype, c.role)
        assert _reads(fork, fork.node("op1")) == ((16,),)
    assert asked == ["op1", "op1", "op1"]


def test_a_remembered_planning_question_answers_as_asked_afresh():
    g, _ = matmul()
    (name,) = [t.name for t in g.tasklets()]
    with remembering():
        assert matmul_shape(g, g.node(name)) == matmul_shape(g, g.node(name)) == matmul_shape(g.fork(), g.node(name))
    assert matmul_shape(g, g.node(name)) is not None


def test_an_inline_remembered_gives_the_tasklet_inlined_afresh():
    """``inlining.inline`` inside a plan hands a second graph the tasklet and memlets it made for the
    first (the same objects), equal to what inlining outside a plan makes."""
    from symdiff.lowering.inlining import inline
    g, _ = chain(8, 3)
    fresh = g.copy()
    inline(fresh, fresh.node("op1"), "a", fresh.node("op0"))
    with remembering():
        first, second = g.fork(), g.fork()
        for graph in (first, second):
            inline(graph, graph.node("op1"), "a", graph.node("op0"))
    assert first.node("op1") is second.node("op1")
    assert first.reads("op1") == second.reads("op1") == fresh.reads("op1")
    assert first.node("op1") == fresh.node("op1") and first.node("op1").body != g.node("op1").body
