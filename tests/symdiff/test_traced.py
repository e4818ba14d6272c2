"""add_backward_pass on traced programs: the shared corpus, in float64 against
JAX at tight tolerance, plus gradcheck on a few of them."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from symdiff import ir
import symdiff as sd
from corpus import CASES, Case
from symdiff.ir.specs import f64
from symdiff.backward import add_backward_pass
from symdiff.gradcheck import check_graph_gradients

jax.config.update("jax_enable_x64", True)


def traced(case: Case) -> ir.DataflowGraph:
    """Trace a corpus case with float64 specs (positional parameters named as
    in the case, as the tracer requires)."""
    names = ", ".join(case.shapes)
    call = f"body(sd, np, {names})" if case.uses_map else f"body(np, {names})"
    ns = {"body": case.body, "np": np, "sd": sd}
    exec(compile(f"def {case.name}({names}):\n    return {call}\n", f"<{case.name}>", "exec"), ns)
    return ir.trace(ns[case.name], *(f64[tuple(s)] for s in case.shapes.values()))


def jax_gradients(case: Case, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The JAX oracle, jitted: one compile per case instead of one per op."""
    body = case.jax_body or case.body
    names = list(case.shapes)
    argnums = tuple(names.index(n) for n in case.wrt)
    grads = jax.jit(jax.grad(lambda *a: body(jnp, *a), argnums=argnums))(*(inputs[n] for n in names))
    return {n: np.asarray(g) for n, g in zip(case.wrt, grads)}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_corpus_gradients_match_jax_in_float64(case: Case):
    graph = traced(case)
    names = list(case.shapes)
    args = graph.arguments
    inputs = {args[k]: v.astype(np.float64) for k, v in enumerate(case.inputs().values())}
    wrt = [args[names.index(n)] for n in case.wrt]
    grads = add_backward_pass(graph, wrt, graph.results)
    graph.validate()
    out = ir.run(graph, {**inputs, graph.meta["seeds"][graph.results[0]]: np.ones(())}, float_dtype="float64")
    ref = jax_gradients(case, dict(zip(names, inputs.values())))
    for n, w in zip(case.wrt, wrt):
        np.testing.assert_allclose(out[grads[w]].reshape(ref[n].shape), ref[n], rtol=1e-7, atol=1e-9,
                                   err_msg=f"{case.name}: gradient of {n}")


@pytest.mark.parametrize("case", [c for c in CASES if c.name in {"mlp", "softmax_xent", "layer_norm"}],
                         ids=lambda c: c.name)
def test_gradcheck_on_traced_programs(case: Case):
    graph = traced(case)
    inputs = {a: v.astype(np.float64) for a, v in zip(graph.arguments, case.inputs().values())}
    check_graph_gradients(graph, inputs, atol=1e-6, rtol=1e-5)
