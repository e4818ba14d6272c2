"""CI budget of the differential fuzzer, and proof that its judge and its
crash isolation work.  Long campaigns: ``python -m tests.fuzz --device cpu --n 2000``."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.fuzz.check import FLOOR32, check, compare, jax_reference  # noqa: E402
from tests.fuzz.gen import Arg, Assign, Node, Program, generate, make_inputs  # noqa: E402
from tests.fuzz.runner import judge_budget, run_batch  # noqa: E402

# Fixed seeds per device: a budget that runs in well under 2 minutes on two cores.
BUDGET = {"numpy": range(0, 24), "cpu": range(0, 8), "vulkan": range(0, 8), "vulkan+gpu-form": range(8, 16),
          "cpu+recompute": range(16, 22), "vulkan+tensor-form+bf16": (23, 26, 29, 32)}  # (with products)


def _tiny(tpl: str = "{ns}.sin({0}) * {0}") -> Program:
    """x -> sum(tpl(x)) on a 4-vector."""
    body = Assign("v0", Node(tpl, [Arg("x0", (4,))], (4,)))
    return Program(seed=5, floats={"x0": (4,)}, indices={}, stmts=[body], ret=[("v0", "sum")],
                   locals_={"v0": (4,)})


def test_fixed_seed_budget():
    results = judge_budget(generate, BUDGET, least_compared=0.8)
    assert all(r["outcome"] in ("ok", "refused", "invalid") for r in results.values())


@pytest.mark.parametrize("float32", [False, True])
def test_judge_catches_a_perturbed_gradient(float32):
    """The comparer must fail a gradient that is off, however it came about."""
    prog = generate(3)
    inputs = make_inputs(prog)
    ref64 = jax_reference(prog, inputs, np.float64)
    ref32 = jax_reference(prog, inputs, np.float32) if float32 else None
    honest = ref32 if float32 else ref64
    assert compare(honest, ref64, ref32)[0]
    for q in ref64:
        bad = {k: np.array(v, copy=True) for k, v in honest.items()}
        scale = max(float(np.max(np.abs(ref64[q]))) if ref64[q].size else 0.0, 1.0)
        bad[q].flat[0] += 100 * FLOOR32 * scale
        ok, worst = compare(bad, ref64, ref32)
        assert not ok and worst["quantity"] == q, (q, worst)


def test_judge_catches_a_zero_gradient_and_nan():
    prog = _tiny()
    ref = jax_reference(prog, make_inputs(prog), np.float64)
    assert not compare({**ref, "grad:x0": np.zeros(4)}, ref, None)[0]
    assert not compare({**ref, "value": np.array(np.nan)}, ref, None)[0]


def test_clean_refusal_is_not_a_bug():
    """An op the tracer does not implement (JAX does) is refused with symdiff's own error type."""
    r = check(_tiny("{ns}.convolve({0}, {0})"), "numpy")
    assert r.outcome == "refused" and "UnsupportedOperationError" in r.detail, r


def _aborts_in(ns: str) -> Program:
    """A program whose numpy (``np``) or JAX (``jnp``) twin kills the process."""
    return _tiny("({0} + (__import__('os').abort() if '{ns}' == '%s' else 0))" % ns)


def test_a_crash_is_charged_to_its_program():
    """A worker that dies takes only the program that killed it with it."""
    jobs = [(0, _tiny(), "numpy"), (1, _aborts_in("np"), "numpy"), (2, _tiny("{ns}.cos({0})"), "numpy")]
    results = run_batch(jobs, timeout_per_job=120)
    assert [results[k]["outcome"] for k in range(3)] == ["ok", "crash", "ok"], results


def test_a_death_inside_the_oracle_is_not_charged_to_symdiff():
    """XLA aborting while compiling the JAX twin says nothing about symdiff."""
    results = run_batch([(0, _aborts_in("jnp"), "numpy"), (1, _tiny(), "numpy")], timeout_per_job=120)
    assert results[0]["outcome"] == "invalid" and "oracle" in results[0]["detail"], results[0]
    assert results[1]["outcome"] == "ok", results[1]
