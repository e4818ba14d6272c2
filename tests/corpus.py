"""Composite programs with JAX twins: the shared gradient corpus.

Each case is written once against an array namespace ``xp`` (numpy while
tracing, ``jax.numpy`` for the oracle); programs that update in place or use
``sd.map`` carry a separate JAX body.  The symdiff tests run the corpus on the
interpreter and the lowering tests on every Slang device, both against JAX in
float64, within bounds scaled by JAX's own float32 error (tests/float_bounds.py).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

import float_bounds


def set_item(xp, x, index, value):
    """``x[index] = value``: in place while tracing (numpy), functional in JAX
    (``x.at[index].set``), so one body serves the program and its oracle."""
    if xp is np:
        x[index] = value
        return x
    return x.at[index].set(value)


@dataclass
class Case:
    name: str
    body: Callable                       # body(xp, *args) or body(sd, xp, *args) when uses_map
    shapes: dict[str, tuple]
    wrt: list[str]
    jax_body: Callable | None = None     # jax_body(jnp, *args); None: body itself
    uses_map: bool = False
    positive: tuple[str, ...] = ()       # arguments drawn from (0.5, 2)
    tol: float | None = None             # an extra ceiling on the relative L2 error, if a test wants one
    extra: dict = field(default_factory=dict)

    def inputs(self, seed: int = 7) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        out = {}
        for n, s in self.shapes.items():
            if n in self.positive:
                out[n] = rng.uniform(0.5, 2.0, s).astype(np.float32)
            else:
                out[n] = rng.standard_normal(s).astype(np.float32)
        return out


def _mlp(xp, x, w1, b1, w2):
    h = xp.maximum(x @ w1 + b1, 0.0)
    return xp.sum(xp.tanh(h @ w2) ** 2)


def _softmax_xent(xp, logits, y):
    m = xp.max(logits, axis=1, keepdims=True)
    s = logits - m
    lse = xp.log(xp.sum(xp.exp(s), axis=1, keepdims=True))
    return -xp.mean(xp.sum(y * (s - lse), axis=1))


def _layer_norm(xp, x, g, b):
    mu = xp.mean(x, axis=-1, keepdims=True)
    var = xp.mean((x - mu) ** 2, axis=-1, keepdims=True)
    y = (x - mu) / xp.sqrt(var + 1e-5) * g + b
    return xp.sum(y * y * 0.5 + y)


def _jacobi_1d(xp, u):
    u = u.copy()
    for _ in range(4):
        u[1:-1] = 0.25 * u[:-2] + 0.5 * u[1:-1] + 0.25 * u[2:]
    return xp.sum(u * u)


def _jacobi_1d_jax(jnp, u):
    for _ in range(4):
        u = u.at[1:-1].set(0.25 * u[:-2] + 0.5 * u[1:-1] + 0.25 * u[2:])
    return jnp.sum(u * u)


def _jacobi_2d(xp, a):
    a = a.copy()
    for _ in range(3):
        a[1:-1, 1:-1] = 0.2 * (a[1:-1, 1:-1] + a[:-2, 1:-1] + a[2:, 1:-1] + a[1:-1, :-2] + a[1:-1, 2:])
    return xp.sum(xp.sin(a))


def _jacobi_2d_jax(jnp, a):
    for _ in range(3):
        a = a.at[1:-1, 1:-1].set(0.2 * (a[1:-1, 1:-1] + a[:-2, 1:-1] + a[2:, 1:-1] + a[1:-1, :-2] + a[1:-1, 2:]))
    return jnp.sum(jnp.sin(a))


def _map_stencil(sd, xp, a):
    n = a.shape[0]
    out = xp.zeros_like(a)
    for i in sd.map[1:n - 1]:
        out[i] = (a[i - 1] + 2.0 * a[i] + a[i + 1]) / 4.0
    s = xp.zeros(1, dtype=xp.float32)
    for i in sd.map[0:n]:
        s[0] += out[i] * out[i]
    return s[0]


def _map_stencil_jax(jnp, a):
    inner = (a[:-2] + 2.0 * a[1:-1] + a[2:]) / 4.0
    return jnp.sum(inner * inner)


def _map_2d(sd, xp, a, w):
    n, m = a.shape
    out = xp.zeros((n - 2, m), dtype=xp.float32)
    for i, j in sd.map[1:n - 1, 0:m]:
        out[i - 1, j] = w[j] * (a[i + 1, j] - a[i - 1, j])
    return xp.sum(out ** 2)


def _map_2d_jax(jnp, a, w):
    return jnp.sum((w[None, :] * (a[2:] - a[:-2])) ** 2)


def _map_rowsum(sd, xp, a):
    n, m = a.shape
    r = xp.zeros(n, dtype=xp.float32)
    for i, j in sd.map[0:n, 0:m]:
        r[i] += xp.exp(a[i, j] * 0.5)
    return xp.sum(xp.log(r))


def _map_rowsum_jax(jnp, a):
    return jnp.sum(jnp.log(jnp.sum(jnp.exp(a * 0.5), axis=1)))


def _conv1d(xp, x, k):
    y = k[0] * x[:-2] + k[1] * x[1:-1] + k[2] * x[2:]
    return xp.sum(xp.tanh(y))


def _dead_branch(xp, x, w, unused):
    dead = xp.exp(unused) * 3.0  # noqa: F841 (never reaches the output)
    return xp.sum(x * w)


CASES: list[Case] = [
    Case("mlp", _mlp, {"x": (8, 6), "w1": (6, 5), "b1": (5,), "w2": (5, 3)}, ["x", "w1", "b1", "w2"]),
    Case("softmax_xent", _softmax_xent, {"logits": (6, 5), "y": (6, 5)}, ["logits"]),
    Case("layer_norm", _layer_norm, {"x": (4, 8), "g": (8,), "b": (8,)}, ["x", "g", "b"]),
    Case("jacobi_1d", _jacobi_1d, {"u": (20,)}, ["u"], jax_body=_jacobi_1d_jax),
    Case("jacobi_2d", _jacobi_2d, {"a": (7, 6)}, ["a"], jax_body=_jacobi_2d_jax),
    Case("map_stencil", _map_stencil, {"a": (30,)}, ["a"], jax_body=_map_stencil_jax, uses_map=True),
    Case("map_2d", _map_2d, {"a": (6, 5), "w": (5,)}, ["a", "w"], jax_body=_map_2d_jax, uses_map=True),
    Case("map_rowsum", _map_rowsum, {"a": (5, 7)}, ["a"], jax_body=_map_rowsum_jax, uses_map=True),
    Case("conv1d", _conv1d, {"x": (25,), "k": (3,)}, ["x", "k"]),
    Case("dead_branch", _dead_branch, {"x": (5,), "w": (5,), "unused": (5,)}, ["x", "w", "unused"]),
    Case("sum_axis0", lambda xp, a: xp.sum(xp.sum(a, axis=0) ** 2), {"a": (4, 5)}, ["a"]),
    Case("sum_axis1", lambda xp, a: xp.sum(xp.sum(a, axis=1) ** 3), {"a": (4, 5)}, ["a"]),
    Case("sum_axis_neg_keepdims", lambda xp, a: xp.sum(a / (1.0 + xp.sum(a * a, axis=-1, keepdims=True))),
         {"a": (3, 4, 5)}, ["a"]),
    Case("sum_axes_tuple", lambda xp, a: xp.sum(xp.sin(xp.sum(a, axis=(0, 2)))), {"a": (3, 4, 5)}, ["a"]),
    Case("mean_max", lambda xp, a: xp.mean(xp.max(a, axis=1)) + xp.min(a), {"a": (5, 6)}, ["a"]),
    Case("prod_axis", lambda xp, a: xp.sum(xp.prod(a, axis=1)), {"a": (4, 3)}, ["a"]),
    Case("broadcast_row", lambda xp, a, b: xp.sum(xp.exp(a * b)), {"a": (4, 5), "b": (5,)}, ["a", "b"]),
    Case("broadcast_col", lambda xp, a, b: xp.sum(xp.cos(a - b)), {"a": (4, 5), "b": (4, 1)}, ["a", "b"]),
    Case("broadcast_outer", lambda xp, a, b: xp.sum(xp.tanh(a[:, None] * b[None, :])), {"a": (4,), "b": (6,)},
         ["a", "b"]),
    Case("matmul_chain", lambda xp, a, b, c: xp.sum((a @ b @ c) ** 2), {"a": (3, 4), "b": (4, 5), "c": (5, 2)},
         ["a", "b", "c"]),
    Case("matvec", lambda xp, a, x: xp.sum(xp.sin(a @ x)), {"a": (5, 4), "x": (4,)}, ["a", "x"]),
    Case("batched_matmul", lambda xp, a, b: xp.sum(xp.matmul(a, b) ** 2), {"a": (2, 3, 4), "b": (2, 4, 3)},
         ["a", "b"]),
    Case("atax", lambda xp, a, x: xp.sum(a.T @ (a @ x)), {"a": (6, 4), "x": (4,)}, ["a", "x"]),
    Case("transpose_dot", lambda xp, a, b: xp.sum(xp.dot(a.T, b) ** 2), {"a": (4, 3), "b": (4, 2)}, ["a", "b"]),
    Case("reshape", lambda xp, a: xp.sum(xp.reshape(a, (3, 8)).sum(axis=0) ** 2), {"a": (4, 6)}, ["a"]),
    Case("where_relu", lambda xp, x: xp.sum(xp.where(x > 0, x * x, 0.1 * x)), {"x": (12,)}, ["x"]),
    Case("where_sqrt", lambda xp, x: xp.sum(xp.where(x > 0, xp.sqrt(xp.abs(x) + 1e-3), -x)), {"x": (12,)}, ["x"]),
    Case("clip_pow", lambda xp, x: xp.sum(xp.clip(x, -0.5, 0.7) ** 3), {"x": (15,)}, ["x"]),
    Case("log_exp", lambda xp, x: xp.sum(xp.log1p(xp.exp(x)) + xp.expm1(-x * x)), {"x": (10,)}, ["x"]),
    Case("trig", lambda xp, x: xp.sum(xp.arctan2(xp.sin(x), 1.5 + xp.cos(x)) + xp.arcsin(xp.tanh(x) * 0.5)),
         {"x": (10,)}, ["x"]),
    Case("hyperbolic", lambda xp, x: xp.sum(xp.sinh(x) * xp.cosh(x * 0.5) / (1.0 + xp.square(x))),
         {"x": (10,)}, ["x"]),
    Case("pow_array", lambda xp, a, b: xp.sum(a ** b), {"a": (8,), "b": (8,)}, ["a", "b"], positive=("a",)),
    Case("reciprocal_sqrt", lambda xp, a: xp.sum(xp.reciprocal(xp.sqrt(a)) + xp.log(a)), {"a": (8,)}, ["a"],
         positive=("a",)),
    Case("slices_steps", lambda xp, a: xp.sum(a[::2] * a[1::2]) + xp.sum(a[::-1][:3]), {"a": (10,)}, ["a"]),
    Case("concat_stack", lambda xp, a, b: xp.sum(xp.concatenate([a, b * 2.0]) ** 2)
         + xp.sum(xp.stack([a, b], axis=1)[:, 1] * a), {"a": (5,), "b": (5,)}, ["a", "b"]),
    Case("maximum_minimum", lambda xp, a, b: xp.sum(xp.maximum(a, b) * 2.0 - xp.minimum(a, 0.3 * b)),
         {"a": (9,), "b": (9,)}, ["a", "b"]),
    Case("row_norms", lambda xp, a: xp.sum((a / xp.sqrt(xp.sum(a * a, axis=1, keepdims=True) + 1e-3)) ** 3),
         {"a": (6, 5)}, ["a"]),
    Case("in_place_add", lambda xp, a, b: _in_place_add(xp, a, b), {"a": (6,), "b": (6,)}, ["a", "b"]),
]


def _in_place_add(xp, a, b):
    c = a * 1.0
    c += b
    c *= a
    return xp.sum(c)


def build_program(sd, case: Case, float64: bool = False):
    """A ``@differentiable_program`` for a case, with ``sd.f32`` (or ``sd.f64``) annotations."""
    names = list(case.shapes)
    call = f"body(sd, np, {', '.join(names)})" if case.uses_map else f"body(np, {', '.join(names)})"
    ns = {"body": case.body, "np": np, "sd": sd}
    exec(compile(f"def {case.name}({', '.join(names)}):\n    return {call}\n", f"<{case.name}>", "exec"), ns)
    fn = ns[case.name]
    spec = sd.f64 if float64 else sd.f32
    fn.__annotations__ = {n: spec[tuple(case.shapes[n])] for n in names}
    return sd.differentiable_program(fn)


_REFERENCES: dict[tuple, tuple] = {}


def _reference_key(case: Case, inputs: dict[str, np.ndarray], dtype) -> tuple:
    """What JAX's answer depends on: the twin, the differentiated arguments, the inputs, the dtype."""
    digest = hashlib.sha256()
    for n, v in inputs.items():
        digest.update(n.encode() + str(v.shape).encode() + np.ascontiguousarray(v).tobytes())
    return (id(case.jax_body or case.body), tuple(case.wrt), digest.hexdigest(), np.dtype(dtype).name)


def jax_value_and_grad(case: Case, inputs: dict[str, np.ndarray], dtype=np.float64):
    """JAX's value and gradients in ``dtype`` (float64: the independent oracle; float32: the
    unit of the float32 bound).  Cached per process: the corpus runs on several devices."""
    key = _reference_key(case, inputs, dtype)
    if key not in _REFERENCES:
        import jax
        jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp
        body = case.jax_body or case.body
        names = list(case.shapes)
        xs = [jnp.asarray(inputs[n], dtype=dtype) for n in names]
        argnums = tuple(names.index(n) for n in case.wrt)
        v, g = jax.jit(jax.value_and_grad(lambda *a: body(jnp, *a), argnums=argnums))(*xs)
        # the body is kept so that its id in the key is never reused by another function
        _REFERENCES[key] = (body, float(v), {n: np.asarray(x, np.float64) for n, x in zip(case.wrt, g)})
    _, v, g = _REFERENCES[key]
    return v, {n: x.copy() for n, x in g.items()}


def corpus_problems(case: Case, value, grads, inputs) -> list[str]:
    """What in symdiff's value and gradients is out of the bounds of tests/float_bounds.py
    (float64 results at 1e-9; float32 ones scaled by JAX float32's error), and out of
    ``case.tol`` where a test set one."""
    ref_v, ref_g = jax_value_and_grad(case, inputs)
    float64 = float_bounds.is_float64(value, *grads.values())
    j32_v, j32_g = (None, {}) if float64 else jax_value_and_grad(case, inputs, np.float32)
    found = float_bounds.problems(f"{case.name} value", value, ref_v, j32_v)
    for n in case.wrt:
        found += float_bounds.problems(f"{case.name} d/d{n}", grads[n], ref_g[n], j32_g.get(n))
        err = np.linalg.norm(np.asarray(grads[n], np.float64).reshape(ref_g[n].shape) - ref_g[n])
        if case.tol is not None and err > case.tol * max(np.linalg.norm(ref_g[n]), 1e-12):
            found.append(f"{case.name}: gradient of {n} beyond the case's ceiling {case.tol:g}")
    return found


def assert_matches_jax(case: Case, value, grads, inputs) -> None:
    found = corpus_problems(case, value, grads, inputs)
    assert not found, "; ".join(found)
