"""The structure add_backward_pass builds: activity, naming, write modes,
stored forward values, errors, and differentiating the result again."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sympy

from symdiff import ir
from symdiff.backward import add_backward_pass, injective
from symdiff.errors import DifferentiationError
from symdiff.ir.graph_notes import GraphNotes
from symdiff_graphs import Builder, a, assert_grads_close, b, i, j, jax_vjp, rng_inputs, vjp


def dead_branch_graph():
    """s = sum(tanh(x) * w); a dead branch d = exp(x) never reaches s, and p
    is an argument the output does not depend on."""
    bld = Builder()
    for name in ("x", "w", "p"):
        bld.container(name, (5,), "argument")
    bld.container("t", (5,))
    bld.container("d", (5,), "result")
    bld.container("s", (), "result")
    bld.tasklet("act", [(i, 0, 5)], sympy.tanh(a), {"a": ("x", (i,))}, ("t", (i,)))
    bld.tasklet("dead", [(i, 0, 5)], sympy.exp(a) + b, {"a": ("x", (i,)), "b": ("p", (i,))}, ("d", (i,)))
    bld.tasklet("dot", [(i, 0, 5)], a * b, {"a": ("t", (i,)), "b": ("w", (i,))}, ("s", ()), "sum")
    return bld.g


def backward_tasklets(g):
    return {t.meta["forward_tasklet"]: t for t in g.tasklets() if t.backward}


def test_a_pass_on_a_copy_leaves_the_originals_notes():
    """``copy`` shares the notes' values, so a pass replaces them (a second
    order pass on a copy once added its seed to the original's too)."""
    g = dead_branch_graph()
    add_backward_pass(g, ["x"], ["s"])
    h = g.copy()
    add_backward_pass(h, ["w"], ["grad_x"])
    assert (GraphNotes(g).seeds, GraphNotes(g).gradients) == ({"s": "seed_s"}, {"x": "grad_x"})
    assert GraphNotes(h).seeds == {"s": "seed_s", "grad_x": "seed_grad_x"}
    assert GraphNotes(h).gradients == {"x": "grad_x", "w": "grad_w"}


def test_naming_meta_and_validity():
    g = dead_branch_graph()
    grads = add_backward_pass(g, ["x", "w", "p"], ["s"])
    assert grads == {"x": "grad_x", "w": "grad_w", "p": "grad_p"}
    assert g.meta["seeds"] == {"s": "seed_s"} and g.meta["gradients"] == grads
    assert g.containers["seed_s"].role == "argument"
    assert all(g.containers[n].role == "result" for n in grads.values())
    g.validate()


def test_activity_dead_branch_and_unreached_parameter():
    g = dead_branch_graph()
    add_backward_pass(g, ["x", "w", "p"], ["s"])
    assert set(backward_tasklets(g)) == {"act", "dot"}  # nothing for "dead"
    assert not g.writers(g.access("grad_p", 0))  # zero gradient, no tasklet
    values = rng_inputs({"x": (5,), "w": (5,), "p": (5,)})
    out = ir.run(g, {**values, "seed_s": np.array(1.0)}, float_dtype="float64")
    np.testing.assert_array_equal(out["grad_p"], np.zeros(5))
    np.testing.assert_allclose(out["grad_x"], values["w"] * (1 - np.tanh(values["x"]) ** 2))


def test_forward_values_recorded_stored_or_recomputed():
    g = dead_branch_graph()
    add_backward_pass(g, ["x", "w"], ["s"])
    bwd = backward_tasklets(g)
    assert bwd["act"].meta["forward_values"] == "stored"  # tanh' = 1 - t**2 reads t
    assert "x" not in {m.container for _, m in g.reads(bwd["act"].name)}
    assert bwd["dot"].meta["forward_values"] == "recompute"


def test_write_modes_plain_only_when_injective_and_single_contributor():
    bld = Builder()
    bld.container("x", (3,), "argument")
    bld.container("m", (3, 4), "argument")
    bld.container("y", (3, 4), "result")
    bld.tasklet("outer", [(i, 0, 3), (j, 0, 4)], a * b, {"a": ("x", (i,)), "b": ("m", (i, j))}, ("y", (i, j)))
    add_backward_pass(bld.g, ["x", "m"], ["y"])
    t = backward_tasklets(bld.g)["outer"]
    modes = {bld.g.node(acc).container: m.accumulate for acc, m in bld.g.writes(t.name)}
    assert modes == {"grad_x": "sum", "grad_m": None}


def test_injectivity_rule():
    assert injective((i + 1, j), (i, j)) and injective((0, i), (i,))
    assert not injective((i,), (i, j)) and not injective((i + j,), (i, j)) and not injective((i, i), (i,))
    assert not injective((sympy.Symbol("n", integer=True),), (i,))


def test_input_that_is_also_the_output():
    bld = Builder()
    bld.container("x", (3,), "argument")
    grads = add_backward_pass(bld.g, ["x"], ["x"])
    out = ir.run(bld.g, {"x": np.zeros(3), "seed_x": np.array([1.0, 2.0, 3.0])})
    np.testing.assert_array_equal(out[grads["x"]], [1.0, 2.0, 3.0])


def test_output_read_by_another_output_sums_seed_and_uses():
    bld = Builder()
    bld.container("x", (3,), "argument")
    bld.container("y", (3,), "result")
    bld.container("z", (3,), "result")
    bld.tasklet("sq", [(i, 0, 3)], a * a, {"a": ("x", (i,))}, ("y", (i,)))
    bld.tasklet("cube", [(i, 0, 3)], a ** 3, {"a": ("y", (i,))}, ("z", (i,)))
    x = rng_inputs({"x": (3,)})
    got = vjp(bld.g, x, ["x"], ["y", "z"])
    assert_grads_close(got, jax_vjp(lambda v: jnp.concatenate([v * v, v ** 6]), x, ["x"]))


@pytest.mark.parametrize("inputs,outputs,match", [
    (["nope"], ["s"], "input 'nope' is not a container"),
    (["x"], ["missing"], "output 'missing' is not a container"),
    (["n"], ["s"], "input 'n' has dtype int32"),
    (["x"], ["flag"], "output 'flag' has dtype bool"),
])
def test_clear_errors(inputs, outputs, match):
    g = dead_branch_graph()
    g.add_container("n", (5,), "int32", "argument")
    g.add_container("flag", (5,), "bool", "result")
    with pytest.raises(DifferentiationError, match=match):
        add_backward_pass(g, inputs, outputs)
    assert issubclass(DifferentiationError, ValueError)


def second_order_graph():
    """L0 = sum(sin(a * b) + a**2 * b)**2 elementwise, a and b of shape (4,)."""
    bld = Builder()
    bld.container("a", (4,), "argument")
    bld.container("b", (4,), "argument")
    bld.container("u", (4,))
    bld.container("L0", (), "result")
    bld.tasklet("u", [(i, 0, 4)], sympy.sin(a * b) + a * a * b, {"a": ("a", (i,)), "b": ("b", (i,))}, ("u", (i,)))
    bld.tasklet("l0", [(i, 0, 4)], a * a, {"a": ("u", (i,))}, ("L0", ()), "sum")
    return bld.g


def l0(x, y):
    return jnp.sum((jnp.sin(x * y) + x * x * y) ** 2)


def test_gradient_of_squared_gradient_norm_matches_jax():
    g = second_order_graph()
    first = add_backward_pass(g, ["a", "b"], ["L0"])
    g.add_container("L1", (), "float64", "result")
    g.add_tasklet("l1", [(i, 0, 4)], {"o": a * a + b * b},
                  {"a": (g.latest(first["a"]), (i,)), "b": (g.latest(first["b"]), (i,))},
                  {"o": (g.access("L1", 0), (), "sum")})
    second = add_backward_pass(g, ["a", "b"], ["L1"])
    g.validate()
    values = rng_inputs({"a": (4,), "b": (4,)})
    out = ir.run(g, {**values, "seed_L0": np.array(1.0), "seed_L1": np.array(1.0)}, float_dtype="float64")

    def l1(x, y):
        ga, gb = jax.jit(jax.grad(l0, argnums=(0, 1)))(x, y)
        return jnp.sum(ga ** 2 + gb ** 2)
    want = jax.jit(jax.grad(l1, argnums=(0, 1)))(values["a"], values["b"])
    np.testing.assert_allclose(out[second["a"]], want[0], rtol=1e-9)
    np.testing.assert_allclose(out[second["b"]], want[1], rtol=1e-9)


def test_hessian_vector_product_matches_jax():
    g = second_order_graph()
    first = add_backward_pass(g, ["a", "b"], ["L0"])
    hvp = add_backward_pass(g, ["a", "b"], [first["a"], first["b"]])
    values = rng_inputs({"a": (4,), "b": (4,)})
    v = rng_inputs({"a": (4,), "b": (4,)}, seed=7)
    seeds = g.meta["seeds"]
    out = ir.run(g, {**values, seeds["L0"]: np.array(1.0), seeds[first["a"]]: v["a"],
                     seeds[first["b"]]: v["b"]}, float_dtype="float64")
    _, want = jax.jvp(jax.jit(jax.grad(l0, argnums=(0, 1))), (values["a"], values["b"]), (v["a"], v["b"]))
    np.testing.assert_allclose(out[hvp["a"]], want[0], rtol=1e-9)
    np.testing.assert_allclose(out[hvp["b"]], want[1], rtol=1e-9)


def test_third_order_still_valid_graph():
    g = second_order_graph()
    first = add_backward_pass(g, ["a"], ["L0"])
    second = add_backward_pass(g, ["a"], [first["a"]])
    third = add_backward_pass(g, ["a"], [second["a"]])
    g.validate()
    x = np.array([0.3, -0.2, 0.5, 1.0])
    y = np.array([1.0, 2.0, -1.0, 0.5])
    seeds = g.meta["seeds"]
    feed = {"a": x, "b": y, **{s: np.ones(() if o == "L0" else 4) for o, s in seeds.items()}}
    out = ir.run(g, feed, float_dtype="float64")

    def d2(x):  # second derivative of L0 along ones, then gradient of its sum
        gfun = jax.grad(lambda z: l0(z, y))
        return jnp.sum(jax.jvp(jax.jit(gfun), (x,), (jnp.ones(4),))[1])
    np.testing.assert_allclose(out[third["a"]], jax.jit(jax.grad(d2))(x), rtol=1e-8)


def test_empty_domain_tasklet_carries_no_gradient():
    """A hand-built tasklet over ``0:0`` (the tracer emits none) runs no point:
    the reverse pass gives it no contribution.  The stencil gather used to read
    its gradient at index -1 of a 0-size container."""
    x = sympy.Symbol("x", real=True)
    i0, t0, t1 = ir.index_symbol("i0"), ir.index_symbol("t0"), ir.index_symbol("t1")
    g = ir.DataflowGraph("empty")
    g.add_container("C", (4, 4), "float64", "argument")
    g.add_container("v", (0,), "float64")
    g.add_container("out", (), "float64", "result")
    g.add_tasklet("take", [(i0, 0, 0)], {"o": 2 * x}, {"x": (g.access("C"), (i0, 1))},
                  {"o": (g.new_version("v"), (i0,))})
    g.add_tasklet("square", [(t0, 0, 4), (t1, 0, 4)], {"o": x * x}, {"x": (g.access("C"), (t0, t1))},
                  {"o": (g.new_version("out"), (), "sum")})
    g.add_tasklet("add", [(i0, 0, 0)], {"o": x}, {"x": (g.access("v"), (i0,))}, {"o": (g.access("out"), (), "sum")})
    grads = add_backward_pass(g.validate(), inputs=["C"], outputs=["out"])
    assert not any(t.meta.get("forward_tasklet") in ("take", "add") for t in g.tasklets() if t.backward)
    c = np.random.default_rng(0).standard_normal((4, 4))
    got = ir.run(g, {"C": c, g.meta["seeds"]["out"]: np.ones(())})[grads["C"]]
    np.testing.assert_allclose(got, 2 * c)
