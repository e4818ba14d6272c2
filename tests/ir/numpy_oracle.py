"""The oracle the numpy conformance tests share: a body written once as
``body(xp, *arrays)`` runs traced by symdiff (``xp`` is numpy) and under
``jax.numpy`` in float64; values and vector-Jacobian products must agree to
1e-9 relative.  One random cotangent per output checks every input's gradient
at once (a VJP with a dense cotangent sees every Jacobian entry)."""
from __future__ import annotations

from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import symdiff as sd

jax.config.update("jax_enable_x64", True)

RTOL = 1e-9
ATOL = 1e-12


def program(body: Callable, n: int) -> sd.DifferentiableProgram:
    """``body(np, a0, ..., a{n-1})`` as a program with n array parameters
    (unannotated: specs come from the first call's values)."""
    names = ", ".join(f"a{k}" for k in range(n))
    ns = {"body": body, "np": np}
    exec(compile(f"def prog({names}):\n    return body(np, {names})\n", f"<{body.__name__}>", "exec"), ns)
    return sd.differentiable_program(ns["prog"])


def _tuple(x) -> tuple:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _floating(x) -> bool:
    return np.issubdtype(np.asarray(x).dtype, np.floating)


def check(body: Callable, *inputs, device: str = "numpy", jax_body: Callable | None = None,
          rtol: float = RTOL, atol: float = ATOL, grad: bool = True, seed: int = 0) -> None:
    """Value and (where the outputs are floating) gradient of ``body`` on
    ``device`` against JAX float64; ``jax_body`` where JAX spells it differently."""
    inputs = [np.asarray(x) for x in inputs]
    prog = program(body, len(inputs))
    reference = jax_body or body
    wide = [x.astype(np.float64) if _floating(x) else x for x in inputs]   # the oracle runs in float64
    want = _tuple(reference(jnp, *(jnp.asarray(x) for x in wide)))
    got = _tuple(prog(*inputs, device=device))
    assert len(got) == len(want), f"{len(got)} outputs, JAX has {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        w = np.asarray(w)
        assert np.shape(g) == w.shape, f"output {k}: shape {np.shape(g)}, JAX {w.shape}"
        if w.dtype == bool:
            np.testing.assert_array_equal(np.asarray(g), w, err_msg=f"output {k}")
        else:
            np.testing.assert_allclose(np.asarray(g, dtype=np.float64), w, rtol=rtol, atol=atol,
                                       err_msg=f"value of output {k}")
    wrt = [k for k, x in enumerate(inputs) if _floating(x)]
    if not grad or not wrt or not all(_floating(w) for w in want):
        return
    rng = np.random.default_rng(seed)
    cotangents = tuple(rng.normal(size=np.shape(w)) for w in want)

    def of_floats(*floats):
        args = list(wide)
        for k, f in zip(wrt, floats):
            args[k] = f
        return _tuple(reference(jnp, *args))

    _, pullback = jax.vjp(jax.jit(of_floats), *(jnp.asarray(wide[k]) for k in wrt))
    cotangents = tuple(c.astype(np.asarray(g).dtype) for c, g in zip(cotangents, got))
    want_grads = pullback(tuple(jnp.asarray(c, dtype=np.float64) for c in cotangents))
    _, grads = prog.vjp(*inputs, cotangent=cotangents if len(cotangents) > 1 else cotangents[0],
                        wrt=[f"a{k}" for k in wrt], device=device)
    for k, w in zip(wrt, want_grads):
        np.testing.assert_allclose(np.asarray(grads[f"a{k}"]).reshape(np.shape(w)), np.asarray(w),
                                   rtol=rtol, atol=atol, err_msg=f"gradient of input {k}")


def refused(body: Callable, *inputs, match: str) -> str:
    """The message of the trace error ``body`` raises; it names this test file's line."""
    import pytest
    with pytest.raises(sd.ir.TraceError, match=match) as info:
        program(body, len(inputs))(*inputs)
    assert "numpy_oracle" not in str(info.value)
    return str(info.value)


# The Slang devices a conformance sample runs on (lavapipe marked, for CI's Vulkan runs).
SLANG_DEVICES = [pytest.param(d, marks=[pytest.mark.vulkan] if d == "vulkan" else []) for d in ("cpu", "vulkan")]


def need(device: str) -> None:
    """Skip a sample where ``device`` is not present."""
    if device not in sd.available_devices():
        pytest.skip(f"{device} is not available here")


def arrays(*shapes: Sequence[int], seed: int = 1) -> list[np.ndarray]:
    """Float64 inputs away from 0 and ties (distinct values)."""
    rng = np.random.default_rng(seed)
    return [rng.uniform(0.5, 2.0, size=s) * rng.choice([-1.0, 1.0], size=s) for s in shapes]
