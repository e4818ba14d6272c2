"""Kernels of the same code share one Slang function (``lowering.shared_code``):
unrolled loops whose steps differ only in their buffers, or in small kernels'
integer constants, are checked against JAX in float64 on every Slang device
(twice: the second call reuses the bound buffers), and the key is checked to
tell apart texts that differ in anything but the kernel's own names."""
from dataclasses import replace

import numpy as np
import pytest

import symdiff as sd
from corpus import Case, assert_matches_jax, build_program, set_item
from symdiff.lowering import backends, targets
from symdiff.lowering.codegen import generate
from symdiff.lowering.plan import plan
from symdiff.lowering.shared_code import kernel_code, lift, share

LIFT_MAX_WORK = targets.TUNING.lift_max_work


def _jacobi_steps(xp, a):
    """Whole-array steps: every step's kernels are the previous step's with other buffers."""
    x = xp.sin(a)
    for _ in range(4):
        x = 0.25 * xp.concatenate([x[:1], x[:-2] + 2 * x[1:-1] + x[2:], x[-1:]]) * xp.cos(x)
    return xp.sum(x * x)


def _row_updates(xp, a):
    """Each step updates one row from the row before: the same code, another row number."""
    x = xp.sin(a)
    for i in range(1, 6):
        x = set_item(xp, x, i, x[i] * xp.tanh(x[i - 1]) + 0.5 * x[i - 1])
    return xp.sum(x * x)


def _forward_substitution(xp, a):
    """Dot products of growing length: the loop bound differs between steps."""
    y = xp.sin(a[0])
    for i in range(6):
        y = set_item(xp, y, i, (a[1, i] - a[i, :i] @ y[:i]) / (3.0 + a[i, i] ** 2))
    return xp.sum(y * y)


def _rnn_steps(xp, xs, wx, wh):
    """Register-tiled products per step (unrolled tiles, arrays of sums): the reverse
    steps' kernels differ only in which ``xs[t]`` they read, an offset outside those lines.
    ``xs[t]`` scales the state, so no product is the same each step (``ir.batch_products``)."""
    h = xp.tanh(xs[0] @ wx)
    for t in range(1, 3):
        h = xp.tanh((xs[t] * h) @ wx + h @ wh)
    return xp.sum(h * h)


CASES = {
    "jacobi_steps": Case("jacobi_steps", _jacobi_steps, {"a": (9,)}, ["a"], tol=1e-4),
    "rnn_steps": Case("rnn_steps", _rnn_steps, {"xs": (3, 16, 16), "wx": (16, 16), "wh": (16, 16)}, ["wx", "wh"],
                      tol=1e-4),
    "row_updates": Case("row_updates", _row_updates, {"a": (7, 5)}, ["a"], tol=1e-4),
    "forward_substitution": Case("forward_substitution", _forward_substitution, {"a": (6, 6)}, ["a"], tol=1e-4),
}


def _module(case: Case, device: str):
    """``case``'s module, its products Slang kernels (register tiles) rather than the host's BLAS."""
    program = build_program(sd, case)
    target = replace(targets.of(device), host_blas=False)
    return generate(plan(program.backward_graph(wrt=case.wrt), {}, target), target)


@pytest.mark.parametrize("name", list(CASES))
def test_gradients_match_jax(name, device, monkeypatch):
    case = CASES[name]
    program = build_program(sd, case)
    inputs = case.inputs()
    monkeypatch.setenv("SYMDIFF_DISK_CACHE", "0")  # a plan for the changed target must not be stored
    with backends.targets_changed(lambda target: replace(target, host_blas=False)):  # rnn_steps: shared tiles
        for _ in range(2):
            value, grads = program.value_and_grad(*[np.copy(v) for v in inputs.values()], device=device)
            assert_matches_jax(case, value, grads, inputs)


@pytest.mark.parametrize("device", ["cpu", "vulkan"])
@pytest.mark.parametrize("name", list(CASES))
def test_kernels_share_functions(name, device):
    """Fewer functions than kernels, each written once; a kernel running another's
    function binds its own buffers (and, lifted, passes its own constants)."""
    module = _module(CASES[name], device)
    functions = {k.function for k in module.kernels}
    assert len(functions) < len(module.kernels), name
    for f in functions:
        assert module.source.count(f"void {f}(") == 1
    sharing = [k for k in module.kernels if k.function != k.name]
    assert all(f"void {k.name}(" not in module.source for k in sharing)
    assert any(sorted(k.buffers.values()) != sorted(by.buffers.values()) for k in sharing
               for by in module.kernels if by.name == k.function)
    if name != "jacobi_steps" and (name != "rnn_steps" or device == "cpu"):  # lavapipe's rnn tiles differ more
        assert any(k.constants for k in module.kernels), name


def _key(body, buffers=("a_v0", "b_v1"), tasklets=("add_3",), work=64):
    return kernel_code(body, list(buffers), list(tasklets), ("double",) * len(buffers), work, LIFT_MAX_WORK)


def test_renaming_keeps_what_is_not_the_kernels_own():
    body = "    double add_3_x = a_v0[4*add_3_i0 + 1];\n    b_v1[add_3_i0] = exp_f32(add_3_x);  // add_3 (x.py:1)"
    other = body.replace("add_3", "add_77").replace("a_v0", "q_v9").replace("b_v1", "r_v2").replace("x.py:1", "y")
    assert _key(body).key == _key(other, ("q_v9", "r_v2"), ("add_77",)).key
    assert _key(body).key != _key(body.replace("exp_f32", "log_f32")).key  # a global function
    swapped = "    double add_3_x = b_v1[4*add_3_i0 + 1];\n    a_v0[add_3_i0] = exp_f32(add_3_x);"
    assert _key(body).buffers == ["a_v0", "b_v1"] and _key(swapped).buffers == ["b_v1", "a_v0"]
    # the longest tasklet prefix names a local: add_3_1's x is not add_3's 1_x
    two = "    double add_3_1_x = 1.0l;\n    double add_3_x = add_3_1_x;"
    assert _key(two, tasklets=("add_3", "add_3_1")).key != _key(two, tasklets=("add_3_1", "add_3")).key


def test_only_plain_small_integer_literals_are_lifted():
    body = "    double add_3_x = a_v0[4*add_3_i0 + 1] * 0.25l + 1.e-05l;\n    b_v1[add_3_i0] = add_3_x;"
    assert _key(body).literals == [4, 1]
    assert _key(body).key == _key(body.replace("4*", "7*")).key
    assert lift(body, {0: "constant0"}).startswith("    double add_3_x = a_v0[constant0*add_3_i0 + 1] * 0.25l")
    assert _key(body, work=LIFT_MAX_WORK + 1).key != _key(body.replace("4*", "7*"), work=LIFT_MAX_WORK + 1).key
    fixed = "    float add_3_lanes[8];\n" + body  # an array size must stay a constant, the rest may not
    assert _key(fixed).key != _key(fixed.replace("[8]", "[4]")).key
    assert _key(fixed).key == _key(fixed.replace("4*", "7*")).key
    unrolled = "    [ForceUnroll] for (int lane = 0; lane < 8; lane++) b_v1[lane] = 2;\n" + body  # so must a bound
    assert _key(unrolled).key != _key(unrolled.replace("< 8", "< 4")).key
    assert _key(unrolled).key != _key(unrolled.replace("= 2;", "= 3;")).key  # on that line: kept too
    assert _key(unrolled).key == _key(unrolled.replace("4*", "7*")).key
    scratch = "    groupshared float s[64];\n" + body  # workgroup scratch: every literal stays
    assert not _key(scratch).liftable and _key(scratch).key != _key(scratch.replace("4*", "7*")).key


def test_a_large_kernel_lifts_only_its_offsets():
    """Over ``lift_max_work`` a kernel keeps its strides and loop bounds, but an offset
    added last (an unrolled step's slice of a batched product) is lifted."""
    big = LIFT_MAX_WORK + 1
    body = ("    for (int k = 0; k < 64; k++)\n        acc += a_v0[256*add_3_i0 + k + 16384];\n"
            "    b_v1[add_3_i0 - 1] = acc;")
    assert _key(body, work=big).key == _key(body.replace("16384", "32768"), work=big).key
    assert _key(body, work=big).key == _key(body.replace("i0 - 1]", "i0 - 2]"), work=big).key
    assert _key(body, work=big).key != _key(body.replace("256*", "512*"), work=big).key    # a stride
    assert _key(body, work=big).key != _key(body.replace("k < 64", "k < 32"), work=big).key  # a loop bound
    assert _key(body, work=big).key != _key(body.replace("+ 16384]", "+ 16384*k]"), work=big).key
    scaled = body.replace("k + 16384]", "k + 3*add_3_i0]")  # a factor, not an offset
    assert _key(scaled, work=big).key != _key(scaled.replace("3*", "4*"), work=big).key


def test_only_differing_literals_become_parameters():
    body = "    b_v1[{i}] = a_v0[{i} + 3];"
    codes = [_key(body.format(i=i)) for i in (2, 5)] + [_key(body.format(i=2).replace("+ 3", "+ 4"))]
    runs, lifted, also = share(["k0", "k1", "k2"], codes)
    assert [r.function for r in runs] == ["k0", "k0", "k0"] and also == {"k0": ["k1", "k2"]}
    assert lifted["k0"] == {0: "constant0", 1: "constant1", 2: "constant2"}
    assert [r.constants for r in runs][1] == {"constant0": 5, "constant1": 5, "constant2": 3}
    runs, lifted, _ = share(["k0", "k1"], codes[:2])
    assert lifted["k0"] == {0: "constant0", 1: "constant1"} and runs[1].constants == {"constant0": 5,
                                                                                      "constant1": 5}


def test_a_kernel_running_shared_code_shows_that_codes_header():
    from symdiff.lowering.source_view import kernel_headers
    module = _module(CASES["jacobi_steps"], "cpu")
    headers = kernel_headers(module.source)
    for k in module.kernels:
        if k.function != k.name:
            assert headers[k.name] is headers[k.function] and any(k.name in line for line in headers[k.name])


def test_a_loop_body_sharing_code_runs_recorded(device):
    """``sd.fori_loop`` records its iterations' dispatches (``Executable.record``):
    the body's row updates run one function with lifted constants there too."""
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)  # as corpus.jax_value_and_grad does

    def rows(x):
        for r in range(1, 5):
            x[r] = x[r] * 0.9 + 0.1 * np.tanh(x[r - 1])
        return x

    @sd.differentiable_program
    def sweeps(a: sd.f32[5, 3]):
        return np.sum(sd.fori_loop(0, 3, lambda i, x: rows(x), np.sin(a)) ** 2)

    def reference(a):
        x = jnp.sin(a)
        for _ in range(3):
            for r in range(1, 5):
                x = x.at[r].set(x[r] * 0.9 + 0.1 * jnp.tanh(x[r - 1]))
        return jnp.sum(x ** 2)

    a = np.random.default_rng(2).standard_normal((5, 3)).astype(np.float32)
    value, grad = jax.jit(jax.value_and_grad(reference))(a.astype(np.float64))
    for _ in range(2):
        got_value, got = sweeps.value_and_grad(a, device=device)
        np.testing.assert_allclose(float(got_value), float(value), rtol=1e-5)
        np.testing.assert_allclose(got["a"], np.asarray(grad), rtol=1e-4, atol=1e-6)


def test_worker_wrappers_follow_each_kernels_own_thread_count():
    """A function run by kernels of different thread counts (lifted bounds) that
    are each worth splitting over workers gets a slice wrapper per count."""
    from symdiff import ir
    from symdiff.lowering.codegen import KernelEntry, _program
    g = ir.trace(lambda x: x * 2.0, sd.f32[300000])
    access = f"{g.arguments[0]}#0"
    entries = [KernelEntry("k0_a", 0, 200000, {"x_v0": access}, work=200000, independent=True),
               KernelEntry("k1_b", 1, 300000, {"x_v0": access}, work=300000, independent=True,
                           function="k0_a", constants={"constant0": 3})]
    text, _ = _program(entries, g, targets.of("cpu"))
    assert "k0_a_slice(int s" in text and "k0_a_300000x1_slice(int s" in text
    assert "int64_t(200000) * s" in text and "int64_t(300000) * s" in text
    assert "k0_a_300000x1_workers(min(workers" in text and ", 3)) k0_a_300000x1_slice(0, 1" in text
