"""16-bit floats in the IR: specs, promotion, and ``computed_in_float32``'s graph."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import symdiff as sd
from symdiff.ir.storage import computed_in_float32


def test_specs_and_call_time_dtypes():
    assert repr(sd.f16[3, 4]) == "sd.f16[3, 4]" and repr(sd.bf16) == "sd.bf16"
    assert sd.ir.specs.spec_of(np.zeros(2, np.float16)).dtype == "float16"
    assert sd.ir.specs.spec_of(np.zeros(2, ml_dtypes.bfloat16)).dtype == "bfloat16"


@pytest.mark.parametrize("a, b, want", [
    ("float16", "float16", "float16"), ("bfloat16", "bfloat16", "bfloat16"),
    ("float16", "bfloat16", "float32"),  # neither holds the other (JAX's rule)
    ("float16", "float32", "float32"), ("bfloat16", "float64", "float64"), ("float16", "int32", "float16"),
])
def test_promotion(a, b, want):
    specs = {"float16": sd.f16, "bfloat16": sd.bf16, "float32": sd.f32, "float64": sd.f64, "int32": sd.i32}

    def f(x, y):
        return x * y
    f.__annotations__ = {"x": specs[a][4], "y": specs[b][4]}
    g = sd.differentiable_program(f).graph
    assert g.containers[g.results[0]].dtype == want


def test_scalars_and_reductions_keep_the_format():
    @sd.differentiable_program
    def f(x: sd.bf16[4]):
        return np.sum(np.exp(x * 0.5) + 1)
    assert f.graph.containers[f.graph.results[0]].dtype == "bfloat16"


def test_float32_between_sixteen_bit_loads_and_stores():
    @sd.differentiable_program
    def f(x: sd.f16[8], y: sd.f32[8]):
        h = x * 3.0           # a float16 transient
        return np.sum(h * h), y * 2
    g = f.graph
    wide = computed_in_float32(g)
    assert wide is not g and computed_in_float32(g) is wide  # made once per graph
    assert all(c.dtype != "float16" for c in wide.containers.values() if c.role == "transient")
    # the argument and the float16 result keep their names and dtypes ...
    assert wide.containers["x"].dtype == "float16" and wide.arguments == g.arguments
    out = g.results[0]
    assert wide.containers[out].dtype == "float16" and wide.results == g.results
    # ... and are touched only by the copies into and out of float32
    (widen, _), = wide.readers(wide.access("x", 0))
    (write, _), = wide.writers(wide.access(out, 0))
    assert widen.startswith("widen_") and write.startswith("round_")
    for name in (widen, write):
        touched = [m.container for _, m in wide.reads(name) + wide.writes(name)]
        assert sorted(wide.containers[c].dtype for c in touched) == ["float16", "float32"]
    # the float32 output is left alone
    assert [t for t, _ in wide.writers(wide.latest(g.results[1]))] == [t for t, _ in g.writers(g.latest(g.results[1]))]


def test_graphs_without_sixteen_bit_arrays_are_unchanged():
    @sd.differentiable_program
    def f(x: sd.f32[8]):
        return np.sum(x * x)
    assert computed_in_float32(f.graph) is f.graph
