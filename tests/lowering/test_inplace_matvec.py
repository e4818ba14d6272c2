"""In-place updates of vectors and matrices feeding later matrix-vector and
matrix products (the PolyBench gemver/gesummv/mvt/atax/bicg family, several
time steps), differentiated w.r.t. every input on every Slang device and
compared with JAX in float64.

Regression (issue 10, bug 1): in gemver's reverse pass a kernel that had been
merged into a later row kernel wrote a gradient that another kernel read; row
fusion let the reader hop back into an earlier row kernel because it only
checked the kernels that *started* row kernels after that point, so the
reader ran before the value existed and d/dbeta, d/dy came back exactly 0.
``plan.check_order`` now refuses any plan in which a tasklet runs before a
writer of what it reads."""
import numpy as np
import pytest

import symdiff as sd
from corpus import Case, assert_matches_jax, build_program
from symdiff.lowering.plan import check_order, plan
from symdiff.lowering.plan_types import LoweringError


def _outer_add(xp, a, u, v):
    """``a + u v^T``, in place where the namespace allows it (numpy while tracing)."""
    if xp is np:
        a += u[:, None] * v[None, :]
        return a
    return a + u[:, None] * v[None, :]


def _gemver_issue(xp, alpha, beta, A, y, x, w):
    x += beta * y @ A
    w += alpha * A @ x
    return xp.sum(A) + xp.sum(x) + xp.sum(w)


def _gemver(xp, alpha, beta, A, u1, v1, u2, v2, w, x, y, z):
    A = _outer_add(xp, _outer_add(xp, A, u1, v1), u2, v2)
    x += beta * (y @ A) + z
    w += alpha * (A @ x)
    return xp.sum(xp.tanh(w)) + xp.sum(x * x)


def _gesummv(xp, alpha, beta, A, B, x):
    tmp = A @ x
    y = alpha * tmp + beta * (B @ x)
    return xp.sum(xp.sin(y)) + xp.sum(tmp * y)


def _mvt(xp, A, x1, x2, y1, y2):
    x1 += A @ y1
    x2 += A.T @ y2
    return xp.sum(x1 * x2) + xp.sum(xp.tanh(x2))


def _bicg_atax(xp, A, p, r):
    s = r @ A
    q = A @ p
    return xp.sum(s * s) + xp.sum(xp.sin(q)) + xp.sum((A.T @ q) ** 2)


def _time_steps(xp, beta, A, x, w):
    for _ in range(3):
        x += beta * (A @ xp.tanh(x))
        w += A.T @ x
    return xp.sum(w * w) + xp.sum(x)


def _rank1_steps(xp, A, u, v, x):
    """A matrix updated in place each step and read by two products per step."""
    for _ in range(2):
        A = _outer_add(xp, A, u, v)
        x = xp.tanh(A @ x)
        u += 0.3 * (A.T @ x)
    return xp.sum(x) + 0.01 * xp.sum(A * A)


def _several_readers(xp, A, B, x, y):
    """One in-place version read by two matvecs and a reduction, each feeding more work."""
    x += 0.5 * (A @ y)
    a = A @ x
    c = xp.sum(x * x)
    y += a * c
    return xp.sum(a * (B.T @ x)) + xp.sum(y) + c


def _vecmat_twice(xp, A, v0, v1, u0):
    """Two vector-matrix products into one vector, a matvec of it, then a reduction
    scaling the result (found by a random program generator with the same bug)."""
    u0 += 0.58 * (v0 @ A)
    u0 += 0.52 * (v1 @ A)
    v0 += 0.62 * (A @ u0)
    v0 *= xp.sum(v0 * v1) * 0.1
    return xp.sum(xp.tanh(v0)) + 0.1 * xp.sum(v1 * v1) + xp.sum(xp.cos(u0))


def _case(name, body, shapes, **kw) -> Case:
    return Case(name, body, shapes, list(shapes), tol=1e-3, **kw)


N, M = 8, 6
CASES = [
    _case("gemver_issue", _gemver_issue, {"alpha": (), "beta": (), "A": (N, N), "y": (N,), "x": (N,), "w": (N,)}),
    _case("gemver", _gemver, {"alpha": (), "beta": (), "A": (N, N), **{n: (N,) for n in
                                                                        ("u1", "v1", "u2", "v2", "w", "x", "y", "z")}}),
    _case("gesummv", _gesummv, {"alpha": (), "beta": (), "A": (M, N), "B": (M, N), "x": (N,)}),
    _case("mvt", _mvt, {"A": (N, N), "x1": (N,), "x2": (N,), "y1": (N,), "y2": (N,)}),
    _case("bicg_atax", _bicg_atax, {"A": (M, N), "p": (N,), "r": (M,)}),
    _case("time_steps", _time_steps, {"beta": (), "A": (N, N), "x": (N,), "w": (N,)}),
    _case("rank1_steps", _rank1_steps, {"A": (N, N), "u": (N,), "v": (N,), "x": (N,)}),
    _case("vecmat_twice", _vecmat_twice, {"A": (5, 7), "v0": (5,), "v1": (5,), "u0": (7,)}),
    _case("several_readers", _several_readers, {"A": (N, N), "B": (N, N), "x": (N,), "y": (N,)}),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_in_place_then_matvec_matches_jax(case, device):
    program = build_program(sd, case)
    inputs = case.inputs()
    value, grads = program.value_and_grad(*[np.copy(v) for v in inputs.values()], wrt=case.wrt, device=device)
    assert_matches_jax(case, value, grads, inputs)


def test_plan_runs_every_writer_before_its_readers():
    """Structural, no device: in the issue's forward + reverse plan each version
    read is written by an earlier kernel, or earlier in the same kernel."""
    program = build_program(sd, CASES[0])
    graph = program.backward_graph(wrt=CASES[0].wrt)
    p = plan(graph, {})
    position = {s.tasklet.name: (k, n) for k, kern in enumerate(p.kernels) for n, s in enumerate(kern.steps)}
    for kern in p.kernels:
        for step in kern.steps:
            for access, _ in p.graph.reads(step.tasklet.name):
                for writer, _ in p.graph.writers(access):
                    assert position[writer] < position[step.tasklet.name], (step.tasklet.name, access, writer)


def test_check_order_refuses_a_reader_placed_before_its_writer():
    program = build_program(sd, CASES[0])
    p = plan(program.backward_graph(wrt=CASES[0].wrt), {})
    check_order(p.graph, p.kernels)  # the planned order is fine
    with pytest.raises(LoweringError, match="out of order"):
        check_order(p.graph, p.kernels[::-1])
