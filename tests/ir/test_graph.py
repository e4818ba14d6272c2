"""The IR data model: versioning (SSA), tasklet construction, queries, copies,
and the public networkx view."""
import networkx as nx
import pytest
import sympy

from symdiff import ir
from symdiff.ir import DataflowGraph, GraphError, Memlet, connector_symbol, index_symbol, size_symbol

N = size_symbol("N")
i = index_symbol("i")
x = sympy.Symbol("x", real=True)


def axpy() -> DataflowGraph:
    """``a += 2 * b`` on an argument, then ``r = sum(a)``."""
    g = DataflowGraph("axpy")
    g.add_container("a", (N,), "float32", "argument")
    g.add_container("b", (N,), "float32", "argument")
    g.add_container("r", (), "float32", "result")
    a0 = g.access("a")
    g.add_tasklet("upd", [(i, 0, N)], {"o": x + 2 * sympy.Symbol("y", real=True)},
                  {"x": (a0, (i,)), "y": (g.access("b"), (i,))}, {"o": (g.new_version("a"), (i,))})
    g.add_tasklet("red", [(i, 0, N)], {"o": x}, {"x": (g.access("a"), (i,))},
                  {"o": (g.new_version("r"), (), "sum")})
    return g


def test_versions_are_ssa():
    g = axpy()
    assert g.versions("a") == [0, 1]
    assert g.latest("a") == "a#1"
    assert g.access("a", 0) == "a#0"
    assert [m.container for _, m in g.reads("red")] == ["a"] and g.reads("red")[0][0] == "a#1"


def test_moving_versions_renames_them_in_place():
    g = axpy()
    g.add_container("a2", (N,), "float32")
    order = list(g.nx)
    g.move_versions("a", "a2")
    assert list(g.nx) == [n.replace("a#", "a2#") for n in order]  # the planner reads the node order
    assert g.versions("a") == [] and g.versions("a2") == [0, 1] and g.latest("a2") == "a2#1"
    assert [(a, m.container) for a, m in g.reads("upd")] == [("a2#0", "a2"), ("b#0", "b")]
    assert [(a, m.container) for a, m in g.writes("upd")] == [("a2#1", "a2")]
    assert g.reads("red")[0][0] == "a2#1"


def test_new_version_of_untouched_argument_skips_the_callers_data():
    g = DataflowGraph()
    g.add_container("a", (3,), "float32", "argument")
    g.add_container("t", (3,), "float32")
    assert g.new_version("a") == "a#1"
    assert g.new_version("t") == "t#0"
    with pytest.raises(GraphError, match="unknown container 'zz'"):
        g.new_version("zz")


def test_connector_symbols_follow_container_dtype():
    g = DataflowGraph()
    for name, dtype in [("f", "float64"), ("n", "int32"), ("m", "bool")]:
        g.add_container(name, (3,), dtype, "argument")
    g.add_container("o", (3,), "float32", "result")
    t = g.add_tasklet("t", [(i, 0, 3)], {"o": connector_symbol("f", "float64")},
                      {c: (g.access(c), (i,)) for c in "fnm"}, {"o": (g.new_version("o"), (i,))})
    assert t.inputs["f"].is_real and t.inputs["n"].is_integer and t.inputs["m"].is_real is None
    assert t.inputs == {c: connector_symbol(c, d) for c, d in [("f", "float64"), ("n", "int32"), ("m", "bool")]}


def test_queries():
    g = axpy()
    assert g.arguments == ["a", "b"] and g.results == ["r"]
    assert [w for w, _ in g.writers("a#1")] == ["upd"] and [r for r, _ in g.readers("a#1")] == ["red"]
    assert g.accumulation("r#0") == "sum" and g.accumulation("a#1") is None
    assert g.writes("red") == [("r#0", Memlet("r", (), "o", "sum"))]
    assert {t.name for t in g.tasklets()} == {"upd", "red"}
    assert g.size_symbols() == {N}
    assert g.topological_order().index("upd") < g.topological_order().index("red")


def test_unique_names():
    g = axpy()
    t = g.add_tasklet("upd", [(i, 0, N)], {"o": x}, {"x": (g.access("b"), (i,))}, {"o": (g.new_version("a"), (i,))})
    assert t.name != "upd" and t.name.startswith("upd") and t.name in g.nx
    assert g.unique_name("a") != "a" and g.unique_name("fresh") == "fresh"


def test_a_fork_goes_on_naming_as_the_graph_would_and_a_copy_starts_afresh():
    g = axpy()
    first = g.unique_name("a")
    fork, copy = g.fork(), g.copy()
    following = g.unique_name("a")
    assert following != first
    assert fork.unique_name("a") == following and copy.unique_name("a") == first
    fork.add_container("only_in_the_fork", (2,), "float32")
    assert "only_in_the_fork" not in g.containers


def test_container_errors():
    g = DataflowGraph()
    g.add_container("a", (N, 2), "float32")
    with pytest.raises(GraphError, match="'a' already exists"):
        g.add_container("a", (2,), "float32")
    with pytest.raises(GraphError, match="dtype 'int64'"):
        g.add_container("b", (2,), "int64")
    with pytest.raises(GraphError, match="role 'input'"):
        g.add_container("c", (2,), "float32", "input")
    assert g.containers["a"].concrete_shape({"N": 5}) == (5, 2)
    with pytest.raises(GraphError, match="'a': size N is not bound"):
        g.containers["a"].concrete_shape()


def test_copy_is_structurally_independent():
    g = axpy()
    h = g.copy()
    h.remove_tasklet("red")
    h.containers["a"].meta["note"] = 1
    assert "red" in g.nx and "note" not in g.containers["a"].meta
    assert ir.run(g.validate(), {"a": [1.0, 2.0], "b": [1.0, 1.0]})["r"] == 7.0


def test_copy_is_what_networkx_copies():
    """``DataflowGraph.copy`` builds the adjacency dicts itself: the same nodes, edges, keys and
    data as networkx's ``copy``, in the same orders (a plan's reads and writes follow them), parallel
    edges and a self-loop included, each attribute dict its own and both directions sharing one."""
    import random
    for seed in range(50):
        r = random.Random(seed)
        g = DataflowGraph()
        names = [f"n{k}" for k in range(r.randint(1, 20))]
        r.shuffle(names)
        g.nx.add_nodes_from((n, {"node": k}) for k, n in enumerate(names))
        for k in range(r.randint(0, 60)):
            g.nx.add_edge(r.choice(names), r.choice(names), key=r.choice([None, "x"]), memlet=k)
        ours, theirs = g.copy().nx, g.nx.copy()
        assert list(ours.nodes(data=True)) == list(theirs.nodes(data=True))
        assert list(ours.edges(keys=True, data=True)) == list(theirs.edges(keys=True, data=True))
        assert list(ours.in_edges(keys=True, data=True)) == list(theirs.in_edges(keys=True, data=True))
        for u, v, key, data in ours.edges(keys=True, data=True):
            assert ours._pred[v][u][key] is data and data is not g.nx._succ[u][v][key]
        for n, data in ours.nodes(data=True):
            assert data is not g.nx._node[n]


def test_networkx_view_is_public():
    g = axpy()
    assert isinstance(g.nx, nx.MultiDiGraph) and nx.is_directed_acyclic_graph(g.nx)
    assert nx.has_path(g.nx, "b#0", "r#0")
    assert all(isinstance(d["memlet"], Memlet) for *_, d in g.nx.edges(data=True))
    assert isinstance(g.nx.nodes["upd"]["node"], ir.Tasklet)


def test_text_forms():
    g = axpy()
    text = str(g)
    assert "argument  a: float32(N,)" in text and "tasklet red [i=0:N]" in text and "r#0[] += x" in text
    assert repr(g) == "<DataflowGraph 'axpy': 3 containers, 2 tasklets>"


def test_topological_order_is_networkx_lexicographic_order_by_insertion():
    """``DataflowGraph.topological_order`` (its own heap over the adjacency dicts) gives what
    networkx's ``lexicographical_topological_sort`` keyed by insertion order (after a key of its
    own, where one is given) gives, parallel edges included, and refuses a cycle as networkx does."""
    import random
    for seed in range(200):
        r = random.Random(seed)
        g = DataflowGraph()
        names = [f"n{r.randint(0, 999)}_{k}" for k in range(r.randint(1, 40))]
        r.shuffle(names)
        g.nx.add_nodes_from(names)
        for _ in range(r.randint(0, 80)):
            a, b = sorted(r.sample(range(len(names)), 2)) if len(names) > 1 else (0, 0)
            if a != b:
                g.nx.add_edge(names[a], names[b])
        position = {n: k for k, n in enumerate(g.nx.nodes)}
        assert g.topological_order() == list(nx.lexicographical_topological_sort(g.nx, key=position.get))
        flag = {n: r.randint(0, 1) for n in names}  # a key first, as plan.placement_order sorts
        assert g.topological_order(flag.get) == list(
            nx.lexicographical_topological_sort(g.nx, key=lambda n: (flag[n], position[n])))
    g.nx.add_edge(names[-1], names[0])
    g.nx.add_edge(names[0], names[-1])
    with pytest.raises(nx.NetworkXUnfeasible):
        g.topological_order()
