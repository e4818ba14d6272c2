"""Static buffer assignment (lowering.buffer_plan): versions with disjoint
lifetimes share a slot, overlapping ones never do, and a shared program
computes what the numpy interpreter computes."""
import jax
import jax.numpy as jnp
import numpy as np
import symdiff as sd
from symdiff import lowering
from symdiff.lowering.buffer_plan import assign, launches_of
from symdiff.lowering.codegen import KernelEntry
from symdiff.lowering.plan import plan

jax.config.update("jax_enable_x64", True)


def _kernels(*uses: tuple[str, ...]) -> list[KernelEntry]:
    return [KernelEntry(f"k{n}", n, 8, {a.replace("#", "_"): a for a in used}) for n, used in enumerate(uses)]


def _live_together(kernels, a, b) -> bool:
    spans = {x: [n for n, k in enumerate(kernels) if x in k.buffers.values()] for x in (a, b)}
    return not (max(spans[a]) < min(spans[b]) or max(spans[b]) < min(spans[a]))


def test_disjoint_lifetimes_share_and_overlapping_do_not():
    # a -> b -> c -> d, each read only by the next kernel: a and c, b and d can take turns
    kernels = _kernels(("a#0",), ("a#0", "b#0"), ("b#0", "c#0"), ("c#0", "d#0"))
    sizes = {"a#0": 400, "b#0": 800, "c#0": 400, "d#0": 100}
    plan = assign(launches_of(kernels, sequential=False), sizes, set(sizes), cleared=set())
    for x in sizes:
        for y in sizes:
            if x < y and plan.slot_of[x] == plan.slot_of[y]:
                assert not _live_together(kernels, x, y), (x, y)
    assert len(plan.slot_bytes) == 2
    assert plan.peak_bytes == 400 + 800  # each slot sized for its largest tenant
    assert plan.saved_bytes == sum(sizes.values()) - plan.peak_bytes


def test_only_shareable_versions_share():
    kernels = _kernels(("a#0",), ("b#0",), ("c#0",))
    sizes = {"a#0": 64, "b#0": 64, "c#0": 64}
    plan = assign(launches_of(kernels, sequential=False), sizes, {"a#0", "c#0"}, cleared=set())
    assert plan.slot_of == {"a#0": 0, "c#0": 0}
    assert plan.own_bytes == {"b#0": 64}


def test_a_cleared_version_lives_from_the_start_of_its_launch():
    # sequential target: consecutive kernels are one launch, and the runtime clears
    # b before that launch, while a is still in use by kernel 0 of the same launch
    kernels = _kernels(("a#0",), ("b#0",))
    sizes = {"a#0": 64, "b#0": 64}
    together = assign(launches_of(kernels, sequential=True), sizes, set(sizes), cleared={"b#0"})
    assert together.slot_of["a#0"] != together.slot_of["b#0"]
    apart = assign(launches_of(kernels, sequential=True), sizes, set(sizes), cleared=set())
    assert apart.slot_of["a#0"] == apart.slot_of["b#0"]  # a kernel's own store: kernels run in order


@sd.differentiable_program
def relaxation(a: sd.f32[24, 24]):
    """Three stencil steps with a column max and exp: many kernels, many
    versions read by one later kernel each (forward and backward)."""
    for _ in range(3):
        b = np.copy(a)
        b[1:-1, 1:-1] = 0.2 * (a[1:-1, 1:-1] + a[:-2, 1:-1] + a[2:, 1:-1] + a[1:-1, :-2] + a[1:-1, 2:])
        a = np.exp(-b) + np.max(b, axis=0)
    return np.sum(a * a)


def test_shared_buffers_give_the_interpreters_gradients(device):
    a = np.random.default_rng(3).standard_normal((24, 24)).astype(np.float32)
    want_value, want = relaxation.value_and_grad(a, device="numpy")
    for _ in range(2):  # the second call reuses the slots the first one left dirty
        value, grads = relaxation.value_and_grad(a, device=device)
        np.testing.assert_allclose(value, want_value, rtol=1e-5)
        np.testing.assert_allclose(grads["a"], want["a"], rtol=1e-4, atol=1e-6)
    stats = next(s for s in relaxation.stats().values() if s["device"] == device)
    assert stats["saved_bytes"] > 0, stats
    assert stats["peak_bytes"] > 0


def test_launches_skip_kernels_without_threads():
    kernels = _kernels(("a#0",), ("b#0",))
    kernels[0].threads = 0
    assert [[e.name for e in run] for run in launches_of(kernels, sequential=False)] == [["k1"]]



def _layer_norm(xp, x, g, b):
    mu = xp.mean(x, axis=-1, keepdims=True)
    var = xp.mean((x - mu) ** 2, axis=-1, keepdims=True)
    y = (x - mu) / xp.sqrt(var + 1e-5) * g + b
    return xp.mean(y * y * 0.5 + y)


def _layer_norm_np(x: sd.f32[64, 256], g: sd.f32[256], b: sd.f32[256]):
    return _layer_norm(np, x, g, b)


def test_layer_norm_recomputes_values_built_on_row_statistics(device):
    """Layer norm's normalised x, its scaled output and the reverse pass's
    values built on them read one element of ``x - mu`` and values shared
    along a row or a column (``inlining.streamed``): a GPU recomputes them,
    and so does the CPU device where they are arithmetic
    (``rematerialise.cheap_on_gpu``).  Each device's plan stores at most three
    arrays of x's size besides x and its gradient (six before on both; neither
    ``x - mu`` nor the quotient).  Gradients vs JAX in float64."""
    rng = np.random.default_rng(7)
    args = [rng.standard_normal(s).astype(np.float32) for s in ((64, 256), (256,), (256,))]
    program = sd.differentiable_program(_layer_norm_np)
    value, grads = program.value_and_grad(*args, device=device)
    want_value, want = jax.jit(jax.value_and_grad(lambda *a: _layer_norm(jnp, *a), argnums=(0, 1, 2)))(
        *(a.astype(np.float64) for a in args))
    np.testing.assert_allclose(value, want_value, rtol=1e-5)
    for name, w in zip("xgb", want):
        np.testing.assert_allclose(grads[name], w, rtol=1e-4, atol=1e-7, err_msg=name)
    graph = next(e for e in program._executables.values() if e.graph.meta.get("gradients")).graph
    p = plan(graph, {}, lowering.backends.of(device).target())
    full = {a for a in p.buffers if p.graph.containers[p.graph.node(a).container].shape == (64, 256)}
    assert len(full - {"x#0", "grad_x#0"}) <= 3 and not {"subtract#0", "divide#0"} & full, sorted(full)


@sd.differentiable_program
def _tanh_x(x):
    return np.mean(np.tanh(x) * x)


@sd.differentiable_program
def _neighbours(x):
    return np.sum(np.tanh(x[1:]) * x[:-1])


@sd.differentiable_program
def _product(x, w):
    return np.sum(np.tanh(x * w))


@sd.differentiable_program
def _row_sums(x):
    return np.sum(np.tanh(np.sum(x, axis=1)))


def _upload_of(program) -> dict[str, str]:
    """Which versions the CPU device's plan writes into an argument's upload buffer."""
    return lowering.planned_buffers(program.backward_graph(), "cpu", {}).upload_of


def _jax_value_and_grad(f, x):
    return jax.jit(jax.value_and_grad(lambda v: f(jnp, v)))(x.astype(np.float64))


def test_a_gradient_is_written_over_the_upload_of_x_never_over_the_callers_x():
    """mean(tanh(x) * x): the gradient kernel reads x at each point before it
    stores the gradient there, so the gradient takes x's upload buffer
    (lowering.buffer_plan.into_uploads) and the call allocates nothing else of
    x's size.  The caller's x, host array or device array, is never written;
    a gradient the caller still holds is not written by the next call, nor by
    a recorded one (``Executable.record``, a loop's) uploading x.  Values
    and gradients vs JAX in float64.  (300001 elements: rows with a tail, and a
    gradient over READ_PACKED_BYTES, handed over as its buffer.)"""
    x = np.random.default_rng(5).standard_normal(300_001).astype(np.float32)
    kept = x.copy()
    f = lambda xp, v: xp.mean(xp.tanh(v) * v)  # noqa: E731
    value, grads = _tanh_x.value_and_grad(x, device="cpu")
    assert _upload_of(_tanh_x) == {"grad_x#0": "x#0", "out#0": "seed_out#0"}  # (the value: over the seed)
    np.testing.assert_array_equal(x, kept)
    want_value, want = _jax_value_and_grad(f, x)
    np.testing.assert_allclose(value, want_value, rtol=1e-5)
    np.testing.assert_allclose(grads["x"], want, rtol=1e-5, atol=1e-12)
    first = grads["x"].copy()
    value, again = _tanh_x.value_and_grad(x[::-1].copy(), device="cpu")  # the first gradient still held
    np.testing.assert_array_equal(grads["x"], first)
    np.testing.assert_allclose(again["x"], want[::-1], rtol=1e-5, atol=1e-12)
    held = again["x"].copy()
    (exe,) = [e for e in _tanh_x._executables.values() if e.device == "cpu"]  # a loop records its calls
    dev = lowering.backends.of("cpu").device()
    enc = dev.create_command_encoder()
    recorded, enc = exe.record(enc, {"x": x, **{s: np.ones((), np.float32) for s in exe.graph.meta["seeds"].values()}})
    dev.wait_for_submit(dev.submit_command_buffer(enc.finish()))
    np.testing.assert_array_equal(again["x"], held)
    np.testing.assert_allclose(np.asarray(recorded[exe.graph.meta["gradients"]["x"]]), want, rtol=1e-5, atol=1e-12)
    on_device = lowering.asarray(x, device="cpu")
    for arrays in (False, True):
        value, grads = _tanh_x.value_and_grad(on_device, device="cpu", device_arrays=arrays)
        np.testing.assert_array_equal(np.asarray(on_device), kept)
        np.testing.assert_allclose(np.asarray(grads["x"]), want, rtol=1e-5, atol=1e-12)
    np.testing.assert_array_equal(x, kept)


def test_a_gradient_reading_neighbours_of_x_keeps_a_buffer_of_its_own():
    """The gradient at i reads x at i - 1 and i + 1 (other points' elements):
    written over x's upload it would read gradients, so it keeps its own buffer."""
    x = np.random.default_rng(6).standard_normal(4097).astype(np.float32)
    f = lambda xp, v: xp.sum(xp.tanh(v[1:]) * v[:-1])  # noqa: E731
    value, grads = _neighbours.value_and_grad(x, device="cpu")
    want_value, want = _jax_value_and_grad(f, x)
    np.testing.assert_allclose(value, want_value, rtol=1e-5)
    np.testing.assert_allclose(grads["x"], want, rtol=1e-5, atol=1e-6)
    assert "grad_x#0" not in _upload_of(_neighbours)


def test_each_gradient_finds_the_upload_its_kernel_is_done_reading():
    """sum(tanh(x * w)): the gradient of x (tanh' * w) is stored before the
    gradient of w reads x, so it can only go over w's upload, and the gradient
    of w over x's: both gradients take an upload (matched, not first come).
    Inputs unchanged; gradients vs JAX in float64."""
    rng = np.random.default_rng(8)
    x, w = (rng.standard_normal(4097).astype(np.float32) for _ in range(2))
    kept = x.copy(), w.copy()
    value, grads = _product.value_and_grad(x, w, device="cpu")
    want_value, want = jax.jit(jax.value_and_grad(lambda a, b: jnp.sum(jnp.tanh(a * b)), argnums=(0, 1)))(
        x.astype(np.float64), w.astype(np.float64))
    np.testing.assert_allclose(value, want_value, rtol=1e-5)
    for name, expected in zip("xw", want):
        np.testing.assert_allclose(grads[name], expected, rtol=1e-5, atol=1e-6, err_msg=name)
    np.testing.assert_array_equal(x, kept[0])
    np.testing.assert_array_equal(w, kept[1])
    assert _upload_of(_product) == {"grad_x#0": "w#0", "grad_w#0": "x#0", "out#0": "seed_out#0"}


def test_a_row_kernel_writes_the_gradient_over_x_in_a_later_loop_over_the_row():
    """sum(tanh(x.sum(axis=1))): one row kernel, whose thread sums its row of
    x in a first loop and stores the row's gradient in a later one, reading
    no x there: the sums are done with the row before it is written over.
    x unchanged; gradients vs JAX in float64."""
    x = np.random.default_rng(9).standard_normal((64, 48)).astype(np.float32)
    kept = x.copy()
    value, grads = _row_sums.value_and_grad(x, device="cpu")
    want_value, want = _jax_value_and_grad(lambda xp, v: xp.sum(xp.tanh(xp.sum(v, axis=1))), x)
    np.testing.assert_allclose(value, want_value, rtol=1e-5)
    np.testing.assert_allclose(grads["x"], want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(x, kept)
    assert _upload_of(_row_sums) == {"grad_x#0": "x#0", "out#0": "seed_out#0"}
