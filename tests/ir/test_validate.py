"""validate() on hand-built graphs: well-formed ones pass, each broken rule is
rejected with a message naming the node at fault."""
import numpy as np
import pytest
import sympy

from symdiff import ir
from symdiff.ir import DataflowGraph, GraphError, Memlet, index_symbol, size_symbol

N, M = size_symbol("N"), size_symbol("M")
i, j, k = index_symbol("i"), index_symbol("j"), index_symbol("k")
x, y = sympy.Symbol("x", real=True), sympy.Symbol("y", real=True)
n = sympy.Symbol("n", integer=True)


def copy_graph(shape=(4,), out_dtype="float32"):
    """``b[i] = a[i]``: the smallest well-formed graph, for breaking one rule at a time."""
    g = DataflowGraph("copy")
    g.add_container("a", shape, "float32", "argument")
    g.add_container("b", shape, out_dtype, "result")
    domain = [(s, 0, d) for s, d in zip((i, j), shape)]
    idx = tuple(s for s, _, _ in domain)
    g.add_tasklet("t", domain, {"o": x}, {"x": (g.access("a"), idx)}, {"o": (g.new_version("b"), idx)})
    return g


def rejects(g: DataflowGraph, *fragments: str) -> str:
    with pytest.raises(GraphError) as info:
        g.validate()
    msg = str(info.value)
    for f in fragments:
        assert f in msg, msg
    return msg


# -- well-formed graphs pass ------------------------------------------------------------------

def test_valid_graphs_pass():
    g = copy_graph((N, M))
    # reduction, matmul, guarded partial update, gather, 0-d, stencil with symbolic bounds
    g.add_container("s", (), "float32", "result")
    g.add_tasklet("red", [(i, 0, N), (j, 0, M)], {"o": x}, {"x": (g.access("b"), (i, j))},
                  {"o": (g.new_version("s"), (), "sum")})
    g.add_container("w", (M, 3), "float32", "argument")
    g.add_container("c", (N, 3), "float32", "result")
    g.add_tasklet("mm", [(i, 0, N), (j, 0, 3), (k, 0, M)], {"o": x * y},
                  {"x": (g.access("a"), (i, k)), "y": (g.access("w"), (k, j))},
                  {"o": (g.new_version("c"), (i, j), "sum")})
    c1 = g.new_version("c")
    g.add_tasklet("keep", [(i, 0, N), (j, 0, 3)], {"o": x}, {"x": (g.access("c", 0), (i, j))},
                  {"o": (c1, (i, j))}, condition=sympy.Or(sympy.Eq(i, 0), sympy.Eq(i, N - 1)))
    g.add_tasklet("upd", [(i, 1, N - 1), (j, 0, 3)], {"o": 2 * x}, {"x": (g.access("c", 0), (i - 1, j))},
                  {"o": (c1, (i, j))})
    g.add_container("idx", (5,), "int32", "argument")
    g.add_container("gat", (5,), "float32", "result")
    g.add_tasklet("gather", [(i, 0, 5)], {"o": ir.connector_symbol("v", "float32")},
                  {"n": (g.access("idx"), (i,)), "v": (g.access("a"), (n, 0))},
                  {"o": (g.new_version("gat"), (i,))})
    g.add_tasklet("shifted", [(i, 0, N)], {"o": x}, {"x": (g.access("b"), (i, 0))},
                  {"o": (g.new_version("gat"), (0,), "max")}, condition=sympy.Ge(i, 1))
    assert g.validate() is g


def test_index_guarded_by_condition_is_not_flagged():
    g = copy_graph((4,))
    g.add_tasklet("guarded", [(i, 0, 4)], {"o": x}, {"x": (g.access("a"), (i - 1,))},
                  {"o": (g.new_version("b"), (i,), "sum")}, condition=sympy.Ge(i, 1))
    g.validate()


def test_index_out_of_range_only_under_an_opaque_condition_is_not_flagged():
    g = copy_graph((4,))
    g.add_tasklet("opaque", [(i, 0, 4)], {"o": x}, {"x": (g.access("a"), (i - 1,))},
                  {"o": (g.new_version("b"), (i,), "sum")}, condition=sympy.Ne(i, 0))
    g.validate()


# -- containers and nodes ----------------------------------------------------------------------

@pytest.mark.parametrize("dim", [2.5, sympy.Symbol("q"), index_symbol("i")])
def test_shape_must_be_ints_or_size_symbols(dim):
    g = copy_graph()
    g.add_container("bad", (3, dim), "float32")
    rejects(g, "container 'bad'", "shape")


def test_negative_extent():
    g = copy_graph()
    g.add_container("neg", (-1,), "float32")
    rejects(g, "container 'neg'", "negative")


def test_node_without_payload():
    g = copy_graph()
    g.nx.add_node("stray")
    rejects(g, "node 'stray'")


def test_access_node_of_unknown_container():
    g = copy_graph()
    g.nx.add_node("ghost#0", node=ir.AccessNode("ghost", 0))
    rejects(g, "access node 'ghost#0'", "unknown container")


# -- edges -------------------------------------------------------------------------------------

def test_access_to_access_edge():
    g = copy_graph()
    g.nx.add_edge("a#0", "b#0", memlet=Memlet("b", (i,), "o"))
    rejects(g, "'a#0' -> 'b#0'", "access -> tasklet")


def test_tasklet_to_tasklet_edge():
    g = copy_graph()
    g.add_tasklet("t2", [(i, 0, 4)], {"o": x}, {"x": (g.access("a"), (i,))}, {"o": (g.new_version("b"), (i,))})
    g.nx.add_edge("t", "t2", memlet=Memlet("b", (i,), "o"))
    rejects(g, "'t' -> 't2'")


def test_edge_without_memlet():
    g = copy_graph()
    g.nx.add_edge("a#0", "t")
    rejects(g, "tasklet 't'", "no Memlet")


def test_memlet_container_mismatch():
    g = copy_graph()
    g.nx.add_edge("a#0", "t", memlet=Memlet("b", (i,), "x2"))
    rejects(g, "tasklet 't'", "names container 'b'", "'a#0'")


def test_read_with_accumulation():
    g = copy_graph()
    (_, _, key), = g.nx.in_edges("t", keys=True)
    g.nx.edges["a#0", "t", key]["memlet"] = Memlet("a", (i,), "x", "sum")
    rejects(g, "tasklet 't'", "accumulation")


# -- connectors and symbols --------------------------------------------------------------------

def test_read_connector_not_an_input():
    g = copy_graph()
    g.nx.add_edge("a#0", "t", memlet=Memlet("a", (i,), "zz"))
    rejects(g, "tasklet 't'", "'zz'", "inputs")


def test_connector_read_twice():
    g = copy_graph()
    g.nx.add_edge("a#0", "t", memlet=Memlet("a", (i,), "x"))
    rejects(g, "tasklet 't'", "'x'", "more than one")


def test_input_without_read_edge():
    g = copy_graph()
    g.node("t").inputs["y"] = y
    rejects(g, "tasklet 't'", "['y']", "no read edge")


def test_body_output_without_write():
    g = copy_graph()
    g.node("t").body["o2"] = x
    rejects(g, "tasklet 't'", "'o2'", "no write edge")


def test_write_connector_not_in_body():
    g = copy_graph()
    g.nx.add_edge("t", "b#0", memlet=Memlet("b", (i,), "other"))
    rejects(g, "tasklet 't'", "'other'", "not an output")


@pytest.mark.parametrize("name", ["i", "N"])
def test_connector_name_clashing_with_index_or_size_symbol(name):
    g = copy_graph((N,))
    g.add_tasklet("clash", [(i, 0, N)], {"o": x}, {"x": (g.access("a"), (i,)), name: (g.access("a"), (0,))},
                  {"o": (g.new_version("b"), (i,))})
    rejects(g, "tasklet 'clash'", "shares its name")


def test_body_uses_unknown_symbol():
    g = copy_graph()
    g.node("t").body["o"] = x + y
    rejects(g, "tasklet 't'", "['y']", "body output 'o'")


def test_body_may_use_index_and_size_symbols():
    g = copy_graph((N,))
    g.node("t").body["o"] = x * i / N
    g.validate()


def test_condition_uses_connector():
    g = copy_graph()
    g.node("t").condition = sympy.Gt(x, 0)
    rejects(g, "tasklet 't'", "condition")


def test_domain_bound_not_integer():
    g = copy_graph()
    g.node("t").domain = ((i, 0, sympy.Rational(7, 2)),)
    rejects(g, "tasklet 't'", "domain range")


def test_domain_symbol_repeated():
    g = copy_graph((3, 3))
    g.node("t").domain = ((i, 0, 3), (i, 0, 3))
    rejects(g, "tasklet 't'", "domain symbol i")


# -- indices -----------------------------------------------------------------------------------

def test_index_length_must_match_ndim():
    g = copy_graph((3, 3))
    g.add_tasklet("flat", [(i, 0, 3)], {"o": x}, {"x": (g.access("a"), (i,))},
                  {"o": (g.new_version("b"), (i, 0))})
    rejects(g, "tasklet 'flat'", "1 indices for a 2-d container")


def test_zero_d_index_must_be_empty():
    g = copy_graph()
    g.add_container("s", (), "float32", "result")
    g.add_tasklet("sc", [(i, 0, 4)], {"o": x}, {"x": (g.access("a"), (i,))},
                  {"o": (g.new_version("s"), (0,), "sum")})
    rejects(g, "tasklet 'sc'", "0-d container")


@pytest.mark.parametrize("shape, domain, index, reach", [
    ((4,), (0, 4), i + 1, "reaches 4"),
    ((4,), (0, 4), i - 1, "reaches -1"),
    ((N,), (0, N), i + 1, "reaches N"),
    ((N,), (0, N), -1 - i, "reaches -N"),   # negative coefficient: min at the end
    ((N,), (0, N - 1), i + 2, "reaches N"),
    ((4,), (0, 2), 5, "reaches 5"),
])
def test_index_provably_out_of_range(shape, domain, index, reach):
    g = copy_graph(shape)
    g.add_tasklet("shift", [(i, *domain)], {"o": x}, {"x": (g.access("a"), (index,))},
                  {"o": (g.new_version("b"), (i,))})
    rejects(g, "tasklet 'shift'", "a#0", reach)


def test_out_of_range_write_within_simple_condition():
    g = copy_graph()
    g.add_tasklet("w", [(i, 0, 10)], {"o": x}, {"x": (g.access("a"), (0,))},
                  {"o": (g.new_version("b"), (i,))}, condition=sympy.And(sympy.Ge(i, 2), sympy.Lt(i, 5)))
    rejects(g, "tasklet 'w'", "b#1", "reaches 4")


def test_a_checked_index_is_checked_again_against_each_container():
    """The bounds check remembers its verdicts (an unrolled loop repeats indices); a verdict
    is per index, box and extents, so the same read of a shorter container still fails."""
    for extent, fits in ((5, True), (4, False), (5, True)):
        g = copy_graph((4,))
        g.add_container("longer", (extent,), "float32", "argument")
        g.add_tasklet("next", [(i, 0, 4)], {"o": x}, {"x": (g.access("longer"), (i + 1,))},
                      {"o": (g.new_version("b"), (i,))})
        if fits:
            g.validate()
        else:
            rejects(g, "tasklet 'next'", "longer#0", "reaches 4", "extent 4")


@pytest.mark.parametrize("shape, domain, index", [
    ((N,), (0, N - 1), i + 1),       # stencil: fits for every N
    ((N,), (0, N), N - 1 - i),       # reversal
    ((2 * N,), (0, N), 2 * i + 1),   # strided
    ((N,), (0, N), i * i),           # not affine: undecidable, accepted
])
def test_index_not_provably_out_of_range(shape, domain, index):
    g = copy_graph(shape)
    g.add_tasklet("ok", [(i, *domain)], {"o": x}, {"x": (g.access("a"), (index,))},
                  {"o": (g.new_version("b"), (i,), "sum")})
    g.validate()


def test_empty_domain_is_never_out_of_range():
    g = copy_graph()
    g.add_tasklet("empty", [(i, 3, 3)], {"o": x}, {"x": (g.access("a"), (i + 10,))},
                  {"o": (g.new_version("b"), (i,))})
    g.validate()


def test_float_connector_in_index():
    g = copy_graph()
    g.add_container("f", (4,), "float32", "argument")
    g.add_tasklet("g", [(i, 0, 4)], {"o": y}, {"x": (g.access("f"), (i,)), "y": (g.access("a"), (x,))},
                  {"o": (g.new_version("b"), (i,))})
    rejects(g, "tasklet 'g'", "connector x", "not int-typed")


def test_index_uses_unknown_symbol():
    g = copy_graph()
    g.add_tasklet("g", [(i, 0, 4)], {"o": x}, {"x": (g.access("a"), (n,))}, {"o": (g.new_version("b"), (i,))})
    rejects(g, "tasklet 'g'", "index uses n")


def test_gather_through_own_connector():
    g = copy_graph()
    g.add_container("idx", (4,), "int32", "argument")
    g.add_tasklet("g", [(i, 0, 4)], {"o": n}, {"n": (g.access("idx"), (n,))},
                  {"o": (g.new_version("b"), (i,))})
    rejects(g, "tasklet 'g'", "cycle", "'n'")


# -- dtypes and accumulation -------------------------------------------------------------------

def test_accumulate_into_bool_rejected():
    g = copy_graph(out_dtype="bool")
    g.add_tasklet("any", [(i, 0, 4)], {"o": sympy.Gt(x, 0)}, {"x": (g.access("a"), (i,))},
                  {"o": (g.new_version("b"), (0,), "max")})
    rejects(g, "tasklet 'any'", "bool")


def test_cast_write_into_bool_and_int_accepted():
    g = copy_graph(out_dtype="bool")
    g.add_container("c", (4,), "int32", "result")
    g.add_tasklet("cast", [(i, 0, 4)], {"o": sympy.floor(x)}, {"x": (g.access("a"), (i,))},
                  {"o": (g.new_version("c"), (i,), "sum")})
    g.validate()


def test_unknown_accumulation():
    g = copy_graph()
    g.add_tasklet("mean", [(i, 0, 4)], {"o": x}, {"x": (g.access("a"), (i,))},
                  {"o": (g.new_version("b"), (0,), "mean")})
    rejects(g, "tasklet 'mean'", "'mean'")


def test_mixed_accumulations_on_one_version():
    g = copy_graph()
    b1 = g.new_version("b")
    g.add_tasklet("s", [(i, 0, 4)], {"o": x}, {"x": (g.access("a"), (i,))}, {"o": (b1, (0,), "sum")})
    g.add_tasklet("m", [(i, 0, 4)], {"o": x}, {"x": (g.access("a"), (i,))}, {"o": (b1, (0,), "max")})
    rejects(g, "access node 'b#1'", "mix accumulations")


def test_argument_version_zero_written():
    g = copy_graph()
    g.add_container("z", (4,), "float32", "argument")
    g.add_tasklet("clobber", [(i, 0, 4)], {"o": x}, {"x": (g.access("a"), (i,))}, {"o": (g.access("z"), (i,))})
    rejects(g, "access node 'z#0'", "argument 'z'", "clobber")


def test_plain_write_ignoring_a_domain_axis():
    g = copy_graph((3, 5))
    g.add_container("r", (3,), "float32", "result")
    g.add_tasklet("rowsum", [(i, 0, 3), (j, 0, 5)], {"o": x}, {"x": (g.access("a"), (i, j))},
                  {"o": (g.new_version("r"), (i,))})
    rejects(g, "tasklet 'rowsum'", "domain symbol j", "accumulation")


def _plain_write(index, domain, out_shape=(8,)):
    g = copy_graph((4,))
    g.add_container("out", out_shape, "float32", "result")
    read = tuple(s for s, _, _ in domain)[:1]
    g.add_tasklet("spread", domain, {"o": x}, {"x": (g.access("a"), read)}, {"o": (g.new_version("out"), index)})
    return g


@pytest.mark.parametrize("index, domain", [
    ((sympy.floor(i / 2),), [(i, 0, 4)]),                   # i = 0, 1 both write out[0]
    ((sympy.Mod(i, 2),), [(i, 0, 4)]),
    ((i + j,), [(i, 0, 4), (j, 0, 2)]),                     # (1, 0) and (0, 1) collide
    ((2 * i + j,), [(i, 0, 4), (j, 0, 3)]),                 # (0, 2) and (1, 0) collide
])
def test_plain_write_that_may_collide_is_refused(index, domain):
    """It validated and ran last-writer-wins (one of the writes silently lost)."""
    rejects(_plain_write(index, domain, (16,)), "tasklet 'spread'", "plain write", "out", "accumulation")


@pytest.mark.parametrize("index, domain, numpy_positions", [
    ((2 * i + 1,), [(i, 0, 4)], [1, 3, 5, 7]),
    ((7 - i,), [(i, 0, 4)], [7, 6, 5, 4]),
    ((4 * j + i,), [(i, 0, 4), (j, 0, 2)], None),           # mixed radix: distinct
])
def test_plain_write_provably_injective_is_accepted(index, domain, numpy_positions):
    g = _plain_write(index, domain).validate()
    if numpy_positions is not None:
        a = np.arange(1, 5, dtype=np.float32)
        want = np.zeros(8, np.float32)
        want[numpy_positions] = a
        np.testing.assert_array_equal(ir.run(g, {"a": a})["out"], want)


# -- acyclicity --------------------------------------------------------------------------------

def test_cycle_rejected():
    g = copy_graph()
    g.add_tasklet("back", [(i, 0, 4)], {"o": x}, {"x": (g.access("b"), (i,))}, {"o": ("b#0", (i,))})
    rejects(g, "cycle", "b#0")
