"""Forward corpus: traced graphs run on the interpreter agree with numpy.

Array-level programs are checked against the same function run on plain
numpy arrays; sd.map programs against independently written numpy references.
"""
from __future__ import annotations

import numpy as np
import pytest

from symdiff import ir
from symdiff.ir.specs import f32, f64, i32, spec_of, symbol

RTOL, ATOL = 2e-4, 2e-5


def _inputs(shapes, seed: int = 0, positive: bool = False) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for s in shapes:
        if isinstance(s, tuple) and s and s[0] == "i32":
            out.append(rng.integers(-3, 4, s[1]).astype(np.int32))
        elif positive:
            out.append(rng.uniform(0.5, 2.0, s).astype(np.float32))
        else:
            out.append(rng.standard_normal(s).astype(np.float32))
    return out


def check_against_numpy(fn, arrays) -> ir.DataflowGraph:
    """Trace ``fn`` for ``arrays``' specs, run it, compare with ``fn`` on numpy."""
    graph = ir.trace(fn, *[spec_of(a) for a in arrays]).validate()
    got = ir.run(graph, dict(zip(graph.meta["arg_names"], arrays)))
    expected = fn(*[a.copy() for a in arrays])
    expected = expected if isinstance(expected, tuple) else (expected,)
    assert len(expected) == len(graph.meta["result_names"])
    for name, want in zip(graph.meta["result_names"], expected):
        np.testing.assert_allclose(got[name], np.asarray(want, dtype=got[name].dtype), rtol=RTOL, atol=ATOL,
                                   err_msg=f"{fn.__name__}: result {name}")
        assert got[name].shape == np.shape(want), (name, got[name].shape, np.shape(want))
    return graph


def _jacobi_1d(u):
    u = u.copy()
    for _ in range(3):
        u[1:-1] = u[1:-1] + 0.1 * (u[:-2] - 2 * u[1:-1] + u[2:])
    return u


def _jacobi_2d(a):
    a = a.copy()
    for _ in range(3):
        a[1:-1, 1:-1] = 0.2 * (a[1:-1, 1:-1] + a[:-2, 1:-1] + a[2:, 1:-1] + a[1:-1, :-2] + a[1:-1, 2:])
    return a


def _heat_steps(u):
    v = u * 1.0
    for _ in range(2):
        v[1:-1] += 0.25 * (v[2:] - v[1:-1])
        v[0] = v[1]
    return v, u


def _inplace_ops(a, b):
    c = a * 1.0
    c += b
    c *= a
    c -= 1.0
    c /= 2.0
    return c


def _scalar_accumulate(a):
    s = np.zeros(2, dtype=np.float32)
    for k in range(3):
        s[0] += a[k]
        s[1] -= a[k] * a[k]
    return s


def _views_see_updates(a):
    b = a.copy()
    v = b[1:]
    b[2] = 5.0
    before = v * 1.0
    v[0] = -1.0
    return before, b


def _strided_write(a):
    b = np.zeros_like(a)
    b[::2] = a[::2] * 2
    b[1::2] = -a[1::2]
    return b


def _creation(a):
    z = np.zeros((4, 5), dtype=np.float32)
    z[1] = a[1]
    o = np.ones_like(a) + np.eye(4, 5) + np.full((4, 1), 2.0) + np.eye(4, 5, k=1)
    r = np.arange(5) * 1.0 + np.linspace(0.0, 1.0, 5) + np.arange(1, 11, 2)
    t = np.array([1.0, 2.0, 3.0, 4.0])
    e = np.empty((2,), dtype=np.float32)
    e[:] = a[0, :2]
    return z + o + r, t * a[:, 0], np.array([[a[0, 0], 1.0], [2.0, a[1, 1]]]), e, np.full_like(a, 3.0) - a


def _zeros_then_write(a):
    out = np.zeros((3, 5), dtype=np.float32)
    out[0] = a[0]
    out[2, 1:4] = a[1, :3] * a[2, 1:4]
    return out


def _concat_stack(a, b):
    return (np.concatenate([a, b * 2.0]), np.stack([a, b], axis=1), np.stack([a, b]),
            np.concatenate([a[None], b[None]], axis=0))


def _returns(a, b):
    return a, 2.5, b[0], np.float32(1.5)


def _shape_props(a):
    n, m = a.shape
    assert a.ndim == 2 and a.size == n * m and len(a) == n and a.dtype == np.float32
    return a.reshape(m, n) * float(n) + sum(a[k] for k in range(len(a))).sum()


def _loop_rows(a):
    return sum(row * k for k, row in enumerate(a))


def _bool_logic(a, b):
    m = (a > 0) & ~(b < 0.5) | np.logical_xor(a > 1, b > 1)
    return np.where(m, a, b), np.logical_not(m), (a >= b) * 1.0, (a == a) & (a != b), m.astype(np.float32)


def _int_mix(a, k):
    return a * k, k + 1, k * 0.5, np.maximum(k, 0), (k > 0).sum(), k.astype(np.float32) / 3


def _float64_promotion(a, d):
    return a + d, a * 2.0, (a + d).dtype == np.float64


CASES = {
    # elementwise arithmetic and scalars
    "add_sub": (lambda a, b: a + b - 1.5 - (2 - a), [(4, 5), (4, 5)], False),
    "mul_div": (lambda a, b: a * b / (1.0 + b * b) + 3 / (2.0 + a * a), [(6,), (6,)], False),
    "neg_pos_abs": (lambda a: -a + (+a) * abs(a) - np.abs(a) + np.absolute(-a), [(7,)], False),
    "pow_int": (lambda a: a ** 2 + a ** 3 - a ** 2.0, [(8,)], False),
    "pow_float": (lambda a: a ** 0.5 + a ** -1.5, [(8,)], True),
    "pow_array": (lambda a, b: a ** b + 2.0 ** b, [(8,), (8,)], True),
    "square_reciprocal": (lambda a: np.square(a) + np.reciprocal(a), [(8,)], True),
    "exp_log": (lambda a: np.exp(a) + np.log(a) + np.log1p(a) + np.expm1(a) + np.sqrt(a), [(9,)], True),
    "trig": (lambda a: np.sin(a) + np.cos(a) + np.tan(a * 0.3), [(9,)], False),
    "hyperbolic": (lambda a: np.tanh(a) + np.sinh(a) + np.cosh(a), [(9,)], False),
    "inverse_trig": (lambda a: np.arcsin(a * 0.2) + np.arccos(a * 0.2) + np.arctan(a), [(9,)], True),
    "arctan2": (lambda a, b: np.arctan2(a, b), [(3, 4), (3, 4)], False),
    "sign": (lambda a: np.sign(a) * a, [(9,)], False),
    "max_min": (lambda a, b: np.maximum(a, b) * 2.0 - np.minimum(a, 0.3 * b) + np.maximum(a, 0), [(9,), (9,)], False),
    "clip": (lambda a: np.clip(a, -0.5, 0.7) + a.clip(0.0) + np.clip(a, None, 0.1), [(11,)], False),
    "where": (lambda a, b: np.where(a > 0, a * a, 0.1 * b) + np.where(b < a, 1.0, 0.0), [(12,), (12,)], False),
    "compare_to_float": (lambda a, b: (a > b) * a + (a <= 0.1) * b - (a < b) + (a >= b), [(5, 3), (5, 3)], False),
    "python_scalars_mixed": (lambda a: 3 * a + 2.5 - a / 4 + 1 - np.float32(2.0) * a, [(3, 3)], False),
    "bool_logic": (_bool_logic, [(10,), (10,)], False),
    "int_mix": (_int_mix, [(6,), ("i32", (6,))], False),
    "astype_copy": (lambda a: (a.astype(np.float64) * 2, a.copy(), np.copy(a), a.astype(np.int32)), [(5,)], False),
    # broadcasting
    "broadcast_row": (lambda a, b: a * b, [(4, 5), (5,)], False),
    "broadcast_col": (lambda a, b: a - b, [(4, 5), (4, 1)], False),
    "broadcast_outer": (lambda a, b: a[:, None] * b[None, :], [(4,), (6,)], False),
    "broadcast_3d": (lambda a, b, c: a + b * c, [(2, 3, 4), (3, 1), (2, 1, 4)], False),
    "broadcast_scalar_array": (lambda a, s: a * s + s, [(3, 4), ()], False),
    "broadcast_to": (lambda a: np.broadcast_to(a, (3, 4, 5)) * 1.0 + np.broadcast_to(a[:, :1], (4, 5)),
                     [(4, 5)], False),
    # a view of a broadcast axis (its index map held a plain 0: fuzzer seed 100410)
    "slice_of_broadcast": (lambda a: np.squeeze(np.broadcast_to(np.tanh(a), (2, 3))[0::-1, 2::2], axis=0) * 1.0,
                           [(2, 1)], False),
    # reductions
    "sum_all": (lambda a: np.sum(a) + a.sum(), [(4, 5)], False),
    "sum_axis0": (lambda a: np.sum(a, axis=0), [(4, 5)], False),
    "sum_axis1": (lambda a: a.sum(axis=1), [(4, 5)], False),
    "sum_axis_neg_keepdims": (lambda a: a / (1.0 + np.sum(a * a, axis=-1, keepdims=True)), [(3, 4, 5)], False),
    "sum_axes_tuple": (lambda a: (np.sum(a, axis=(0, 2)), a.sum(axis=(0, -1), keepdims=True)), [(3, 4, 5)], False),
    "mean": (lambda a: (np.mean(a), a.mean(axis=0), np.mean(a, axis=(1, 2), keepdims=True)), [(3, 4, 2)], False),
    "max_min_reductions": (lambda a: (np.max(a, axis=1), a.min(axis=0), a.max(), np.min(a, keepdims=True),
                                      np.amax(a, axis=-1)), [(5, 6)], False),
    "prod": (lambda a: (np.prod(a, axis=1), a.prod()), [(4, 3)], True),
    "softmax": (lambda a: np.exp(a - a.max(axis=1, keepdims=True))
                / np.exp(a - a.max(axis=1, keepdims=True)).sum(axis=1, keepdims=True), [(4, 6)], False),
    "layer_norm": (lambda x, g, b: (x - x.mean(-1, keepdims=True))
                   / np.sqrt(((x - x.mean(-1, keepdims=True)) ** 2).mean(-1, keepdims=True) + 1e-5) * g + b,
                   [(4, 8), (8,), (8,)], False),
    # matmul
    "matmul_matrix": (lambda a, b: a @ b, [(3, 4), (4, 5)], False),
    "matmul_vector_left": (lambda x, a: x @ a, [(4,), (4, 5)], False),
    "matmul_vector_right": (lambda a, x: np.matmul(a, x), [(3, 4), (4,)], False),
    "matmul_vector_vector": (lambda x, y: x @ y, [(4,), (4,)], False),
    "matmul_batched": (lambda a, b: np.matmul(a, b), [(2, 3, 4), (2, 4, 3)], False),
    "matmul_batched_broadcast": (lambda a, b: a @ b, [(2, 1, 3, 4), (5, 4, 2)], False),
    "matmul_chain": (lambda a, b, c: np.tanh(a @ b @ c), [(3, 4), (4, 5), (5, 2)], False),
    "dot_forms": (lambda a, x: (np.dot(a.T, a), np.dot(x, x), a.dot(x), np.dot(2.0, x)), [(5, 4), (4,)], False),
    "mlp": (lambda x, w1, b1, w2: np.sum(np.tanh(np.maximum(x @ w1 + b1, 0.0) @ w2) ** 2),
            [(8, 6), (6, 5), (5,), (5, 3)], False),
    "atax": (lambda a, x: a.T @ (a @ x), [(6, 4), (4,)], False),
    # views
    "transpose": (lambda a: (a.T, np.transpose(a, (1, 2, 0)), a.transpose(2, 0, 1), np.swapaxes(a, 0, 2),
                             np.moveaxis(a, 0, -1)), [(2, 3, 4)], False),
    "reshape_split_merge": (lambda a: (a.reshape(2, 2, 6), np.reshape(a, (24,)), a.reshape(3, 8),
                                       a.reshape(-1, 4), a.ravel(), a.T.reshape(6, 4)), [(4, 6)], False),
    "reshape_ones": (lambda a: (a.reshape(1, 4, 1, 6), a.reshape(4, 1, 6)[:, 0]), [(4, 6)], False),
    "expand_squeeze": (lambda a: (np.expand_dims(a, 0), np.expand_dims(a, -1), np.expand_dims(a, (0, 2)),
                                  np.squeeze(a[:, None, :1]), a[None, :, None]), [(3, 4)], False),
    "slices_steps": (lambda a: (a[::2] * a[1::2], a[::-1][:3], a[-3:], a[1:-1:3], a[8:2:-2], a[-1]),
                     [(10,)], False),
    "slices_2d": (lambda a: (a[1:, ::2], a[..., 1], a[1], a[-1, -2], a[:, None, 2:4], a[::-1, ::-1]),
                  [(4, 5)], False),
    "ellipsis": (lambda a: (a[..., 0], a[0, ...], a[:, ..., 1:]), [(2, 3, 4)], False),
    "iterate_rows": (_loop_rows, [(3, 4)], False),
    "shape_props": (_shape_props, [(3, 4)], False),
    "concat_stack": (_concat_stack, [(5,), (5,)], False),
    "concat_2d": (lambda a, b: (np.concatenate([a, b], axis=1), np.concatenate((a, a), axis=0)),
                  [(3, 2), (3, 4)], False),
    # in-place updates (SSA versions)
    "jacobi_1d": (_jacobi_1d, [(12,)], False),
    "jacobi_2d": (_jacobi_2d, [(7, 6)], False),
    "heat_steps": (_heat_steps, [(9,)], False),
    "inplace_ops": (_inplace_ops, [(6,), (6,)], False),
    "scalar_accumulate": (_scalar_accumulate, [(5,)], False),
    "views_see_updates": (_views_see_updates, [(6,)], False),
    "strided_write": (_strided_write, [(9,)], False),
    "zeros_then_write": (_zeros_then_write, [(3, 5)], False),
    "creation": (_creation, [(4, 5)], False),
    "returns": (_returns, [(3,), (2,)], False),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_forward_matches_numpy(name):
    fn, shapes, positive = CASES[name]
    fn.__name__ = name
    check_against_numpy(fn, _inputs(shapes, positive=positive))


def test_float64_anywhere_promotes():
    a, d = _inputs([(3,)])[0], np.arange(3, dtype=np.float64)
    graph = ir.trace(_float64_promotion, f32[3], f64[3])
    assert graph.containers[graph.meta["result_names"][0]].dtype == "float64"
    got = ir.run(graph, {"a": a, "d": d})
    np.testing.assert_allclose(got["out0"], a + d, rtol=1e-6)


def test_float32_programs_stay_float32():
    graph = ir.trace(lambda a: np.exp(a * 2.0 + 1) / 3 + np.zeros(3) + np.array([1.0, 2.0, 3.0]), f32[3])
    assert {c.dtype for c in graph.containers.values()} == {"float32"}


def test_int_and_bool_dtypes():
    graph = ir.trace(lambda k, a: (k + 1, k * a, k > 0, k / 2), i32[4], f32[4])
    dtypes = [graph.containers[r].dtype for r in graph.meta["result_names"]]
    assert dtypes == ["int32", "float32", "bool", "float32"]


# -- sd.map programs against independent numpy references -----------------------------------
def _map_stencil(a):
    n = a.shape[0]
    out = np.zeros_like(a)
    for i in ir.map[1:n - 1]:
        out[i] = (a[i - 1] + 2.0 * a[i] + a[i + 1]) / 4.0
    s = np.zeros(1, dtype=np.float32)
    for i in ir.map[0:n]:
        s[0] += out[i] * out[i]
    return out, s[0]


def _map_stencil_ref(a):
    out = np.zeros_like(a)
    out[1:-1] = (a[:-2] + 2 * a[1:-1] + a[2:]) / 4
    return out, np.sum(out * out)


def _map_2d(a, w):
    n, m = a.shape
    out = np.zeros((n - 2, m), dtype=np.float32)
    for i, j in ir.map[1:n - 1, 0:m]:
        out[i - 1, j] = w[j] * (a[i + 1, j] - a[i - 1, j])
    return out


def _map_2d_ref(a, w):
    return w[None, :] * (a[2:] - a[:-2])


def _map_rowsum(a):
    n, m = a.shape
    r = np.zeros(n, dtype=np.float32)
    for i, j in ir.map[0:n, 0:m]:
        r[i] += np.exp(a[i, j] * 0.5)
    return r


def _map_rowsum_ref(a):
    return np.exp(a * 0.5).sum(axis=1)


def _map_into_existing(a):
    out = a * 2.0
    for i in ir.map[1:4]:
        out[i] = a[i] - 1.0
    acc = a * 1.0
    for i in ir.map[0:6]:
        acc[i % 3] += a[i]
    return out, acc


def _map_into_existing_ref(a):
    out = a * 2
    out[1:4] = a[1:4] - 1
    acc = a.copy()
    for i in range(6):
        acc[i % 3] += a[i]
    return out, acc


def _map_sequential_statements(a):
    n = a.shape[0]
    b = np.zeros_like(a)
    c = np.zeros_like(a)
    for i in ir.map[1:n]:
        b[i] = a[i] * 3.0
        c[i] = b[i - 1] + b[i]       # reads the values every iteration of the previous statement wrote
    return b, c


def _map_sequential_statements_ref(a):
    b = np.zeros_like(a)
    b[1:] = a[1:] * 3
    c = np.zeros_like(a)
    c[1:] = b[:-1] + b[1:]
    return b, c


def _map_matvec(a, x):
    n, m = a.shape
    y = np.zeros(n, dtype=np.float32)
    for i, j in ir.map[0:n, 0:m]:
        y[i] += a[i, j] * x[j]
    return y


def _map_matvec_ref(a, x):
    return a @ x


def _map_index_values_and_where(a):
    n = a.shape[0]
    out = np.zeros_like(a)
    for i in ir.map[0:n]:
        out[i] = np.where(a[i] > 0, a[i] * i, np.maximum(a[i], -0.5)) + np.sin(a[i])
    return out


def _map_index_values_and_where_ref(a):
    i = np.arange(a.shape[0])
    return np.where(a > 0, a * i, np.maximum(a, -0.5)) + np.sin(a)


def _map_transposed_view(a):
    n, m = a.shape
    t = a.T
    out = np.zeros((m, n), dtype=np.float32)
    for i, j in ir.map[0:m, 0:n]:
        out[i, j] = t[i, j] + a[j, i]
    return out


def _map_transposed_view_ref(a):
    return 2 * a.T


def _map_nested_loops(a):
    n, m = a.shape
    out = np.zeros((n, m), dtype=np.float32)
    for i in ir.map[0:n]:
        for j in ir.map[1:m]:
            out[i, j] = a[i, j] - a[i, j - 1]
    return out


def _map_nested_loops_ref(a):
    out = np.zeros_like(a)
    out[:, 1:] = a[:, 1:] - a[:, :-1]
    return out


def _map_gather(a, idx):
    out = np.zeros(4, dtype=np.float32)
    for i in ir.map[0:4]:
        out[i] = a[idx[i]] * 2.0
    return out


def _map_gather_ref(a, idx):
    return a[idx] * 2


MAP_CASES = {
    "map_stencil": (_map_stencil, _map_stencil_ref, [(30,)]),
    "map_2d": (_map_2d, _map_2d_ref, [(6, 5), (5,)]),
    "map_rowsum": (_map_rowsum, _map_rowsum_ref, [(5, 7)]),
    "map_into_existing": (_map_into_existing, _map_into_existing_ref, [(6,)]),
    "map_sequential_statements": (_map_sequential_statements, _map_sequential_statements_ref, [(7,)]),
    "map_matvec": (_map_matvec, _map_matvec_ref, [(5, 4), (4,)]),
    "map_index_values_and_where": (_map_index_values_and_where, _map_index_values_and_where_ref, [(9,)]),
    "map_transposed_view": (_map_transposed_view, _map_transposed_view_ref, [(3, 4)]),
    "map_nested_loops": (_map_nested_loops, _map_nested_loops_ref, [(4, 5)]),
}


@pytest.mark.parametrize("name", sorted(MAP_CASES))
def test_map_matches_reference(name):
    fn, ref, shapes = MAP_CASES[name]
    arrays = _inputs(shapes, seed=3)
    graph = ir.trace(fn, *[spec_of(a) for a in arrays]).validate()
    got = ir.run(graph, dict(zip(graph.meta["arg_names"], arrays)))
    expected = ref(*arrays)
    expected = expected if isinstance(expected, tuple) else (expected,)
    for name_, want in zip(graph.meta["result_names"], expected):
        np.testing.assert_allclose(got[name_], want, rtol=RTOL, atol=ATOL, err_msg=f"{name}: {name_}")


def test_map_gather():
    a = _inputs([(6,)])[0]
    idx = np.array([5, 0, 2, 2], dtype=np.int32)
    graph = ir.trace(_map_gather, f32[6], i32[4]).validate()
    np.testing.assert_allclose(ir.run(graph, {"a": a, "idx": idx})["out"], _map_gather_ref(a, idx), rtol=1e-6)


def test_map_accumulation_is_sum_and_skips_copy_of_zeros():
    graph = ir.trace(_map_rowsum, f32[5, 7])
    accs = [m.accumulate for t in graph.tasklets() for _, m in graph.writes(t.name)]
    assert accs == ["sum"]
    graph = ir.trace(_map_into_existing, f32[6]).validate()
    acc_writers = graph.writers(graph.latest("out1"))
    assert {m.accumulate for _, m in acc_writers} == {"sum"} and len(acc_writers) == 2  # copy of old + accumulation


def test_symbolic_sizes():
    N = symbol("N")

    def f(x):
        n = x.shape[0]
        assert n == N
        out = np.zeros_like(x)
        for i in ir.map[1:n - 1]:
            out[i] = (x[i - 1] + 2 * x[i] + x[i + 1]) / 4
        y = x.copy()
        y[1:-1] = y[:-2] * y[2:]
        return out, x[1:-1] * x[:-2], x[::-1], y, x.mean(), x.reshape(1, N)[0, -1]

    graph = ir.trace(f, f32[N]).validate()
    for n in (5, 11):
        u = _inputs([(n,)])[0]
        got = [ir.run(graph, {"x": u})[r] for r in graph.meta["result_names"]]
        y = u.copy()
        y[1:-1] = u[:-2] * u[2:]
        want = [np.concatenate([[0], (u[:-2] + 2 * u[1:-1] + u[2:]) / 4, [0]]), u[1:-1] * u[:-2], u[::-1], y,
                u.mean(), u[-1]]
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)


def test_symbolic_2d_shape_reported_as_exprs():
    N, M = symbol("N"), symbol("M")
    seen = {}

    def f(a):
        seen["shape"] = a.shape
        return a.T @ a

    graph = ir.trace(f, f32[N, M]).validate()
    assert seen["shape"] == (N, M)
    a = _inputs([(4, 3)])[0]
    np.testing.assert_allclose(ir.run(graph, {"a": a})["out"], a.T @ a, rtol=RTOL, atol=ATOL)
