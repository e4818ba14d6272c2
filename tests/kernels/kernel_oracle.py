"""The oracle for the kernel suite: JAX value and gradients in float64 and float32.

float32 results are judged against float64 with a tolerance scaled by JAX's own
float32 error on the same (float32-rounded) inputs: a kernel that loses digits in
float32 by its nature (a triangular solve, a recursion) is not charged to symdiff,
one that symdiff loses and JAX does not is.

JAX needs minutes on a 2-core machine to differentiate these unrolled kernels
(every op of a new shape compiles), so its results are stored in
``jax_reference.npz`` next to this file, each under a fingerprint of the JAX twin's
source (and the helpers it calls), the inputs and the dtype.  A kernel whose
fingerprint changed is computed live, and ``test_stored_references_are_current``
fails until ``python tests/kernels/kernel_oracle.py`` regenerates the file.
"""
from __future__ import annotations

import functools
import hashlib
import inspect
import sys
from pathlib import Path

import numpy as np

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))

from polybench import KERNELS, Kernel  # noqa: E402

STORE = Path(__file__).with_name("jax_reference.npz")
DTYPES = ("float64", "float32")


def _jax():
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    return jax, jnp


def jax_value_and_grad(kernel: Kernel, inputs: dict[str, np.ndarray], dtype) -> tuple[float, dict]:
    """Value and gradients w.r.t. every argument, computed by the kernel's JAX twin in ``dtype``."""
    jax, jnp = _jax()
    names = list(kernel.shapes)
    xs = [jnp.asarray(inputs[n], dtype=jnp.int32 if n in kernel.indices else dtype) for n in names]
    argnums = tuple(names.index(n) for n in kernel.floats)
    value, grads = jax.jit(jax.value_and_grad(lambda *a: kernel.jax(jnp, *a), argnums=argnums))(*xs)
    return float(value), {n: np.asarray(g, np.float64) for n, g in zip(kernel.floats, grads)}


def rounded_inputs(kernel: Kernel, dtype_name: str) -> dict[str, np.ndarray]:
    return {n: v if n in kernel.indices else v.astype(dtype_name) for n, v in kernel.inputs().items()}


def fingerprint(kernel: Kernel, dtype_name: str) -> str:
    """What a stored reference depends on: the twin's source and that of the module-level
    functions it names, the inputs, the dtype."""
    h = hashlib.sha256(dtype_name.encode())
    h.update(inspect.getsource(kernel.jax).encode())
    for name in sorted(kernel.jax.__code__.co_names):
        helper = kernel.jax.__globals__.get(name)
        if inspect.isfunction(helper):
            h.update(inspect.getsource(helper).encode())
    for n, v in rounded_inputs(kernel, dtype_name).items():
        h.update(n.encode() + str(v.shape).encode() + v.tobytes())
    return h.hexdigest()


def compute(kernel: Kernel, dtype_name: str) -> dict:
    """JAX float64 on the inputs rounded to ``dtype_name``, and (for float32) JAX float32's
    relative error against it per quantity (``"value"`` and each argument)."""
    inputs = rounded_inputs(kernel, dtype_name)
    value, grads = jax_value_and_grad(kernel, inputs, np.float64)
    jax_error = {}
    if dtype_name == "float32":
        v32, g32 = jax_value_and_grad(kernel, inputs, np.float32)
        jax_error["value"] = relative_error(v32, value, scale=abs(value))
        scale = grad_scale(grads)
        for n, g in g32.items():
            jax_error[n] = relative_error(g, grads[n], scale)
    return {"value": value, "grads": grads, "jax_error": jax_error}


@functools.lru_cache(maxsize=1)
def _stored() -> dict:
    if not STORE.exists():
        return {}
    with np.load(STORE) as f:
        return {k: f[k] for k in f.files}


def stored(kernel: Kernel, dtype_name: str) -> dict | None:
    """The stored reference, or None when it is missing or its fingerprint is stale."""
    s, key = _stored(), f"{kernel.name}/{dtype_name}/"
    if str(s.get(key + "fingerprint", "")) != fingerprint(kernel, dtype_name):
        return None
    return {"value": float(s[key + "value"]),
            "grads": {n: s[key + "grad/" + n] for n in kernel.floats},
            "jax_error": {k[len(key + "jax_error/"):]: float(v) for k, v in s.items()
                          if k.startswith(key + "jax_error/")}}


@functools.lru_cache(maxsize=None)
def reference(kernel: Kernel, dtype_name: str) -> dict:
    """The stored reference when current, else computed live; plus the inputs it belongs to."""
    ref = stored(kernel, dtype_name) or compute(kernel, dtype_name)
    return {**ref, "inputs": rounded_inputs(kernel, dtype_name)}


def grad_scale(grads: dict[str, np.ndarray]) -> float:
    """A gradient that is zero everywhere is judged relative to the largest gradient's norm."""
    return max(float(np.linalg.norm(g)) for g in grads.values()) or 1.0


def relative_error(got, want, scale: float) -> float:
    """L2 error of ``got`` relative to ``want``'s norm (or to ``scale`` where ``want`` is tiny)."""
    got = np.asarray(got, np.float64).reshape(np.shape(want))
    norm = max(float(np.linalg.norm(want)), 1e-6 * scale, 1e-300)
    return float(np.linalg.norm(got - want)) / norm


def assert_matches(kernel: Kernel, dtype_name: str, value, grads, rtol64: float = 1e-9,
                   floor32: float = 1e-4, factor32: float = 10.0) -> None:
    """symdiff's value and gradients against JAX float64 (see the module docstring for float32)."""
    ref = reference(kernel, dtype_name)
    scale = grad_scale(ref["grads"])

    def tol(key: str) -> float:
        if dtype_name == "float64":
            return rtol64
        return max(floor32, factor32 * ref["jax_error"][key])

    err = relative_error(value, ref["value"], scale=abs(ref["value"]))
    problems = [f"value {float(value)!r} vs {ref['value']!r} (relative error {err:.2e} > {tol('value'):.1e})"] \
        if err > tol("value") else []
    for n, want in ref["grads"].items():
        err = relative_error(grads[n], want, scale)
        if err > tol(n):
            problems.append(f"d/d{n}: relative L2 error {err:.2e} > {tol(n):.1e}")
    assert not problems, f"{kernel.name} ({dtype_name}): " + "; ".join(problems)


def regenerate(names: list[str] | None = None) -> None:
    """Recompute the stale (or the named) kernels' references with JAX and rewrite the store."""
    current = {f"{k.name}/{d}/" for k in KERNELS if k.jax is not None for d in DTYPES}
    out = {k: v for k, v in _stored().items() if k[:k.index("/", k.index("/") + 1) + 1] in current}
    for kernel in KERNELS:
        if kernel.jax is None:
            continue
        for dtype_name in DTYPES:
            if (names is None and stored(kernel, dtype_name) is not None) or (names and kernel.name not in names):
                continue
            print(f"{kernel.name} {dtype_name}", flush=True)
            ref, key = compute(kernel, dtype_name), f"{kernel.name}/{dtype_name}/"
            for k in [k for k in out if k.startswith(key)]:
                del out[k]
            out[key + "fingerprint"] = np.array(fingerprint(kernel, dtype_name))
            out[key + "value"] = np.array(ref["value"])
            out.update({key + "grad/" + n: g for n, g in ref["grads"].items()})
            out.update({key + "jax_error/" + n: np.array(e) for n, e in ref["jax_error"].items()})
    np.savez_compressed(STORE, **out)
    _stored.cache_clear()


if __name__ == "__main__":
    regenerate(sys.argv[1:] or None)
