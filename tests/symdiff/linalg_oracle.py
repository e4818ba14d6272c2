"""Checking np.linalg library nodes against jax.numpy.linalg in float64: the
value, a VJP with a random dense cotangent per output and a JVP with a random
tangent per argument, on one device.

A case is ``fn(xp, *args)`` written once for both namespaces (``xp`` is numpy
while symdiff traces it, ``jax.numpy`` for the oracle) returning an array or
a tuple of arrays."""
from __future__ import annotations

import numpy as np
import pytest

import symdiff as sd

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy

NAMES = "abcd"


def program(fn, count: int) -> sd.DifferentiableProgram:
    """A differentiable program with arguments named a, b, ... calling ``fn(np, ...)``."""
    names = ", ".join(NAMES[:count])
    scope = {"fn": fn, "np": np}
    exec(f"def case({names}):\n    return fn(np, {names})\n", scope)  # noqa: S102 (test helper)
    return sd.differentiable_program(scope["case"])


def _tuple(x) -> tuple:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def spd(rng, *shape) -> np.ndarray:
    """Well-conditioned symmetric positive definite matrices of shape (..., n, n)."""
    x = rng.normal(size=shape)
    n = shape[-1]
    return x @ np.swapaxes(x, -1, -2) / n + np.eye(n)


def general(rng, *shape) -> np.ndarray:
    """Well-conditioned square (or rectangular) matrices."""
    x = rng.normal(size=shape)
    m, n = shape[-2:]
    return x / np.sqrt(max(m, n)) + (np.eye(m, n) * 2 if m == n else 0)


def check(fn, *args, device: str = "numpy", rtol: float = 1e-9, atol: float = 1e-10, seed: int = 0,
          jvp: bool = True, vjp: bool = True) -> None:
    rng = np.random.default_rng(seed)
    prog = program(fn, len(args))
    jargs = [jnp.asarray(a) for a in args]
    outputs = _tuple(jax.eval_shape(lambda *xs: _tuple(fn(jnp, *xs)), *jargs))
    cts = [rng.normal(size=o.shape) for o in outputs]
    tangents = {n: rng.normal(size=np.shape(a)) for n, a in zip(NAMES, args)}
    expected, want_vjp, want_jvp = _jax_oracle(fn, jargs, cts, [tangents[n] for n in NAMES[:len(args)]])
    got = _tuple(prog(*args, device=device))
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, np.asarray(e), rtol=rtol, atol=atol, err_msg="value")
    if vjp:
        value, grads = prog.vjp(*args, cotangent=cts[0] if len(cts) == 1 else tuple(cts), device=device)
        for name, w in zip(NAMES, want_vjp):
            np.testing.assert_allclose(grads[name], np.asarray(w), rtol=rtol, atol=atol, err_msg=f"vjp {name}")
    if jvp:
        _, tan = prog.jvp(*args, tangents=tangents, device=device)
        for t, w in zip(_tuple(tan), want_jvp):
            np.testing.assert_allclose(t, np.asarray(w), rtol=rtol, atol=atol, err_msg="jvp")


def _jax_oracle(fn, jargs, cts, tangents):
    """JAX's value, VJP of ``cts`` and JVP of ``tangents``, from one compiled
    function (an XLA compile of a linear-algebra program is 0.1 s: one instead of four)."""
    def all_three(xs, cts, tangents):
        f = lambda *a: _tuple(fn(jnp, *a))  # noqa: E731
        out, pullback = jax.vjp(f, *xs)
        return out, pullback(tuple(cts)), jax.jvp(f, tuple(xs), tuple(tangents))[1]
    return jax.jit(all_three)([*jargs], [jnp.asarray(c) for c in cts], [jnp.asarray(t) for t in tangents])
