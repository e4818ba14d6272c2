"""In-place versions (``lowering.in_place``): an updated array's new version is
written into the buffer of the version before it, its copy kernel dropped,
wherever no access can tell; where one can (an old value read after the
update, a thread reading what another thread of its kernel writes), the copy
stays.  Both kinds are checked against JAX in float64 on every Slang device,
and the plan is checked for which copies went."""
import numpy as np
import pytest

import symdiff as sd
from corpus import Case, assert_matches_jax, build_program, set_item
from symdiff.lowering import targets
from symdiff.lowering.in_place import _plain_copy
from symdiff.lowering.plan import plan


def _row_sweeps(xp, a):
    """Gauss-Seidel-like row updates, each reading the row just written: every
    old version is dead once its successor is written."""
    x = xp.sin(a)
    for _ in range(2):
        for i in range(1, 5):
            x = set_item(xp, x, (i, slice(1, 5)), (x[i - 1, 1:5] + x[i, 1:5] + x[i + 1, 1:5]) / 3)
    return xp.sum(x * x)


def _point_sweeps(xp, a):
    """One-element updates, each reading the element just written before it."""
    x = xp.sin(a)
    for _ in range(2):
        for i in range(1, 6):
            x = set_item(xp, x, i, (x[i - 1] + x[i] + x[i + 1]) / 3)
    return xp.sum(x * x)


def _forward_substitution(xp, a):
    """trisolv: the reverse pass's gather reads every version of ``x`` at every
    element, but a select() keeps each read only where the forward pass read
    it, before any later update wrote there."""
    x = xp.sin(a[0])
    for i in range(6):
        x = set_item(xp, x, i, (a[1, i] - a[i, :i] @ x[:i]) / (4.0 + a[i, i] ** 2) + 0.5 * x[i])
    return xp.sum(x * x)


def _late_old_read(xp, a):
    """The reverse pass of ``x ** 3`` reads the old ``x[2]`` after the update wrote it."""
    x = xp.sin(a)
    s = xp.sum(x ** 3)
    x = set_item(xp, x, 2, x[3] * x[1])
    return s + xp.sum(xp.cos(x))


def _late_disjoint_read(xp, a):
    """The reverse pass reads the old ``x[4:]`` late, but the update wrote only ``x[0]``."""
    x = xp.sin(a)
    s = x[5] ** 3 + x[6] * x[4]
    x = set_item(xp, x, 0, x[1] * x[2])
    return s + xp.sum(xp.cos(x))


def _shifted_slice(xp, a):
    """``x[1:5] = 2 x[0:4] + x[2:6]``: a thread reads elements its neighbours write."""
    x = xp.sin(a)
    x = set_item(xp, x, slice(1, 5), 2 * x[0:4] + x[2:6])
    return xp.sum(x * xp.cos(x))


def _case(name, body, shape) -> Case:
    return Case(name, body, {"a": shape}, ["a"], tol=1e-4)


CASES = {
    "row_sweeps": (_case("row_sweeps", _row_sweeps, (6, 6)), True),
    "point_sweeps": (_case("point_sweeps", _point_sweeps, (7,)), True),
    "forward_substitution": (_case("forward_substitution", _forward_substitution, (6, 6)), True),
    "late_old_read": (_case("late_old_read", _late_old_read, (7,)), False),
    "late_disjoint_read": (_case("late_disjoint_read", _late_disjoint_read, (7,)), True),
    "shifted_slice": (_case("shifted_slice", _shifted_slice, (7,)), False),
}


def _plan(case: Case):
    """The CPU device's plan: on GPU targets the first version is often recomputed
    from ``a`` where it is copied (``lowering.rematerialise``), not a copy any more."""
    program = build_program(sd, case)
    return plan(program.backward_graph(wrt=case.wrt), {}, targets.of("cpu"))


@pytest.mark.parametrize("name", list(CASES))
def test_gradients_match_jax(name, device):
    case, _ = CASES[name]
    program = build_program(sd, case)
    inputs = case.inputs()
    for _ in range(2):  # the second call starts from the buffers the first one left
        value, grads = program.value_and_grad(*[np.copy(v) for v in inputs.values()], device=device)
        assert_matches_jax(case, value, grads, inputs)


@pytest.mark.parametrize("name", list(CASES))
def test_copies_go_only_where_no_access_can_tell(name):
    case, shared = CASES[name]
    p = _plan(case)
    copies = [s.tasklet.name for k in p.kernels for s in k.steps if _plain_copy(p.graph, s)]
    if shared:
        assert p.storage and not copies, (name, p.storage, copies)
    else:
        assert copies and not p.storage, (name, p.storage, copies)


def test_one_element_updates_run_in_one_kernel():
    """With their copies gone, the ten one-element updates' kernels are neighbours
    and join into one one-thread kernel, in order."""
    p = _plan(CASES["point_sweeps"][0])
    updates = [[s.tasklet.meta["origin"] for s in k.steps if s.tasklet.meta["origin"].startswith("setitem")]
               for k in p.kernels]
    assert max(len(u) for u in updates) == 10, updates


def test_an_updated_result_is_returned_twice_alike(device):
    """The result is the last version of an in-place chain: its buffer is the
    chain's, handed to the caller each call."""
    @sd.differentiable_program
    def bump(a: sd.f32[5]):
        x = a * 2.0
        x[1] = x[0] + 1.0
        x[3] = x[1] * x[4]
        return x

    a = np.arange(1, 6, dtype=np.float32)
    want = a * 2
    want[1] = want[0] + 1
    want[3] = want[1] * want[4]
    first = np.array(bump(a, device=device))
    second = np.array(bump(a + 0, device=device))
    np.testing.assert_array_equal(first, want)
    np.testing.assert_array_equal(second, want)


def test_elements_are_evaluated_as_numpy_evaluates_the_expression():
    """``_evaluate`` (which elements an access touches, where its condition holds) agrees with
    plain numpy on indices and conditions of every form planning meets, including those its
    own evaluator leaves to ``lambdify`` (floor, a rational coefficient)."""
    from symdiff.lowering.in_place import _evaluate
    import sympy
    i, j = sympy.symbols("i j", integer=True)
    I, J = (a.reshape(-1) for a in np.meshgrid(np.arange(-3, 7), np.arange(0, 5), indexing="ij"))
    cases = [
        (3 * i - 2 * j + 4, 3 * I - 2 * J + 4),
        (sympy.Min(5, sympy.Max(0, i - 1)), np.minimum(5, np.maximum(0, I - 1))),
        (sympy.Integer(7), np.full(I.shape, 7)),
        (sympy.floor(i / 2) + j, np.floor_divide(I, 2) + J),
        (sympy.And(i >= 1, sympy.Or(sympy.Eq(j, 2), sympy.Not(i < 4))), (I >= 1) & ((J == 2) | ~(I < 4))),
        (sympy.Ne(i, j), I != J),
        (sympy.And(i >= 1, j <= 3), (I >= 1) & (J <= 3)),
    ]
    for expr, want in cases:
        dtype = bool if isinstance(expr, sympy.logic.boolalg.Boolean) else np.int64
        got = _evaluate(expr, [i, j], [I, J], I.size, dtype)
        assert got is not None and got.dtype == dtype and np.array_equal(got, want), expr


def test_element_sets_and_their_overlap_are_numpys():
    """``_sorted_unique`` and ``_disjoint`` (sorts in place of numpy 2.4's hashing unique) give what
    ``np.unique`` and ``np.intersect1d`` give, on increasing, shuffled, repeated and empty indices."""
    from symdiff.lowering.in_place import _disjoint, _sorted_unique
    rng = np.random.default_rng(5)
    sets = [np.arange(0, 40, 3), rng.integers(0, 30, 50), rng.permutation(25), np.array([7]), np.array([], np.int64),
            np.arange(100, 140)]
    for a in sets:
        a = a.astype(np.int64)
        assert np.array_equal(_sorted_unique(a), np.unique(a))
    for a in sets:
        for b in sets:
            ua, ub = np.unique(a.astype(np.int64)), np.unique(b.astype(np.int64))
            assert _disjoint(ua, ub) == (not np.intersect1d(ua, ub).size), (a, b)
