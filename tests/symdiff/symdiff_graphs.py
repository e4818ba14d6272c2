"""Hand-built graphs for the differentiation tests, and a JAX oracle.

Tests build graphs directly with the ``ir`` API (no tracer), so each one
exercises exactly the memlet shape it is about.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import jax
import numpy as np
import sympy

from symdiff import ir
from symdiff.ir.graph import DataflowGraph, index_symbol
from symdiff.backward import add_backward_pass

jax.config.update("jax_enable_x64", True)

i, j, k = (index_symbol(n) for n in "ijk")
a, b, c = (sympy.Symbol(n, real=True) for n in "abc")


def idx(*names: str) -> tuple:
    return tuple(index_symbol(n) for n in names)


class Builder:
    """Terse graph construction: containers by name, tasklets writing the next
    version of their target."""

    def __init__(self, name: str = "t"):
        self.g = DataflowGraph(name)

    def container(self, name: str, shape: Sequence, role: str = "transient", dtype: str = "float64") -> str:
        self.g.add_container(name, shape, dtype, role)
        return name

    def tasklet(self, name: str, domain: Sequence, expr, reads: Mapping[str, tuple[str, tuple]],
                out: tuple, acc: str | None = None, new_version: bool = True, condition=sympy.true):
        """``out = (container, index)``; reads ``{conn: (container, index)}`` of
        the latest versions; writes a fresh version unless ``new_version`` is
        False (another writer of the same version)."""
        target = self.g.new_version(out[0]) if new_version else self.g.latest(out[0])
        return self.g.add_tasklet(name, domain, {"o": expr},
                                  {conn: (self.g.latest(cn), ix) for conn, (cn, ix) in reads.items()},
                                  {"o": (target, out[1], acc)}, condition=condition)


def rng_inputs(shapes: Mapping[str, tuple], seed: int = 0, low: float = -1.0, high: float = 1.0):
    r = np.random.default_rng(seed)
    return {n: r.uniform(low, high, s) for n, s in shapes.items()}


def vjp(graph: DataflowGraph, values: Mapping[str, np.ndarray], wrt: Sequence[str], outputs: Sequence[str],
        cotangents: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Gradients of ``sum(cotangent * output)`` from a differentiated copy
    (cotangents default to ones), run in float64 on the interpreter."""
    g = graph.copy()
    grads = add_backward_pass(g, wrt, outputs)
    g.validate()
    feed = dict(values)
    for o in outputs:
        shape = g.containers[o].concrete_shape(ir.bind_sizes(graph, values))
        feed[g.meta["seeds"][o]] = (cotangents or {}).get(o, np.ones(shape))
    result = ir.run(g, feed, float_dtype="float64")
    return {x: result[grads[x]] for x in wrt}


def jax_vjp(fn, values: Mapping[str, np.ndarray], wrt: Sequence[str], cotangent=None) -> dict[str, np.ndarray]:
    """The same gradient by JAX: ``fn(*values.values())`` returns one array."""
    def scalar(*args):
        bound = {**values, **dict(zip(wrt, args))}
        out = fn(*bound.values())
        ct = np.ones(np.shape(out)) if cotangent is None else cotangent
        return jax.numpy.sum(out * ct)
    grads = jax.jit(jax.grad(scalar, argnums=tuple(range(len(wrt)))))(*(values[x] for x in wrt))
    return {x: np.asarray(gx) for x, gx in zip(wrt, grads)}


def assert_grads_close(got: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray], rtol=1e-9, atol=1e-11):
    assert set(got) == set(want)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=rtol, atol=atol, err_msg=f"gradient of {name}")
