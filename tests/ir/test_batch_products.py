"""ir.batch_products: the products an unrolled loop repeats over slices of one
array become one tasklet over a step axis, exactly where nothing else tells the
copies apart; values and gradients stay those of the unrolled program (JAX in
float64)."""
import numpy as np
import pytest

import symdiff as sd
from symdiff import ir
from symdiff.ir import tasklet_notes as notes
from symdiff.ir.batch_products import batch_products

jax = pytest.importorskip("jax")
jnp = jax.numpy
jax.config.update("jax_enable_x64", True)

STEPS = 3


def rnn(xp, xs, h0, wx, wh, b):
    h = h0
    for t in range(STEPS):
        h = xp.tanh(xs[t] @ wx + h @ wh + b)
    return xp.mean(h * h)


def _program(body):
    def f(xs: sd.f32[STEPS, 4, 5], h0: sd.f32[4, 6], wx: sd.f32[5, 6], wh: sd.f32[6, 6], b: sd.f32[6]):
        return body(np, xs, h0, wx, wh, b)
    return sd.differentiable_program(f)


def _arguments():
    rng = np.random.default_rng(3)
    return [rng.standard_normal(s).astype(np.float32) for s in [(STEPS, 4, 5), (4, 6), (5, 6), (6, 6), (6,)]]


def _products(graph):
    return [t for t in graph.tasklets() if len(t.domain) > 2 and not t.backward]


def _matches_jax(program, body, device):
    args = _arguments()
    value, grads = program.value_and_grad(*args, device=device)
    want, wanted = jax.jit(jax.value_and_grad(lambda *a: body(jnp, *a), argnums=(0, 1, 2, 3, 4)))(
        *[a.astype(np.float64) for a in args])
    np.testing.assert_allclose(float(value), float(want), rtol=1e-5)
    for k, name in enumerate(["xs", "h0", "wx", "wh", "b"]):
        np.testing.assert_allclose(np.asarray(grads[name]), np.asarray(wanted[k]), rtol=2e-4, atol=1e-6)


def test_the_input_products_of_an_unrolled_rnn_become_one_product_over_the_steps():
    graph = _program(rnn).graph
    batched = [t for t in _products(graph) if notes.batched(t)]
    assert len(batched) == 1 and len(notes.batched(batched[0])) == STEPS
    (t,) = batched
    assert t.domain[0][1:] == (0, STEPS)
    (out, written), = graph.writes(t.name)
    assert graph.containers[written.container].shape == (STEPS, 4, 6)
    readers = sorted(m.index[0] for r, m in graph.readers(out))
    assert readers == list(range(STEPS))            # each step reads its own slice
    assert len(_products(graph)) == 1 + STEPS        # the recurrent h @ wh stay one a step


@pytest.mark.parametrize("device", ["numpy", "cpu"])
def test_a_batched_rnn_has_jaxs_value_and_gradients(device):
    _matches_jax(_program(rnn), rnn, device)


def test_the_weight_gradient_of_a_batched_product_is_one_contraction_without_a_gather():
    """Each step adds its gradient into its own slice of the batch's gradient: writes
    that cannot meet need no gather (symdiff.transpose), whose one tasklet read every
    step's contribution for every element."""
    g = _program(rnn).backward_graph(wrt=["wx"])
    assert not [t for t in g.tasklets() if notes.strategy(t) == "gather" and "steps" in t.name]
    grad_wx = ir.GraphNotes(g).gradients["wx"]
    assert len(g.writers(g.access(grad_wx, 0))) == 1


def scrambled(xp, xs, h0, wx, wh, b):
    """Slices 0, 2, 1: their offsets do not step evenly, so the products stay apart."""
    h = h0
    for t in (0, 2, 1):
        h = xp.tanh(xs[t] @ wx + h @ wh + b)
    return xp.mean(h * h)


def returned(xp, xs, h0, wx, wh, b):
    """The products are the results: nothing to batch."""
    return xs[0] @ wx, xs[1] @ wx


def shifted_weights(xp, xs, h0, wx, wh, b):
    """Each step reads another version of the weights: they are not copies of one product."""
    h = h0
    for t in range(STEPS):
        h = xp.tanh(xs[t] @ wx + h @ wh + b)
        wx = wx * 0.5
    return xp.mean(h * h)


@pytest.mark.parametrize("body", [scrambled, shifted_weights])
def test_products_that_differ_in_more_than_the_step_are_left_alone(body):
    program = _program(body)
    assert not [t for t in program.graph.tasklets() if notes.batched(t)]
    _matches_jax(program, body, "numpy")


def test_products_written_as_results_are_left_alone():
    graph = ir.trace(lambda xs, wx: returned(np, xs, None, wx, None, None),
                     sd.f32[STEPS, 4, 5], sd.f32[5, 6])
    assert batch_products(graph) == 0 and len(_products(graph)) == 2



def test_the_products_of_custom_vjp_calls_are_left_to_their_rule():
    """A ``custom_vjp`` function called on each step's slice: its rule (here, twice the
    true gradient) differentiates each call's tasklets as they are."""
    @sd.custom_vjp
    def project(x, w):
        return x @ w

    project.defvjp(lambda x, w: (x @ w, (x, w)), lambda res, g: (2 * g @ res[1].T, 2 * res[0].T @ g))

    def f(xs: sd.f64[STEPS, 4, 5], w: sd.f64[5, 6]):
        return sum(np.sum(project(xs[t], w)) for t in range(STEPS))
    program = sd.differentiable_program(f)
    assert not [t for t in program.graph.tasklets() if notes.batched(t)]
    xs, w = np.random.default_rng(1).standard_normal((STEPS, 4, 5)), np.ones((5, 6))
    grads = program.grad(xs, w, device="numpy")
    np.testing.assert_allclose(grads["w"], 2 * xs.sum(axis=(0, 1))[:, None] * np.ones((1, 6)))
