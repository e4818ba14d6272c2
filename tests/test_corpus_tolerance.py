"""A test of the tests: the corpus comparison (tests/corpus.py, bounds from
tests/float_bounds.py) must reject a gradient that is wrong by 5% in one boundary element
(the first or last element of each gradient, where stencils and slices go wrong), and one
with any element's sign flipped.  The mutants start from JAX's float64 answer rounded to
float32, so nothing but the mutation is wrong.

The relative-L2 tolerance of 2e-3 the corpus used before let some of these through; the
test shows that it did, so the check cannot pass by being weaker than it claims.

JAX's references are cached per process (corpus.jax_value_and_grad): in a whole-suite run
the corpus tests before this file have computed them all.
"""
from __future__ import annotations

from typing import Iterator

import numpy as np

from corpus import CASES, Case, corpus_problems, jax_value_and_grad

OLD_TOL = 2e-3


def _old_2e3_accepts(case: Case, value: float, grads: dict, ref_v: float, ref_g: dict) -> bool:
    """The comparison the corpus used before: value and relative L2 error of each gradient within 2e-3."""
    if abs(value - ref_v) > OLD_TOL * max(1.0, abs(ref_v)):
        return False
    return all(np.linalg.norm(grads[n] - ref_g[n]) <= OLD_TOL * max(np.linalg.norm(ref_g[n]), 1e-12)
               for n in case.wrt)


def _mutants(ref_g: dict, elements: str) -> Iterator[tuple[str, str, int, np.ndarray]]:
    """(kind, argument, flat element, mutated gradient): 5% more at each end of each
    gradient (``"boundary"``), or each element negated (``"sign"``); elements whose
    gradient is exactly zero have no error to put in."""
    for n, g in ref_g.items():
        flat = g.ravel()
        picks = sorted({0, flat.size - 1}) if elements == "boundary" else range(flat.size)
        for e in picks:
            if flat[e] == 0:
                continue
            m = flat.copy()
            m[e] = m[e] * 1.05 if elements == "boundary" else -m[e]
            yield elements, n, e, m.reshape(g.shape)


def _judge(elements: str) -> tuple[int, list, list]:
    """(mutants, those the new comparison accepts, those the old 2e-3 tolerance accepts)."""
    count, new_missed, old_missed = 0, [], []
    for case in CASES:
        inputs = case.inputs()
        ref_v, ref_g = jax_value_and_grad(case, inputs)
        for kind, n, e, m in _mutants(ref_g, elements):
            count += 1
            grads = {k: (m if k == n else g).astype(np.float32) for k, g in ref_g.items()}
            if not corpus_problems(case, np.float32(ref_v), grads, inputs):
                new_missed.append((case.name, n, e))
            if _old_2e3_accepts(case, ref_v, {**ref_g, n: m}, ref_v, ref_g):
                old_missed.append((case.name, n, e))
    return count, new_missed, old_missed


def test_unmutated_reference_in_float32_passes():
    """JAX float64 rounded to float32 is within the bounds: they are not so tight that
    rounding alone fails them (else every mutant would fail for the wrong reason)."""
    for case in CASES:
        inputs = case.inputs()
        ref_v, ref_g = jax_value_and_grad(case, inputs)
        grads = {n: g.astype(np.float32) for n, g in ref_g.items()}
        assert not corpus_problems(case, np.float32(ref_v), grads, inputs), case.name


def test_a_5_percent_error_in_any_boundary_gradient_element_fails():
    count, new_missed, old_missed = _judge("boundary")
    assert count >= 100, f"only {count} boundary mutants: the corpus shrank"
    assert not new_missed, f"{len(new_missed)} of {count} boundary mutants pass: {new_missed}"
    assert old_missed, "the old 2e-3 tolerance caught every mutant: this check shows nothing"


def test_a_sign_flip_in_any_gradient_element_fails():
    count, new_missed, old_missed = _judge("sign")
    assert not new_missed, f"{len(new_missed)} of {count} sign flips pass: {new_missed}"
    assert old_missed, "the old 2e-3 tolerance caught every sign flip: this check shows nothing"
