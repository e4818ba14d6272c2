"""Gradients of gradients through library nodes: a VJP rule is traced from
differentiable operations (solves, matmuls, other library nodes), so a second
reverse pass goes through it.  Checked against JAX's hessian-vector products
in float64, and with sd.gradcheck."""
from __future__ import annotations

import numpy as np
import pytest

import symdiff as sd
from linalg_oracle import jax, jnp, general, program, spd

rng = np.random.default_rng(3)

CASES = {
    "solve": (lambda xp, a, b: xp.sum(xp.sin(xp.linalg.solve(a, b))), lambda: (general(rng, 3, 3),
                                                                              rng.normal(size=(3, 2)))),
    "cholesky": (lambda xp, a: xp.sum(xp.linalg.cholesky(a) ** 3), lambda: (spd(rng, 4, 4),)),
    "det": (lambda xp, a: xp.linalg.det(a) ** 2, lambda: (general(rng, 3, 3),)),
    "slogdet": (lambda xp, a: xp.sum(xp.linalg.slogdet(a)[1]), lambda: (general(rng, 2, 3, 3),)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_grad_of_grad(name):
    fn, make = CASES[name]
    args = make()
    names = "abcd"[:len(args)]
    first = program(fn, len(args)).grad_program()
    # d/dargs of <grad, v>: the hessian-vector product, against jax's
    v = [rng.normal(size=a.shape) for a in args]
    grads = first(*args, device="numpy")
    grads = grads if isinstance(grads, tuple) else (grads,)

    def jgrad(*xs):
        return jax.jit(jax.grad(lambda *ys: fn(jnp, *ys), argnums=tuple(range(len(xs)))))(*xs)
    want_grads = jgrad(*[jnp.asarray(a) for a in args])
    for g, w in zip(grads, want_grads):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-9, atol=1e-10)
    _, hvp = first.vjp(*args, cotangent=tuple(v) if len(v) > 1 else v[0], device="numpy")
    _, pullback = jax.vjp(jax.jit(jgrad), *[jnp.asarray(a) for a in args])
    want = pullback(tuple(jnp.asarray(x) for x in v))
    for n, w in zip(names, want):
        np.testing.assert_allclose(hvp[n], np.asarray(w), rtol=1e-8, atol=1e-9)


def test_gradcheck_through_library_nodes():
    a, b = general(rng, 3, 3), rng.normal(size=(3, 2))
    sd.gradcheck(lambda a, b: np.sum(np.linalg.solve(a, b) ** 2), a, b)
    # cholesky and eigh read one triangle but differentiate as if symmetric (JAX's convention):
    # finite differences agree when the argument is made symmetric inside the program
    sd.gradcheck(lambda a: np.sum(np.linalg.cholesky(a + a.T)), spd(rng, 3, 3))
    sd.gradcheck(lambda a: np.linalg.slogdet(a)[1], a)
    sd.gradcheck(lambda a: np.sum(np.linalg.eigvalsh(a + a.T) ** 2), spd(rng, 3, 3))
    sd.gradcheck(lambda a: np.linalg.norm(a, "nuc"), general(rng, 4, 3))


def _mixed(xp, a):
    return xp.sum(xp.linalg.inv(a) ** 2) + xp.linalg.slogdet(a)[1] + xp.sum(xp.linalg.cholesky(a @ a.T))


def test_forward_over_reverse():
    a, t = general(rng, 3, 3), rng.normal(size=(3, 3))
    grad_program = sd.differentiable_program(lambda a: _mixed(np, a)).grad_program()
    _, hvp = grad_program.jvp(a, tangents={"a": t}, device="numpy")
    want = jax.jvp(jax.jit(jax.grad(lambda x: _mixed(jnp, x))), (a,), (t,))[1]
    np.testing.assert_allclose(hvp, np.asarray(want), rtol=1e-9, atol=1e-12)


def test_reverse_over_forward():
    a, t = general(rng, 3, 3), rng.normal(size=(3, 3))
    jvp_program = sd.differentiable_program(lambda a: _mixed(np, a)).jvp_program(tangent_of=["a"])
    _, grads = jvp_program.vjp(a, t, cotangent=np.ones(()), device="numpy")
    want = jax.jit(jax.grad(lambda x, tt: jax.jvp(lambda y: _mixed(jnp, y), (x,), (tt,))[1], argnums=(0, 1)))(a, t)
    np.testing.assert_allclose(grads["a"], np.asarray(want[0]), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(grads["t_a"], np.asarray(want[1]), rtol=1e-9, atol=1e-12)


def test_a_custom_vjp_around_library_nodes_uses_its_own_backward():
    @sd.custom_vjp
    def lsolve(a, b):
        return np.linalg.solve(a, b)

    def fwd(a, b):
        x = np.linalg.solve(a, b)
        return x, (a, x)

    def bwd(residuals, g):
        a, x = residuals
        b_bar = np.linalg.solve(a.T, g)
        return -(b_bar @ x.T), b_bar
    lsolve.defvjp(fwd, bwd)
    a, b = general(rng, 3, 3), rng.normal(size=(3, 2))
    custom = sd.differentiable_program(lambda a, b: np.sum(lsolve(a, b) ** 2))
    plain = sd.differentiable_program(lambda a, b: np.sum(np.linalg.solve(a, b) ** 2))
    _, grads = custom.value_and_grad(a, b, device="numpy")
    _, want = plain.value_and_grad(a, b, device="numpy")
    for k in ("a", "b"):
        np.testing.assert_allclose(grads[k], want[k], rtol=1e-12)
    graph = custom.backward_graph()
    solves = [graph.node(n) for n in graph.nx.nodes if getattr(graph.node(n), "op", None) == "linalg.solve"]
    assert len(solves) == 2 and all(s.meta.get("custom_vjp") == "lsolve" for s in solves)   # fwd's and bwd's
