"""How far a result may be from JAX's float64 answer: bounds derived from the arithmetic.

A float64 result is judged at ``RTOL64`` (1e-9): float64 rounding of these small
programs is ~1e-16 relative, so anything above 1e-9 is a wrong formula, not rounding.

A float32 result is judged by the error JAX itself makes in float32 on the same
(float32-rounded) inputs, the idea of the kernel suite (tests/kernels/kernel_oracle.py),
applied per element as well as by norm:

- per element, ``|got - want| <= FACTOR32 * max(|jax32 - want|, u |want|, rms(jax32 - want))``:
  JAX's error at that element measures how badly float32 conditions it (cancellation);
  ``u |want|`` is one rounding of the element itself (JAX may be exact by luck where we
  are not); the RMS of JAX's error over the quantity is the typical rounding of its
  elements, since another summation order may put the error on another element;
- by norm, ``||got - want|| <= FACTOR32 * max(||jax32 - want||, u ||want||)``.

Where JAX float32 may be right by luck at an ill-conditioned point (one scalar, so no
RMS over other elements either), ``jax32`` may be several results float32 arithmetic
could give: JAX float32's, and float64 answers on inputs moved by one float32 rounding
(``perturbed_inputs``), each a float32 computation's error by backward-error analysis;
the bounds take the largest error of any.  (The corpus MLP's jvp tangent moves by up to
4.5e-6 under such moves of its inputs, where JAX float32's is 2.1e-7 off.)

``FACTOR32`` is 8 ("a few times"): symdiff's own kernels sum in other orders than XLA,
and the worst measured error is 0.49 of the bound (numpy, cpu, lavapipe; see
tests/test_corpus_tolerance.py, which also shows that a 5% error in any boundary gradient
element and a sign flip in any element fail these bounds).
"""
from __future__ import annotations

import numpy as np

U32 = float(np.finfo(np.float32).eps)
FACTOR32 = 8.0
RTOL64 = 1e-9


def _rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x)))) if x.size else 0.0


def _error(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """|got - want| per element, zero where both are the same NaN or infinity."""
    err = np.abs(got - want)
    same = (np.isnan(got) & np.isnan(want)) | (np.isinf(want) & (got == want))
    return np.where(same, 0.0, np.where(np.isnan(err), np.inf, err))


def _float32_error(want: np.ndarray, jax32) -> np.ndarray:
    """Per element, the largest error of the float32-level result(s) ``jax32``."""
    refs = jax32 if isinstance(jax32, (list, tuple)) else [jax32]
    return np.max([_error(np.asarray(r, np.float64).reshape(want.shape), want) for r in refs], axis=0)


def perturbed_inputs(arrays: dict[str, np.ndarray], seed: int) -> dict[str, np.ndarray]:
    """float64 copies of ``arrays``, each element moved by about one float32 rounding
    (relative 2^-24 times a standard normal): what a float32 computation may be exact for."""
    rng = np.random.default_rng(seed)
    return {n: np.asarray(v, np.float64) * (1.0 + 2.0 ** -24 * rng.standard_normal(np.shape(v)))
            for n, v in arrays.items()}


def element_bound(want: np.ndarray, jax32=None) -> np.ndarray:
    """The largest |error| each element of a result may have (see the module docstring);
    ``jax32`` None means a float64 result."""
    want = np.asarray(want, np.float64)
    if jax32 is None:
        return RTOL64 * np.maximum(np.abs(want), _rms(want))
    jerr = _float32_error(want, jax32)
    return FACTOR32 * np.maximum(np.maximum(jerr, U32 * np.abs(want)), _rms(jerr))


def norm_bound(want: np.ndarray, jax32=None) -> float:
    """The largest L2 norm the error of the whole result may have."""
    want = np.asarray(want, np.float64)
    if jax32 is None:
        return RTOL64 * float(np.linalg.norm(want))
    jerr = _float32_error(want, jax32)
    return FACTOR32 * max(float(np.linalg.norm(jerr)), U32 * float(np.linalg.norm(want)))


def problems(what: str, got, want, jax32=None) -> list[str]:
    """What is out of bounds in ``got`` (empty when it is within them)."""
    want = np.asarray(want, np.float64)
    got = np.asarray(got, np.float64).reshape(want.shape)
    err, bound = _error(got, want), element_bound(want, jax32)
    out = []
    if np.any(err > bound):
        at = np.unravel_index(int(np.argmax(err - bound)), err.shape) if err.ndim else ()
        out.append(f"{what}{list(int(a) for a in at)}: {float(got[at])!r} vs {float(want[at])!r}, "
                   f"|error| {float(err[at]):.3g} > {float(bound[at]):.3g} ({int(np.sum(err > bound))} element(s))")
    total = float(np.linalg.norm(err)) if np.all(np.isfinite(err)) else np.inf
    if total > norm_bound(want, jax32):
        out.append(f"{what}: L2 error {total:.3g} > {norm_bound(want, jax32):.3g}")
    return out


def assert_close(what: str, got, want, jax32=None) -> None:
    """``got`` within the float64 bound of ``want`` (``jax32`` None) or the float32 one."""
    found = problems(what, got, want, jax32)
    assert not found, "; ".join(found)


def is_float64(*results) -> bool:
    """Whether a program's results are float64 (judged at RTOL64) rather than float32."""
    return all(np.asarray(r).dtype == np.float64 for r in results)


def within_half_spacing(got: np.ndarray, want: np.ndarray, dtype) -> None:
    """``got`` (float16 or bfloat16) is ``want`` (float64) rounded once, give or take float32
    arithmetic's error: a 16-bit result is its float32 program's (``ir.storage``).  Rounding
    after each operation, or truncating instead of rounding to nearest, is outside."""
    want = np.asarray(want, np.float64)
    assert got.dtype == np.dtype(dtype) and got.shape == want.shape
    rounded = np.abs(want).astype(dtype).astype(np.float64)
    spacing = np.nextafter(rounded.astype(dtype), np.array(np.inf, dtype)).astype(np.float64) - rounded
    slack = 64 * float(np.finfo(np.float32).eps) * float(np.max(np.abs(want), initial=0.0))
    err = np.abs(got.astype(np.float64) - want)
    assert np.all(err <= 0.5 * spacing + slack), float(np.max(err / (0.5 * spacing + slack)))
