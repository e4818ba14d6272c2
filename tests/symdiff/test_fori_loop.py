"""``sd.fori_loop`` / ``sd.while_loop``: loops kept out of the graph (symdiff.loops), run as host
loops of the compiled body (symdiff.loop_runtime) with a checkpointed reverse pass.

Values and gradients are checked against ``jax.lax.fori_loop`` (float64) and central
differences of plain numpy running the same body, on numpy, cpu and vulkan (float32 there)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from symdiff import lowering
from symdiff.lowering import backends
import symdiff as sd
from symdiff.ir import TraceError

jax.config.update("jax_enable_x64", True)


def _device(name):
    marks = [pytest.mark.vulkan] if name == "vulkan" else []
    return pytest.param(name, marks=marks, id=name)


@pytest.fixture(params=[_device(d) for d in ("numpy", "cpu", "vulkan")])
def device(request):
    if request.param != "numpy" and request.param not in lowering.available_devices():
        pytest.skip(f"no {request.param} device here")
    return request.param


def skip_on_lavapipe(device: str, why: str) -> None:
    """Skip where Vulkan is Mesa's software driver (its float64 transcendentals are wrong),
    not on a hardware Vulkan GPU, which runs these float64 programs."""
    if backends.of(device).is_software():
        pytest.skip(why)


def _tol(device):
    return dict(rtol=2e-4, atol=2e-5) if device == "vulkan" else dict(rtol=1e-9, atol=1e-11)


def _spec(device):
    return sd.f32 if device == "vulkan" else sd.f64


def _dtype(device):
    return np.float32 if device == "vulkan" else np.float64


def _central(fn, args, h=1e-6):
    """Central differences of a numpy function of float64 arrays, per argument."""
    grads = []
    for k, a in enumerate(args):
        g = np.zeros_like(a)
        for idx in np.ndindex(a.shape):
            plus = [x.copy() for x in args]
            minus = [x.copy() for x in args]
            plus[k][idx] += h
            minus[k][idx] -= h
            g[idx] = (fn(*plus) - fn(*minus)) / (2 * h)
        grads.append(g)
    return grads


# -- jacobi-1d: two arrays updated in place each step (PolyBench's form) -------------------------

def jacobi_1d_step(t, state):
    A, B = state
    B[1:-1] = 0.33333 * (A[:-2] + A[1:-1] + A[2:])
    A[1:-1] = 0.33333 * (B[:-2] + B[1:-1] + B[2:])
    return A, B


def jacobi_1d_jax(A, B, steps):
    def step(t, state):
        A, B = state
        B = B.at[1:-1].set(0.33333 * (A[:-2] + A[1:-1] + A[2:]))
        A = A.at[1:-1].set(0.33333 * (B[:-2] + B[1:-1] + B[2:]))
        return A, B
    A, B = jax.lax.fori_loop(0, steps, step, (A, B))
    return jnp.sum(A * A) + jnp.sum(jnp.sin(B))


def test_jacobi_1d_matches_jax(device):
    spec = _spec(device)

    @sd.differentiable_program
    def jacobi_1d(A: spec[12], B: spec[12]):
        A, B = sd.fori_loop(0, 7, jacobi_1d_step, (A, B))
        return np.sum(A * A) + np.sum(np.sin(B))

    rng = np.random.default_rng(0)
    A, B = rng.uniform(-1, 1, 12), rng.uniform(-1, 1, 12)
    value, grads = jacobi_1d.value_and_grad(A.astype(_dtype(device)), B.astype(_dtype(device)), device=device)
    want, (gA, gB) = jax.jit(jax.value_and_grad(jacobi_1d_jax, argnums=(0, 1)), static_argnums=2)(A, B, 7)
    np.testing.assert_allclose(value, want, **_tol(device))
    np.testing.assert_allclose(grads["A"], gA, **_tol(device))
    np.testing.assert_allclose(grads["B"], gB, **_tol(device))


# -- jacobi-2d, and the checkpoint interval --------------------------------------------------------

def jacobi_2d_step(t, state):
    A, B = state
    B[1:-1, 1:-1] = 0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1] + A[:-2, 1:-1])
    A[1:-1, 1:-1] = 0.2 * (B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1] + B[:-2, 1:-1])
    return A, B


def jacobi_2d_jax(A, B, steps):
    def step(t, state):
        A, B = state
        B = B.at[1:-1, 1:-1].set(0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1] + A[:-2, 1:-1]))
        A = A.at[1:-1, 1:-1].set(0.2 * (B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1] + B[:-2, 1:-1]))
        return A, B
    A, B = jax.lax.fori_loop(0, steps, step, (A, B))
    return jnp.sum(A * A * B)


@pytest.mark.parametrize("every", [1, 3, None, 10])
def test_jacobi_2d_any_checkpoint_interval_matches_jax(every):
    @sd.differentiable_program
    def jacobi_2d(A: sd.f64[6, 5], B: sd.f64[6, 5]):
        A, B = sd.fori_loop(0, 10, jacobi_2d_step, (A, B), checkpoint_every=every)
        return np.sum(A * A * B)

    rng = np.random.default_rng(1)
    A, B = rng.uniform(-1, 1, (6, 5)), rng.uniform(-1, 1, (6, 5))
    value, grads = jacobi_2d.value_and_grad(A, B, device="numpy")
    want, (gA, gB) = jax.jit(jax.value_and_grad(jacobi_2d_jax, argnums=(0, 1)), static_argnums=2)(A, B, 10)
    np.testing.assert_allclose(value, want, rtol=1e-12)
    np.testing.assert_allclose(grads["A"], gA, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(grads["B"], gB, rtol=1e-10, atol=1e-12)


def test_trip_count_does_not_grow_the_graph():
    def make(steps):
        @sd.differentiable_program
        def jacobi_2d(A: sd.f64[6, 5], B: sd.f64[6, 5]):
            A, B = sd.fori_loop(0, steps, jacobi_2d_step, (A, B))
            return np.sum(A * A * B)
        return jacobi_2d
    few, many = make(3), make(1000)
    assert len(few.graph.tasklets()) == len(many.graph.tasklets())
    assert len(few.backward_graph().tasklets()) == len(many.backward_graph().tasklets())


# -- fdtd-2d (the iteration index reads the source term) and heat-3d ----------------------------------

def fdtd_step(t, s):
    ex, ey, hz, fict = s
    ey[0, :] = fict[t]
    ey[1:, :] -= 0.5 * (hz[1:, :] - hz[:-1, :])
    ex[:, 1:] -= 0.5 * (hz[:, 1:] - hz[:, :-1])
    hz[:-1, :-1] -= 0.7 * (ex[:-1, 1:] - ex[:-1, :-1] + ey[1:, :-1] - ey[:-1, :-1])
    return ex, ey, hz, fict


def fdtd_step_jax(t, s):
    ex, ey, hz, fict = s
    ey = ey.at[0, :].set(fict[t])
    ey = ey.at[1:, :].add(-0.5 * (hz[1:, :] - hz[:-1, :]))
    ex = ex.at[:, 1:].add(-0.5 * (hz[:, 1:] - hz[:, :-1]))
    hz = hz.at[:-1, :-1].add(-0.7 * (ex[:-1, 1:] - ex[:-1, :-1] + ey[1:, :-1] - ey[:-1, :-1]))
    return ex, ey, hz, fict


def _heat(X):
    return (0.125 * (X[2:, 1:-1, 1:-1] - 2.0 * X[1:-1, 1:-1, 1:-1] + X[:-2, 1:-1, 1:-1])
            + 0.125 * (X[1:-1, 2:, 1:-1] - 2.0 * X[1:-1, 1:-1, 1:-1] + X[1:-1, :-2, 1:-1])
            + 0.125 * (X[1:-1, 1:-1, 2:] - 2.0 * X[1:-1, 1:-1, 1:-1] + X[1:-1, 1:-1, :-2]) + X[1:-1, 1:-1, 1:-1])


def heat_step(t, s):
    A, B = s
    B[1:-1, 1:-1, 1:-1] = _heat(A)
    A[1:-1, 1:-1, 1:-1] = _heat(B)
    return A, B


def heat_step_jax(t, s):
    A, B = s
    B = B.at[1:-1, 1:-1, 1:-1].set(_heat(A))
    A = A.at[1:-1, 1:-1, 1:-1].set(_heat(B))
    return A, B


def _loss(state, xp):
    return sum(xp.sum(x * x) for x in state)


def test_fdtd_2d_matches_jax(device):
    spec = _spec(device)

    @sd.differentiable_program
    def fdtd(ex: spec[4, 5], ey: spec[4, 5], hz: spec[4, 5], fict: spec[3]):
        return _loss(sd.fori_loop(0, 3, fdtd_step, (ex, ey, hz, fict)), np)

    def fdtd_jax(*xs):
        return _loss(jax.lax.fori_loop(0, 3, fdtd_step_jax, xs), jnp)

    _check_vs_jax(fdtd, fdtd_jax, [(4, 5), (4, 5), (4, 5), (3,)], device)


def test_heat_3d_matches_jax(device):
    spec = _spec(device)

    @sd.differentiable_program
    def heat(A: spec[4, 4, 5], B: spec[4, 4, 5]):
        return _loss(sd.fori_loop(0, 4, heat_step, (A, B)), np)

    def heat_jax(*xs):
        return _loss(jax.lax.fori_loop(0, 4, heat_step_jax, xs), jnp)

    _check_vs_jax(heat, heat_jax, [(4, 4, 5), (4, 4, 5)], device)


def _check_vs_jax(program, program_jax, shapes, device):
    rng = np.random.default_rng(4)
    xs = [rng.uniform(-1, 1, s) for s in shapes]
    value, grads = program.value_and_grad(*[x.astype(_dtype(device)) for x in xs], device=device)
    want, gj = jax.jit(jax.value_and_grad(program_jax, argnums=tuple(range(len(xs)))))(*xs)
    np.testing.assert_allclose(value, want, **_tol(device))
    for name, g in zip(program.arg_names, gj):
        np.testing.assert_allclose(grads[name], g, **_tol(device))


# -- seidel-2d: reads of values written in the same iteration, in place -----------------------------

def seidel_step(t, A):
    n = A.shape[0]
    for i in range(1, n - 1):
        for j in range(1, A.shape[1] - 1):
            A[i, j] = (A[i - 1, j - 1] + A[i - 1, j] + A[i - 1, j + 1] + A[i, j - 1] + A[i, j]
                       + A[i, j + 1] + A[i + 1, j - 1] + A[i + 1, j] + A[i + 1, j + 1]) / 9.0
    return A


def test_seidel_2d_in_place_matches_central_differences(device):
    spec = _spec(device)

    @sd.differentiable_program
    def seidel(A: spec[4, 5]):
        A = sd.fori_loop(0, 3, seidel_step, A)
        return np.sum(A * A)

    def plain(A):
        A = A.copy()
        for t in range(3):
            A = seidel_step(t, A)
        return np.sum(A * A)

    A = np.random.default_rng(2).uniform(-1, 1, (4, 5))
    value, grads = seidel.value_and_grad(A.astype(_dtype(device)), device=device)
    np.testing.assert_allclose(value, plain(A), **_tol(device))
    (want,) = _central(plain, [A])
    np.testing.assert_allclose(grads["A"], want, rtol=max(_tol(device)["rtol"], 1e-7), atol=1e-8)


# -- an ODE integrator: RK4 of a damped pendulum, parameters carried in the state ----------------------

DT = 0.05


def _pendulum(y, p, xp):
    if xp is jnp:
        return jnp.array([y[1], -p[0] * jnp.sin(y[0]) - p[1] * y[1]])
    out = np.zeros_like(y)
    out[0] = y[1]
    out[1] = -p[0] * np.sin(y[0]) - p[1] * y[1]
    return out


def _rk4(y, p, xp):
    k1 = _pendulum(y, p, xp)
    k2 = _pendulum(y + 0.5 * DT * k1, p, xp)
    k3 = _pendulum(y + 0.5 * DT * k2, p, xp)
    k4 = _pendulum(y + DT * k3, p, xp)
    return y + (DT / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)


def test_rk4_integrator_matches_jax(device):
    skip_on_lavapipe(device, "float64 sin is wrong on lavapipe; the float32 stencils above cover vulkan")

    @sd.differentiable_program
    def integrate(y: sd.f64[2], p: sd.f64[2]):
        y, p = sd.fori_loop(0, 40, lambda i, s: (_rk4(s[0], s[1], np), s[1]), (y, p))
        return y[0] * y[0] + 0.5 * y[1]

    def integrate_jax(y, p):
        y, p = jax.lax.fori_loop(0, 40, lambda i, s: (_rk4(s[0], s[1], jnp), s[1]), (y, p))
        return y[0] * y[0] + 0.5 * y[1]

    y, p = np.array([1.2, -0.3]), np.array([9.81, 0.4])
    value, grads = integrate.value_and_grad(y, p, device=device)
    want, (gy, gp) = jax.jit(jax.value_and_grad(integrate_jax, argnums=(0, 1)))(y, p)
    np.testing.assert_allclose(value, want, rtol=1e-10)
    np.testing.assert_allclose(grads["y"], gy, rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(grads["p"], gp, rtol=1e-9, atol=1e-11)


# -- while_loop: Newton's method for a cube root, trip count from the data ---------------------------

def newton_cond(state):
    x, c = state
    return np.max(np.abs(x * x * x - c)) > 1e-12


def newton_body(state):
    x, c = state
    return x - (x * x * x - c) / (3.0 * x * x), c


NEWTON_X0, NEWTON_C = np.array([1.0, 1.5, 2.0]), np.array([2.0, 5.0, 9.0])


def newton_program(**loop_options):
    """sum(x^2) for x Newton's cube roots of c from x0, by a while_loop (``loop_options``: its extra
    arguments)."""
    @sd.differentiable_program
    def cube_root(x0: sd.f64[3], c: sd.f64[3]):
        x, c = sd.while_loop(newton_cond, newton_body, (x0, c), max_iters=50, **loop_options)
        return np.sum(x * x)

    return cube_root


def newton_with_jax():
    """The JAX twin of ``newton_program`` at (NEWTON_X0, NEWTON_C): a fori_loop with the trip count
    the while_loop takes there, and that count."""
    trips, state = 0, (NEWTON_X0, NEWTON_C)
    while newton_cond(state):
        state, trips = newton_body(state), trips + 1

    def with_jax(x0, c):
        x, c = jax.lax.fori_loop(0, trips, lambda i, s: newton_body(s), (x0, c))
        return jnp.sum(x * x)

    return with_jax, trips


def test_newton_while_loop_matches_jax_with_the_same_trip_count(device):
    skip_on_lavapipe(device, "a 1e-12 tolerance needs float64, which lavapipe computes in full only without "
                             "transcendentals")
    x0, c = NEWTON_X0, NEWTON_C
    with_jax, trips = newton_with_jax()
    assert 3 < trips < 50

    value, grads = newton_program().value_and_grad(x0, c, device=device)
    want, (gx, gc) = jax.jit(jax.value_and_grad(with_jax, argnums=(0, 1)))(x0, c)
    np.testing.assert_allclose(value, want, rtol=1e-12)
    np.testing.assert_allclose(grads["c"], gc, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(grads["x0"], gx, atol=1e-9)
    np.testing.assert_allclose(grads["c"], 2 * np.cbrt(c) / (3 * np.cbrt(c) ** 2), rtol=1e-8)  # d(c^(2/3))/dc


def test_while_loop_past_max_iters_raises():
    @sd.differentiable_program
    def slow(x0: sd.f64[3], c: sd.f64[3]):
        x, c = sd.while_loop(newton_cond, newton_body, (x0, c), max_iters=2)
        return np.sum(x)

    with pytest.raises(sd.LoopError, match=r"test_fori_loop.py:\d+.*max_iters=2"):
        slow(np.array([1.0, 1.5, 2.0]), np.array([2.0, 5.0, 9.0]), device="numpy")


# -- two loops with code between them, an integer counter in the state ------------------------------

def test_two_loops_code_between_and_integer_state(device):
    spec = _spec(device)

    def grow(i, s):
        x, n = s
        return x * 0.9 + 0.1 * x * x, n + 1

    @sd.differentiable_program
    def two(x: spec[4], w: spec[4]):
        x, n = sd.fori_loop(0, 5, grow, (x * w, np.zeros((), dtype=np.int32)))
        y = x + w * w
        y, n = sd.fori_loop(2, 6, grow, (y, n))
        return np.sum(y * x) + n * 0.5

    def plain(x, w):
        x, n = x * w, 0
        for i in range(5):
            x, n = grow(i, (x, n))
        y = x + w * w
        for i in range(2, 6):
            y, n = grow(i, (y, n))
        return np.sum(y * x) + n * 0.5

    rng = np.random.default_rng(3)
    x, w = rng.uniform(0.2, 0.8, 4), rng.uniform(0.2, 0.8, 4)
    value, grads = two.value_and_grad(x.astype(_dtype(device)), w.astype(_dtype(device)), device=device)
    np.testing.assert_allclose(value, plain(x, w), **_tol(device))
    gx, gw = _central(plain, [x, w])
    tol = dict(rtol=max(_tol(device)["rtol"], 1e-7), atol=1e-8)
    np.testing.assert_allclose(grads["x"], gx, **tol)
    np.testing.assert_allclose(grads["w"], gw, **tol)


# -- eager use and errors -------------------------------------------------------------------------------

def test_outside_a_trace_runs_as_a_python_loop():
    A, B = np.linspace(0, 1, 6), np.linspace(1, 2, 6)
    got = sd.fori_loop(0, 3, jacobi_1d_step, (A.copy(), B.copy()))
    want = (A.copy(), B.copy())
    for t in range(3):
        want = jacobi_1d_step(t, want)
    np.testing.assert_array_equal(got[0], want[0])
    assert sd.while_loop(lambda x: x < 10, lambda x: x * 2, 1, max_iters=5) == 16
    with pytest.raises(sd.LoopError, match="max_iters=3"):
        sd.while_loop(lambda x: x < 10, lambda x: x * 2, 1, max_iters=3)


def test_body_reading_an_outer_array_becomes_loop_state():
    """Closures are supported (tests/symdiff/test_loop_closures.py): the array read goes in as extra state."""
    def program(a, w):
        return np.sum(sd.fori_loop(0, 3, lambda i, s: s * w, a))   # w is not in the state

    (loop,) = sd.loops.loops_of(sd.trace(program, sd.f64[4], sd.f64[4]))
    assert len(loop.inputs) == 2


def test_body_changing_the_state_shape_is_refused():
    def program(a):
        return np.sum(sd.fori_loop(0, 3, lambda i, s: s[1:], a))

    with pytest.raises(TraceError, match=r"keep shapes and dtypes"):
        sd.trace(program, sd.f64[4])


def test_traced_bounds_are_refused():
    def program(a, n):
        return np.sum(sd.fori_loop(0, n, lambda i, s: s * 2, a))

    with pytest.raises(TraceError, match="while_loop"):
        sd.trace(program, sd.f64[4], sd.i32)


# -- the hint for unrolled Python loops ----------------------------------------------------------------

def test_many_unrolled_copies_of_one_line_hint_fori_loop_once(recwarn):
    def unrolled(a):
        for t in range(70):
            a = a * 0.99 + 0.01   # the hinted line
        return np.sum(a)

    program = sd.differentiable_program(unrolled)
    program(np.ones(3), device="numpy")
    program(np.ones((2, 2)), device="numpy")   # a second trace: no second hint
    hints = [w for w in recwarn if issubclass(w.category, sd.loops.UnrolledLoopWarning)]
    assert len(hints) == 1
    assert "test_fori_loop.py:" in str(hints[0].message) and "sd.fori_loop" in str(hints[0].message)


def test_fori_loop_and_short_loops_give_no_hint(recwarn):
    @sd.differentiable_program
    def kept(a: sd.f64[3]):
        for t in range(5):
            a = a * 0.99
        return np.sum(sd.fori_loop(0, 500, lambda i, s: s * 0.99 + 0.01, a))

    kept(np.ones(3), device="numpy")
    assert not [w for w in recwarn if issubclass(w.category, sd.loops.UnrolledLoopWarning)]


def test_nested_loops_match_jax():
    def inner(j, s):
        return np.sin(s) * 0.5 + s * 0.25

    def outer(i, state):
        a, b = state
        a = sd.fori_loop(0, 3, inner, a)
        return a + 0.1 * b, b * 0.9

    @sd.differentiable_program
    def nested(a: sd.f64[4], b: sd.f64[4]):
        a, b = sd.fori_loop(0, 4, outer, (a, b))
        return np.sum(a * b)

    def nested_jax(a, b):
        def outer_jax(i, state):
            a, b = state
            a = jax.lax.fori_loop(0, 3, lambda j, s: jnp.sin(s) * 0.5 + s * 0.25, a)
            return a + 0.1 * b, b * 0.9
        a, b = jax.lax.fori_loop(0, 4, outer_jax, (a, b))
        return jnp.sum(a * b)

    a, b = np.linspace(0.1, 0.9, 4), np.linspace(1.0, 2.0, 4)
    value, grads = nested.value_and_grad(a, b, device="numpy")
    want, (ga, gb) = jax.jit(jax.value_and_grad(nested_jax, argnums=(0, 1)))(a, b)
    np.testing.assert_allclose(value, want, rtol=1e-12)
    np.testing.assert_allclose(grads["a"], ga, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(grads["b"], gb, rtol=1e-10, atol=1e-12)


def test_empty_loops_and_integer_only_loops():
    @sd.differentiable_program
    def edge(a: sd.f64[3]):
        a = sd.fori_loop(4, 4, lambda i, s: s * s, a)                        # no iteration
        a = sd.fori_loop(5, 2, lambda i, s: s * s, a)                        # hi < lo: none either
        n = sd.fori_loop(0, 6, lambda i, k: k + i, np.zeros((), dtype=np.int32))   # no float state
        return np.sum(a * a) * n

    a = np.array([0.5, -1.0, 2.0])
    value, grads = edge.value_and_grad(a, device="numpy")
    assert value == np.sum(a * a) * 15
    np.testing.assert_allclose(grads["a"], 2 * a * 15, rtol=1e-14)


def test_inspection_of_a_program_with_a_loop():
    @sd.differentiable_program
    def f(a: sd.f64[8]):
        a = sd.fori_loop(0, 5, lambda i, s: s * 0.5 + s * s, a, checkpoint_every=2)   # the loop's line
        return np.sum(a * a)

    f.value_and_grad(np.linspace(0, 1, 8), device="cpu")
    text = str(f.explain(device="cpu"))
    assert "loops.py" not in text and "test_fori_loop.py:" in text   # the copy going in is the user's line
    source = f.slang_source(device="cpu")
    assert "loop" in source and "body" in source and "reverse step" in source
    (stats,) = f.stats().values()
    # 5 iterations forward; the reverse pass recomputes iterations 0 and 2 from the checkpoints at
    # 0, 2, 4 to get the states 1 and 3 it needs
    assert [body["calls"] for body in stats["loops"].values()] == [5 + 2]
