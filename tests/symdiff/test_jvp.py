"""Forward mode (``program.jvp``, ``program.jvp_program``, ``add_tangent_pass``)
against ``jax.jvp`` in float64: the gradient corpus (tests/corpus.py) on the
interpreter and a cross-section of it on every Slang device, the non-smooth
conventions at ties, gathers and scatters, Hessian-vector products both ways
(forward-over-reverse, reverse-over-forward) against ``jax.jvp(jax.grad(f))``,
and the fuzzer's generated programs.

``SYMDIFF_JVP_FUZZ=first:count`` widens the fuzzer test from its few fixed
seeds to a campaign (numpy device, float64), e.g. ``SYMDIFF_JVP_FUZZ=0:300``.
"""
# (no ``from __future__ import annotations``: program annotations are evaluated)
import functools
import os
import zlib

import networkx as nx
import numpy as np
import pytest

from symdiff import lowering
import symdiff as sd
import float_bounds
from corpus import CASES, build_program

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy

SLANG = [pytest.param(d, marks=[pytest.mark.vulkan] if d == "vulkan" else [], id=d) for d in ("cpu", "vulkan")]


def _need(device: str) -> None:
    if device != "numpy" and device not in lowering.available_devices():
        pytest.skip(f"no {device} device here")


def _float(device: str):
    """(dtype, tolerance vs JAX float64): float64 on the interpreter; float32 on
    the Slang devices (lavapipe refuses float64 transcendentals)."""
    return (np.float64, 1e-10) if device == "numpy" else (np.float32, 2e-5)


def _close(got, want, tol: float, what: str) -> None:
    got = np.asarray(got, np.float64).reshape(np.shape(want))
    want = np.asarray(want, np.float64)
    err = np.max(np.abs(got - want)) if want.size else 0.0
    assert err <= tol * max(1.0, float(np.max(np.abs(want))) if want.size else 1.0), \
        f"{what}: off by {err:.3e}\n got {got}\nwant {want}"


# ------------------------------------------------------------------ the corpus

def _corpus_tangents(case) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(zlib.crc32(case.name.encode()))
    return {n: rng.standard_normal(case.shapes[n]).astype(np.float32) for n in case.wrt}


def _corpus_reference(case, inputs, tangents, dtype):
    body = case.jax_body or case.body
    names = list(case.shapes)

    def f(*active):
        args = {n: jnp.asarray(inputs[n], dtype) for n in names}
        args.update(zip(case.wrt, active))
        return body(jnp, *(args[n] for n in names))
    return jax.jvp(jax.jit(f), tuple(jnp.asarray(inputs[n], dtype) for n in case.wrt),
                   tuple(jnp.asarray(tangents[n], dtype) for n in case.wrt))


def _check_corpus(case, device: str) -> None:
    """float64 on the interpreter, judged at 1e-9; float32 on a Slang device, judged by
    JAX float32's own error on the same inputs, or float64's on inputs moved by one float32
    rounding where that is larger (tests/float_bounds.py).  A program that
    sums into a float32 array of its own (map_stencil) has a float32 value on the
    interpreter too, judged as float32."""
    float64 = device == "numpy"
    program = build_program(sd, case, float64=float64)
    inputs = case.inputs()
    tangents = _corpus_tangents(case)
    if float64:
        inputs, tangents = ({n: v.astype(np.float64) for n, v in d.items()} for d in (inputs, tangents))
    value, tangent = program.jvp(*inputs.values(), tangents=tangents, device=device)
    ref_value, ref_tangent = _corpus_reference(case, inputs, tangents, jnp.float64)
    j32_value, j32_tangent = (None, None)
    if not float_bounds.is_float64(value, tangent):
        rounded = ({n: v.astype(np.float32) for n, v in d.items()} for d in (inputs, tangents))
        j32_value, j32_tangent = _corpus_reference(case, *rounded, jnp.float32)
        # and float64 answers on inputs moved by one float32 rounding (float_bounds)
        moved = [_corpus_reference(case, float_bounds.perturbed_inputs(inputs, s),
                                   float_bounds.perturbed_inputs(tangents, s + 1), jnp.float64) for s in (0, 2, 4)]
        j32_value, j32_tangent = ([j, *(m[k] for m in moved)] if not float_bounds.is_float64(got) else None
                                  for k, (j, got) in enumerate(((j32_value, value), (j32_tangent, tangent))))
    float_bounds.assert_close(f"{case.name} value", value, ref_value, j32_value)
    float_bounds.assert_close(f"{case.name} tangent", tangent, ref_tangent, j32_tangent)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_corpus_jvp_matches_jax_on_the_interpreter(case):
    _check_corpus(case, "numpy")


# one of each kind of tasklet the tangent pass treats differently
ON_DEVICES = ["mlp", "softmax_xent", "jacobi_1d", "map_stencil", "map_rowsum", "mean_max", "prod_axis", "where_sqrt",
              "in_place_add"]


@pytest.mark.parametrize("device", SLANG)
@pytest.mark.parametrize("case", [c for c in CASES if c.name in ON_DEVICES], ids=ON_DEVICES)
def test_corpus_jvp_matches_jax_on_slang_devices(case, device):
    _need(device)
    _check_corpus(case, device)


# ------------------------------------------------------------------ conventions, indirect access, dtypes

def ties(x, y):
    return (np.sum(np.maximum(x, y) * np.arange(1.0, 7.0)) + np.max(x) * 3.0
            + np.sum(np.clip(x, -1.0, 1.0) * y) + np.sum(np.where(x > y, x * x, y)))


def ties_jax(x, y):
    return (jnp.sum(jnp.maximum(x, y) * jnp.arange(1.0, 7.0)) + jnp.max(x) * 3.0
            + jnp.sum(jnp.clip(x, -1.0, 1.0) * y) + jnp.sum(jnp.where(x > y, x * x, y)))


@pytest.mark.parametrize("device", ["numpy"] + SLANG)
def test_ties_split_as_the_reverse_pass_and_jax_split_them(device):
    """maximum at x == y, a three-way tie of max, clip at its bounds."""
    _need(device)
    dtype, tol = _float(device)
    x = np.array([1.0, 2.0, 2.0, -1.0, 0.5, 2.0], dtype)
    y = np.array([1.0, 0.0, 3.0, -1.0, 0.5, -2.0], dtype)
    tx = np.array([0.3, -1.2, 0.7, 2.0, -0.4, 1.1], dtype)
    ty = np.array([-0.8, 0.5, 0.9, -1.5, 0.6, 0.2], dtype)
    value, tangent = sd.differentiable_program(ties).jvp(x, y, tangents={"x": tx, "y": ty}, device=device)
    ref_value, ref_tangent = jax.jvp(jax.jit(ties_jax), *(tuple(np.float64(v) for v in p) for p in ((x, y), (tx, ty))))
    _close(value, ref_value, tol, "value")
    _close(tangent, ref_tangent, tol, "tangent")


def row_max(x):
    return np.max(x, axis=1) * 2.0


@pytest.mark.parametrize("device", ["numpy"] + SLANG)
def test_a_nan_maximum_has_a_nan_tangent_as_in_jax(device):
    """A NaN maximum equals no element: the tie count is 0 and the tangent NaN
    (JAX, and the reverse pass's gradient); the other row splits its tie."""
    _need(device)
    x = np.array([[1.0, np.nan, 0.5], [2.0, 2.0, -1.0]], np.float32)
    t = np.array([[0.1, 0.2, 0.3], [1.0, 3.0, 5.0]], np.float32)
    _, tangent = sd.differentiable_program(row_max).jvp(x, tangents={"x": t}, device=device)
    ref = jax.jvp(jax.jit(lambda x: jnp.max(x, axis=1) * 2.0), (np.float64(x),), (np.float64(t),))[1]
    assert np.isnan(tangent[0]) and np.isnan(ref[0])
    _close(tangent[1:], ref[1:], 1e-6, "tied row")


def products(a: sd.f64[3, 4]):
    return np.sum(np.sin(np.prod(a, axis=1)))


@pytest.mark.parametrize("device", ["numpy", "cpu"])
def test_product_tangent_is_exact_with_zeros(device):
    _need(device)
    a = np.array([[1.0, 2.0, 0.0, 3.0], [0.0, 1.5, 0.0, 2.0], [0.5, -1.0, 2.0, 4.0]])
    ta = np.random.default_rng(0).standard_normal(a.shape)
    _, tangent = sd.differentiable_program(products).jvp(a, tangents={"a": ta}, device=device)
    ref = jax.jvp(jax.jit(lambda a: jnp.sum(jnp.sin(jnp.prod(a, axis=1)))), (a,), (ta,))[1]
    _close(tangent, ref, 1e-12, "tangent")


def indirect(a, w, idx, flags):
    gathered = a[idx] * w                               # gather
    out = np.zeros(5, a.dtype)
    np.add.at(out, idx, np.where(flags, gathered, 2.0 * w))   # scatter-add with repeats
    s = np.zeros(3, a.dtype)
    for i in sd.map[0:3]:
        s[i] = a[idx[i + 1]] * a[i] + w[i]              # gather inside a map
    return np.sum(np.sin(out)) + np.sum(s * s), idx * 2


def indirect_jax(a, w, idx, flags):
    gathered = a[idx] * w
    out = jnp.zeros(5).at[idx].add(jnp.where(flags, gathered, 2.0 * w))
    s = a[idx[1:4]] * a[:3] + w[:3]
    return jnp.sum(jnp.sin(out)) + jnp.sum(s * s)


@pytest.mark.parametrize("device", ["numpy"] + SLANG)
def test_gathers_scatters_and_integer_outputs(device):
    """Index and mask arguments take no tangent; an integer output's tangent is None."""
    _need(device)
    dtype, tol = _float(device)
    rng = np.random.default_rng(1)
    a, w, ta, tw = (rng.standard_normal(n).astype(dtype) for n in (5, 4, 5, 4))
    idx = np.array([3, 0, 3, 4], np.int32)
    flags = np.array([True, False, True, True])
    (value, doubled), (tangent, none) = sd.differentiable_program(indirect).jvp(
        a, w, idx, flags, tangents={"a": ta, "w": tw}, device=device)
    ref_value, ref_tangent = jax.jvp(jax.jit(lambda a, w: indirect_jax(a, w, idx, flags)),
                                     *(tuple(np.float64(v) for v in p) for p in ((a, w), (ta, tw))))
    _close(value, ref_value, tol, "value")
    _close(tangent, ref_tangent, tol, "tangent")
    assert none is None and np.array_equal(doubled, idx * 2)


def two_paths(x: sd.f32[8], y: sd.f32[8]):
    return np.sum(np.exp(y) * 2.0) + np.sum(np.tanh(x) * x)


def test_inputs_without_a_tangent_cost_nothing():
    """Only tasklets on a path from an input with a tangent get tangent tasklets:
    with a tangent for ``x`` alone, nothing of ``exp(y)`` is differentiated."""
    program = sd.differentiable_program(two_paths)
    x, y = np.linspace(-1, 1, 8, dtype=np.float32), np.linspace(0, 1, 8, dtype=np.float32)
    _, tangent = program.jvp(x, y, tangents={"x": np.ones(8, np.float32)}, device="numpy")
    forward = program.graph.nx
    y_only = nx.descendants(forward, "y#0") - nx.descendants(forward, "x#0")
    graph = program._tangent_graph(program._specs_for(None), ("x",))
    derived = {t.meta["tangent_of"] for t in graph.tasklets() if "tangent_of" in t.meta}
    assert derived and y_only and not derived & y_only
    _close(tangent, np.sum(np.tanh(x.astype(np.float64)) + x * (1 - np.tanh(x.astype(np.float64)) ** 2)),
           1e-5, "tangent")


@pytest.mark.parametrize("device", SLANG)
def test_tangent_tasklets_share_the_forward_kernels(device, monkeypatch):
    """The tangent pass adds no kernel to an elementwise chain and its sums.
    (On lavapipe the planner's recompute trial, ``rematerialise.cheap_on_gpu``,
    folds ``tanh(x) * x`` into its sum in the forward alone, whose tangent reads
    two varying values: the two plans are compared without it.)"""
    _need(device)
    import symdiff.lowering.plan  # the pipeline's name for the trial (lowering.plan imports it)
    monkeypatch.setattr(symdiff.lowering.plan, "cheap_on_gpu", lambda p, arithmetic_only=False: [])
    program = sd.differentiable_program(two_paths)
    x = np.linspace(-1, 1, 8, dtype=np.float32)
    program(x, x, device=device)
    program.jvp(x, x, tangents={"x": x, "y": x}, device=device)
    forward, tangent = (program._executable(g, device) for g in
                        (program.graph, program._tangent_graph(program._specs_for(None), ("x", "y"))))
    assert len(tangent.kernels()) <= len(forward.kernels())


def test_clear_errors_for_bad_tangents():
    program = sd.differentiable_program(indirect)
    args = (np.zeros(5), np.zeros(4), np.zeros(4, np.int32), np.zeros(4, bool))
    with pytest.raises(sd.ProgramError, match=r"tangent for 'a' has shape \(4,\), the argument has shape \(5,\)"):
        program.jvp(*args, tangents={"a": np.zeros(4)}, device="numpy")
    with pytest.raises(sd.ProgramError, match="'idx'.*dtype int32"):
        program.jvp(*args, tangents={"idx": np.zeros(4)}, device="numpy")
    with pytest.raises(sd.ProgramError, match="no such argument"):
        program.jvp(*args, tangents={"b": np.zeros(4)}, device="numpy")
    with pytest.raises(sd.ProgramError, match="tangent_of='b'"):
        program.jvp_program(tangent_of=["b"])


def test_a_loop_the_tangents_reach_carries_them():
    """``sd.fori_loop`` hands its state back through new argument containers: the
    tangent goes through as a loop of tangents (symdiff.loop_runtime.add_tangent_pass),
    never dropped; one beside the loop runs too."""
    def looped(x: sd.f64[4], w: sd.f64[4]):
        y = sd.fori_loop(0, 3, lambda i, s: np.sin(s) * 0.5, x)
        return np.sum(y * w)
    program = sd.differentiable_program(looped)
    x = np.linspace(0.5, 1.0, 4)
    y, dy = x, np.ones(4)
    for _ in range(3):
        y, dy = np.sin(y) * 0.5, dy * 0.5 * np.cos(y)
    _close(program.jvp_program()(x, x, x, x, device="numpy"), np.sum(dy * x * x) + np.sum(y * x), 1e-12,
           "through the loop")
    _close(program.jvp_program(tangent_of=["w"])(x, x, x, device="numpy"), np.sum(y * x), 1e-12, "beside the loop")


# ------------------------------------------------------------------ Hessian-vector products

def loss(w, x):
    logits = np.tanh(x @ w)
    m = np.max(logits, axis=1, keepdims=True)
    return np.sum(m) + np.sum(np.log(np.sum(np.exp(logits - m), axis=1)))


def loss_jax(w, x):
    logits = jnp.tanh(x @ w)
    m = jnp.max(logits, axis=1, keepdims=True)
    return jnp.sum(m) + jnp.sum(jnp.log(jnp.sum(jnp.exp(logits - m), axis=1)))


def smooth(u, k):
    out = np.zeros(12, u.dtype)
    for i in sd.map[1:11]:
        out[i] = k[0] * u[i - 1] + k[1] * u[i] * u[i] + k[2] * np.sin(u[i + 1])
    return np.sum(out * out) + np.sum(np.sqrt(u * u + 1.0))


def smooth_jax(u, k):
    inner = k[0] * u[:-2] + k[1] * u[1:-1] * u[1:-1] + k[2] * jnp.sin(u[2:])
    return jnp.sum(inner * inner) + jnp.sum(jnp.sqrt(u * u + 1.0))


HVP = [(loss, loss_jax, {"w": (4, 3), "x": (5, 4)}), (smooth, smooth_jax, {"u": (12,), "k": (3,)})]


@pytest.mark.parametrize("device", ["numpy"] + SLANG)
@pytest.mark.parametrize("fn,twin,shapes", HVP, ids=[h[0].__name__ for h in HVP])
def test_hessian_vector_products_both_ways(fn, twin, shapes, device):
    """``grad_program().jvp`` (forward-over-reverse) and ``jvp_program().grad``
    (reverse-over-forward) against ``jax.jvp(jax.grad(f))``, for every argument."""
    _need(device)
    dtype, tol = _float(device)
    rng = np.random.default_rng(2)
    args = [rng.standard_normal(s).astype(dtype) for s in shapes.values()]
    vs = [rng.standard_normal(s).astype(dtype) for s in shapes.values()]
    names = list(shapes)
    ref = jax.jvp(jax.jit(jax.grad(twin, argnums=tuple(range(len(names))))), tuple(np.float64(a) for a in args),
                  tuple(np.float64(v) for v in vs))[1]
    program = sd.differentiable_program(fn)
    _, over_reverse = program.grad_program().jvp(*args, tangents=dict(zip(names, vs)), device=device)
    forward = program.jvp_program()
    assert forward.arg_names == names + [f"t_{n}" for n in names]
    over_forward = forward.grad(*args, *vs, wrt=names, device=device)
    for n, r, a, b in zip(names, ref, over_reverse, (over_forward[n] for n in names)):
        _close(a, r, tol, f"forward-over-reverse {n}")
        _close(b, r, tol, f"reverse-over-forward {n}")


def test_hvp_in_one_argument_as_the_guide_writes_it():
    """docs/guide.md's two forms, for the Hessian in ``w`` alone (``x`` fixed)."""
    rng = np.random.default_rng(4)
    w, x, v = rng.standard_normal((4, 3)), rng.standard_normal((5, 4)), rng.standard_normal((4, 3))
    program = sd.differentiable_program(loss)
    ref = jax.jvp(jax.jit(jax.grad(lambda w: loss_jax(w, x))), (w,), (v,))[1]
    _close(program.grad_program(wrt=["w"]).jvp(w, x, tangents={"w": v}, device="numpy")[1], ref, 1e-10, "f-o-r")
    _close(program.jvp_program(tangent_of=["w"]).grad(w, x, v, wrt=["w"], device="numpy")["w"], ref, 1e-10, "r-o-f")


def cubic(x: sd.f64[5]):
    return np.sum(np.sin(x) * np.max(x) + x ** 3)


def test_third_order_through_jvp_programs():
    """A jvp_program composes with itself and with grad_program (third derivatives)."""
    def twin(x):
        return jnp.sum(jnp.sin(x) * jnp.max(x) + x ** 3)
    program = sd.differentiable_program(cubic)
    rng = np.random.default_rng(5)
    x, u, v = (rng.standard_normal(5) for _ in range(3))
    got = program.jvp_program().grad_program(wrt=["x"]).jvp(x, u, tangents={"x": v}, device="numpy")[1]
    ref = jax.jvp(jax.jit(jax.grad(lambda x: jax.jvp(twin, (x,), (u,))[1])), (x,), (v,))[1]
    _close(got, ref, 1e-12, "jvp of grad of jvp")
    got = program.jvp_program().jvp_program(tangent_of=["x"]).grad(x, u, v, wrt=["x"], device="numpy")["x"]
    ref = jax.jit(jax.grad(lambda x: jax.jvp(lambda y: jax.jvp(twin, (y,), (u,))[1], (x,), (v,))[1]))(x)
    _close(got, ref, 1e-12, "grad of jvp of jvp")


@sd.custom_vjp
def stable_softmax(x):
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return e / np.sum(e, axis=-1, keepdims=True)


def _softmax_fwd(x):
    y = stable_softmax(x)
    return y, y


def _softmax_bwd(y, g):
    return (y * (g - np.sum(g * y, axis=-1, keepdims=True)),)


stable_softmax.defvjp(_softmax_fwd, _softmax_bwd)


def softmax_loss(x: sd.f64[3, 4]):
    return np.sum(stable_softmax(x) ** 2 * np.arange(4.0))


def test_through_a_custom_vjp_function_every_way():
    """jvp differentiates a custom_vjp call's forward automatically; a reverse
    pass over that tangent program then differentiates the call automatically
    too (its tangent tasklets read the call's internal values, whose cotangents
    the user's rule cannot return: they were dropped, off by 0.2)."""
    def twin(x):
        return jnp.sum(jax.nn.softmax(x, axis=-1) ** 2 * jnp.arange(4.0))
    program = sd.differentiable_program(softmax_loss)
    rng = np.random.default_rng(6)
    x, v = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    _close(program.jvp(x, tangents={"x": v}, device="numpy")[1], jax.jvp(jax.jit(twin), (x,), (v,))[1], 1e-12, "jvp")
    ref = jax.jvp(jax.jit(jax.grad(twin)), (x,), (v,))[1]
    _close(program.grad_program().jvp(x, tangents={"x": v}, device="numpy")[1], ref, 1e-12, "forward-over-reverse")
    _close(program.jvp_program().grad(x, v, wrt=["x"], device="numpy")["x"], ref, 1e-12, "reverse-over-forward")
    assert program.graph.meta["custom_vjps"], "the program's own graph keeps its rule"


def test_jvp_program_runs_as_a_program_of_tangents():
    """``jvp_program()(x, t)`` is ``jvp``'s tangent; its tangents are arguments."""
    program = sd.differentiable_program(smooth)
    rng = np.random.default_rng(3)
    u, k, tu = rng.standard_normal(12), rng.standard_normal(3), rng.standard_normal(12)
    _, tangent = program.jvp(u, k, tangents={"u": tu}, device="numpy")
    only_u = program.jvp_program(tangent_of="u")
    assert only_u.arg_names == ["u", "k", "t_u"]
    _close(only_u(u, k, tu, device="numpy"), tangent, 1e-12, "jvp_program")
    _close(tangent, jax.jvp(jax.jit(lambda u: smooth_jax(u, k)), (u,), (tu,))[1], 1e-12, "vs JAX")


# ------------------------------------------------------------------ generated programs

def _fuzz_seeds() -> list[int]:
    spec = os.environ.get("SYMDIFF_JVP_FUZZ")
    if not spec:
        return [3, 11, 42, 77, 123]
    first, count = (int(v) for v in spec.split(":"))
    return list(range(first, first + count))


def fuzz_jvp(seed: int) -> tuple[str, str]:
    """One generated program (tests/fuzz/gen.py) through ``jvp`` on the
    interpreter (float64) against ``jax.jvp``, with a random tangent for every
    float argument; programs the generator marks for second order also check
    forward-over-reverse (``grad_program(wrt=[second]).jvp``) against
    ``jax.jvp(jax.grad)``.  Returns ``(outcome, detail)`` as the fuzzer names
    outcomes: ok, wrong, refused, error, invalid."""
    from fuzz.check import RTOL64, build_jax, build_symdiff, refusal_types
    from fuzz.gen import generate, make_inputs
    prog = generate(seed)
    inputs = make_inputs(prog)
    names = list(prog.floats)
    rng = np.random.default_rng([seed, 7])
    tangents = {n: rng.standard_normal(s) for n, s in prog.floats.items()}
    try:
        twin = build_jax(prog, jnp.float64)
        ix = [jnp.asarray(inputs[n], jnp.int32) for n in prog.indices]

        def f(*xs):
            return twin(*xs, *ix)
        primals = tuple(jnp.asarray(inputs[n], jnp.float64) for n in names)
        ref = list(jax.jvp(jax.jit(f), primals, tuple(jnp.asarray(tangents[n]) for n in names)))
        if prog.second is not None:
            ref.append(jax.jvp(jax.jit(jax.grad(f, argnums=names.index(prog.second))), primals,
                               tuple(jnp.asarray(tangents[n]) for n in names))[1])
        ref = [np.asarray(r, np.float64) for r in ref]
    except Exception as e:  # the generator made something JAX rejects
        return "invalid", f"JAX: {type(e).__name__}: {e}"[:300]
    if not all(np.all(np.isfinite(r)) for r in ref):
        return "invalid", "JAX float64 reference is not finite"
    try:
        program = build_symdiff(prog, float64=True)
        args = [np.array(inputs[n], np.float64) for n in names] + [np.array(inputs[n]) for n in prog.indices]
        got = list(program.jvp(*args, tangents=tangents, device="numpy"))
        if prog.second is not None:
            got.append(program.grad_program(wrt=[prog.second]).jvp(*args, tangents=tangents, device="numpy")[1])
    except refusal_types() as e:
        return "refused", f"{type(e).__name__}: {e}"[:300]
    except Exception as e:
        return "error", f"{type(e).__name__}: {e}"[:300]
    for what, g, r in zip(("value", "tangent", "hvp"), got, ref):
        g = np.asarray(g, np.float64).reshape(r.shape)
        scale = max(float(np.max(np.abs(r))) if r.size else 0.0, 1.0)
        err = float(np.max(np.abs(g - r))) if r.size else 0.0
        if not err <= RTOL64 * scale:
            return "wrong", f"{what}: off by {err:.3e} (scale {scale:.3g})"
    return "ok", ""


@functools.lru_cache(maxsize=None)
def _fuzz_outcome(seed: int) -> tuple[str, str]:
    """Each seed runs once per process: the per-seed tests and the campaign's tally share it."""
    return fuzz_jvp(seed)


@pytest.mark.parametrize("seed", _fuzz_seeds())
def test_generated_programs_jvp_matches_jax(seed):
    outcome, detail = _fuzz_outcome(seed)
    assert outcome in ("ok", "refused", "invalid"), f"seed {seed}: {outcome}: {detail}"


def test_most_generated_programs_are_judged():
    """A refused or invalid program passes its seed's test without being compared; a
    campaign where that is most of them says nothing about forward mode, so it fails."""
    seeds = _fuzz_seeds()
    outcomes = [_fuzz_outcome(seed)[0] for seed in seeds]
    judged = outcomes.count("ok") + outcomes.count("wrong") + outcomes.count("error")
    assert 2 * judged > len(seeds), f"only {judged} of {len(seeds)} programs compared: {outcomes}"
