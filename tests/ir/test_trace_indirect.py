"""Tracing index arrays: a[idx] (rows of a 2-D array, other axes), np.take,
np.add.at, gathers inside sd.map; forward values checked on the interpreter
against numpy itself, unsupported forms rejected with a clear message."""
import numpy as np
import pytest

from symdiff import ir
import symdiff as sd
from symdiff.ir.tracer import UnsupportedOperationError

rng = np.random.default_rng(5)
A = rng.standard_normal((6, 4)).astype(np.float32)
IDX = np.array([[5, 0, 5], [2, 2, 1]], np.int32)
V = rng.standard_normal(6).astype(np.float32)


def run(fn, *args):
    specs = [sd.ArraySpec(a.dtype.name)[a.shape] for a in args]
    g = ir.trace(fn, *specs)
    out = ir.run(g, dict(zip(g.arguments, args)))
    return [out[r] for r in g.meta.get("result_names", g.results)]


@pytest.mark.parametrize("fn", [
    lambda a, idx: a[idx],
    lambda a, idx: a[idx].sum(axis=1),
    lambda a, idx: a.T[:, idx],
    lambda a, idx: a[None, idx, 1:3],
    lambda a, idx: np.take(a, idx, axis=0),
    lambda a, idx: np.take(a, idx % 4, axis=1),
    lambda a, idx: np.take(a, idx),
], ids=["rows", "bag_sum", "columns", "with_slices", "take_0", "take_1", "take_flat"])
def test_gathers_match_numpy(fn):
    (got,) = run(fn, A, IDX)
    np.testing.assert_allclose(got, fn(A, IDX), rtol=1e-6)


def test_add_at_sums_repeated_indices():
    def hist(v, idx):
        out = np.zeros(6, dtype=np.float32)
        out += 1.0
        np.add.at(out, idx.reshape(-1), v)
        return out

    (got,) = run(hist, V, IDX)
    np.testing.assert_allclose(got, hist(V, IDX), rtol=1e-6)


def test_gather_and_scatter_inside_map():
    def prog(a, idx):
        out = np.zeros((3, 4), dtype=np.float32)
        acc = np.zeros(6, dtype=np.float32)
        for i, j in sd.map[0:3, 0:4]:
            out[i, j] = a[idx[i], j] * 2.0
        for i, j in sd.map[0:3, 0:4]:
            acc[idx[i]] += a[i, j]
        return out, acc

    idx = IDX[0]
    out, acc = run(prog, A, idx)
    np.testing.assert_allclose(out, A[idx] * 2.0, rtol=1e-6)
    ref = np.zeros(6, np.float32)
    np.add.at(ref, idx, A[:3].sum(axis=1))
    np.testing.assert_allclose(acc, ref, rtol=1e-5)


def test_add_at_inside_a_map_body_is_refused_naming_the_line():
    """Traced once, it added once instead of once per iteration (4x too little,
    silently, on every device)."""
    def prog(a, idx):
        s = np.zeros(6, dtype=np.float32)
        for i in sd.map[0:4]:
            np.add.at(s, idx[0], a[0, 0])
        return s

    with pytest.raises(UnsupportedOperationError, match=r"test_trace_indirect.py:\d+: .*out\[idx\[i\]\] \+= v"):
        ir.trace(prog, sd.f32[6, 4], sd.i32[2, 3])


def test_a_float_index_names_the_fix():
    # a[idx, 0] and a[idx] = v are supported now (tests/ir/test_numpy_conformance_indexing.py)
    with pytest.raises(UnsupportedOperationError, match="int32"):
        ir.trace(lambda a, idx: a[idx.astype(np.float32)], sd.f32[6, 4], sd.i32[2, 3])


def test_check_index_arguments_names_argument_element_and_extent():
    g = ir.trace(lambda a, idx: a[idx], sd.f32[6, 4], sd.i32[2, 3])
    bad = IDX.copy()
    bad[1, 0] = -2
    with pytest.raises(ir.IndexOutOfRange, match=r"'idx' holds -2 at idx\[1, 0\].*axis 0 of 'a' \(extent 6\)"):
        ir.check_index_arguments(g, {"a": A, "idx": bad})
    ir.check_index_arguments(g, {"a": A, "idx": IDX})
