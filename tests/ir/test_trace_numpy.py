"""numpy stays untouched outside tracing and in other threads; creation works
however numpy was imported; traces are cached; tasklets carry the user's line."""
from __future__ import annotations

import threading

import numpy as np
import numpy as numpy_alias
from numpy import ones, zeros

from symdiff import ir
from symdiff.ir.specs import f32

ORIGINALS = {name: getattr(np, name) for name in ("zeros", "ones", "full", "empty", "arange", "linspace", "eye",
                                                   "array", "asarray", "zeros_like", "ones_like", "full_like",
                                                   "empty_like", "identity")}


def from_import(x):
    z = zeros(3, dtype=np.float32)
    z[1] = x[0]
    return z + ones(3, dtype=np.float32)


def passed_module(x, xp=numpy_alias):
    z = xp.zeros((3,), dtype=xp.float32)
    z[2] = x[1]
    return z


def test_creation_however_numpy_was_imported():
    x = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    np.testing.assert_allclose(ir.run(ir.trace(from_import, f32[3]), {"x": x})["out"], [1, 2, 1])
    np.testing.assert_allclose(ir.run(ir.trace(passed_module, f32[3]), {"x": x})["out"], [0, 0, 2])


def test_numpy_untouched_after_tracing():
    ir.trace(from_import, f32[3])
    for name, original in ORIGINALS.items():
        assert getattr(np, name) is original, name
    assert globals()["zeros"] is ORIGINALS["zeros"] and globals()["ones"] is ORIGINALS["ones"]
    assert type(np.zeros(2)) is np.ndarray


def test_numpy_untouched_after_a_failed_trace():
    def bad(x):
        np.zeros(2)
        raise RuntimeError("boom")
    try:
        ir.trace(bad, f32[3])
    except RuntimeError:
        pass
    assert np.zeros is ORIGINALS["zeros"] and type(np.zeros(2)) is np.ndarray


def test_other_threads_see_plain_numpy_while_tracing():
    inside, release = threading.Event(), threading.Event()
    seen = {}

    def slow(x):
        inside.set()
        release.wait(10)
        return np.zeros(3, dtype=np.float32) + x

    def other():
        inside.wait(10)
        seen["zeros"] = type(np.zeros(2))
        seen["global"] = type(zeros(2))
        seen["arange"] = np.arange(3).tolist()
        release.set()

    t = threading.Thread(target=other)
    t.start()
    graph = ir.trace(slow, f32[3])
    t.join()
    assert seen == {"zeros": np.ndarray, "global": np.ndarray, "arange": [0, 1, 2]}
    assert graph.tasklets()


def test_concurrent_traces_in_two_threads():
    errors, graphs = [], []
    barrier = threading.Barrier(2)

    def fn_a(x):
        barrier.wait(10)
        return from_import(x) * 2.0

    def fn_b(x):
        barrier.wait(10)
        return from_import(x) + 1.0

    def run(fn):
        try:
            graphs.append(ir.trace(fn, f32[3]))
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(f,)) for f in (fn_a, fn_b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(graphs) == 2
    assert np.zeros is ORIGINALS["zeros"] and globals()["zeros"] is ORIGINALS["zeros"]


def test_trace_is_cached_per_specs():
    def f(x):
        return x * 2.0
    g1 = ir.trace(f, f32[3])
    assert ir.trace(f, f32[3]) is g1
    assert ir.trace(f, x=f32[3]) is g1
    assert ir.trace(f, f32[4]) is not g1


def test_meta_and_result_names():
    def pair(a, b):
        return a + b, a

    def single(a, b):
        return a

    g = ir.trace(pair, f32[2], f32[2])
    assert g.meta == {"arg_names": ["a", "b"], "result_names": ["out0", "out1"]}
    assert g.arguments == ["a", "b"] and sorted(g.results) == ["out0", "out1"]
    g = ir.trace(single, f32[2], f32[2])
    assert g.meta["result_names"] == ["out"] and g.tasklets()   # returning an argument copies it
    a = np.array([1.0, 2.0], dtype=np.float32)
    np.testing.assert_array_equal(ir.run(g, {"a": a, "b": a})["out"], a)


def test_tasklets_carry_the_users_line():
    def f(x):
        y = np.exp(x)
        return y.sum()
    g = ir.trace(f, f32[3])
    line = f.__code__.co_firstlineno
    assert sorted(t.source for t in g.tasklets()) == [f"test_trace_numpy.py:{line + 1}",
                                                      f"test_trace_numpy.py:{line + 2}"]


def test_callers_arrays_never_modified():
    def f(u):
        u[1:] = u[:-1] * 2.0
        u += 1.0
        return u.sum()
    g = ir.trace(f, f32[4]).validate()
    u = np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32)
    keep = u.copy()
    out = ir.run(g, {"u": u})["out"]
    np.testing.assert_array_equal(u, keep)
    ref = keep.copy()
    f(ref)
    np.testing.assert_allclose(out, ref.sum())


def test_log1p_expm1_are_sympy_cfunctions_that_differentiate():
    import sympy
    from sympy.codegen.cfunctions import expm1, log1p
    g = ir.trace(lambda x: np.log1p(x) + np.expm1(x), f32[3])
    bodies = [e for t in g.tasklets() for e in t.body.values()]
    assert any(b.has(log1p) for b in bodies) and any(b.has(expm1) for b in bodies)
    x = sympy.Symbol("x", real=True)
    assert sympy.diff(log1p(x), x) == 1 / (x + 1) and sympy.diff(expm1(x), x) == sympy.exp(x)
