"""``program.export_slang``: a standalone module run through plain slangpy
(the example's runner, no symdiff runtime) gives the program's values and
gradients, checked against JAX float64."""
import json
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from symdiff.lowering import backends

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import export_slang as example  # noqa: E402

jax.config.update("jax_enable_x64", True)


def _inputs():
    rng = np.random.default_rng(3)
    return {"x": rng.standard_normal((example.BATCH, example.IN)).astype(np.float32),
            "w": (rng.standard_normal((example.IN, example.OUT)) / 2).astype(np.float32),
            "b": np.full(example.OUT, 0.1, np.float32),
            "y": rng.standard_normal((example.BATCH, example.OUT)).astype(np.float32)}


def _jax_loss(x, w, b, y):
    pred = jnp.tanh(x @ w + b)
    return jnp.mean((pred - y) ** 2) + 0.01 * jnp.sum(w * w)


def test_exported_module_runs_standalone_and_matches_jax(device):
    inputs = _inputs()
    exported = example.regression.export_slang(wrt=["w", "b"], target=device)
    ran = example.run_exported(backends.of(device).device(), exported.source, exported.manifest,
                               {**inputs, "out": np.ones(())})
    f64 = {k: v.astype(np.float64) for k, v in inputs.items()}
    value, (gw, gb) = jax.jit(jax.value_and_grad(_jax_loss, argnums=(1, 2)))(*f64.values())
    assert float(ran["out"]) == pytest.approx(float(value), rel=1e-5)
    np.testing.assert_allclose(ran["w"], np.asarray(gw), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(ran["b"], np.asarray(gb), rtol=1e-4, atol=1e-6)
    program_grads = example.regression.grad(*inputs.values(), wrt=["w", "b"], device=device)
    for name in ("w", "b"):
        np.testing.assert_allclose(ran[name], program_grads[name], rtol=1e-5, atol=1e-7)


def test_header_and_manifest_document_buffers_and_order(tmp_path):
    path = tmp_path / "regression.slang"
    exported = example.regression.export_slang(wrt=["w", "b"], path=str(path), target="cpu")
    assert path.read_text() == exported.source
    assert json.loads((tmp_path / "regression.json").read_text()) == exported.manifest
    m = exported.manifest
    assert m["gradients"] == {"w": "grad_w_v0", "b": "grad_b_v0"} and m["seeds"] == {"out": "seed_out_v0"}
    assert set(m["arguments"]) == {"x", "w", "b", "y"}
    for param, info in m["buffers"].items():
        assert f"//   {param}: {info['type']} {info['shape']} {info['role']}" in exported.source
    for k, step in enumerate(m["dispatch"]):
        assert f"//   {k}. {step['entry']} {step['thread_count']} {step['phase']}" in exported.source
        assert f"void {step['entry']}(" in exported.source
    # grad_w sums two contributions (the fit and the penalty): cleared first, by the module itself
    assert m["dispatch"][0]["entry"] == "clear_grad_w_v0_main"
    assert {s["phase"] for s in m["dispatch"]} >= {"clear", "forward", "backward"}


def test_forward_only_export_has_no_gradients():
    exported = example.regression.export_slang(target="vulkan", forward_only=True)
    assert exported.manifest["gradients"] == {} and exported.manifest["seeds"] == {}
    assert {s["phase"] for s in exported.manifest["dispatch"]} <= {"forward", "clear", "fill"}


def test_gather_with_bounds_flag_and_size_symbols():
    """A scatter-add gradient and the bounds flag start at zero through the
    module's own clears; size symbols are bound by ``sizes``."""
    import symdiff as sd
    target = "vulkan" if "vulkan" in backends.available_devices() else "cpu"
    batch = sd.symbol("B")

    @sd.differentiable_program
    def embed(table: sd.f32[10, 3], idx: sd.i32[batch], w: sd.f32[3]):
        return np.sum(np.tanh(table[idx] * w[None, :]))

    rng = np.random.default_rng(5)
    table = rng.standard_normal((10, 3)).astype(np.float32)
    idx = np.array([1, 3, 3, 9, 0], np.int32)
    w = rng.standard_normal(3).astype(np.float32)
    exported = embed.export_slang(wrt=["table", "w"], target=target, sizes={"B": 5})
    entries = [s["entry"] for s in exported.manifest["dispatch"]]
    assert "clear_grad_table_v0_main" in entries and "clear_symdiff_bounds_main" in entries
    ran = example.run_exported(backends.of(target).device(), exported.source, exported.manifest,
                               {"table": table, "idx": idx, "w": w, "out": np.ones(())})
    expected = jax.jit(jax.grad(lambda t, w: jnp.sum(jnp.tanh(t[idx] * w[None, :])), argnums=(0, 1)))(
        table.astype(np.float64), w.astype(np.float64))
    np.testing.assert_allclose(ran["table"], np.asarray(expected[0]), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(ran["w"], np.asarray(expected[1]), rtol=1e-4, atol=1e-6)


def test_jvp_entry_points_by_exporting_the_jvp_program():
    """A forward-mode module is the export of ``jvp_program()``: its output is
    the directional derivative, here checked against JAX's jvp."""
    target = "vulkan" if "vulkan" in backends.available_devices() else "cpu"
    inputs = _inputs()
    tangent = np.random.default_rng(8).standard_normal(inputs["w"].shape).astype(np.float32)
    exported = example.regression.jvp_program(tangent_of=["w"]).export_slang(forward_only=True, target=target)
    assert exported.manifest["arguments"]["t_w"] == "t_w_v0"
    ran = example.run_exported(backends.of(target).device(), exported.source, exported.manifest,
                               {**inputs, "t_w": tangent})
    f64 = {k: v.astype(np.float64) for k, v in inputs.items()}
    _, expected = jax.jvp(jax.jit(lambda w: _jax_loss(f64["x"], w, f64["b"], f64["y"])), (f64["w"],),
                          (tangent.astype(np.float64),))
    (name,) = exported.manifest["results"]
    assert float(ran[name]) == pytest.approx(float(expected), rel=1e-4, abs=1e-6)


def test_kernels_sharing_code_bind_their_own_buffers_and_constants(device):
    """An unrolled loop's kernels run shared functions (``lowering.shared_code``):
    the manifest binds each dispatch's own buffers to the entry point it runs and
    passes its own constants; the module run standalone matches JAX."""
    import symdiff as sd

    @sd.differentiable_program
    def sweep(a: sd.f32[6, 4]):
        x = np.sin(a)
        for i in range(1, 6):
            x[i] = x[i] * np.tanh(x[i - 1]) + 0.5 * x[i - 1]
        return np.sum(x * x)

    def reference(a):
        x = jnp.sin(a)
        for i in range(1, 6):
            x = x.at[i].set(x[i] * jnp.tanh(x[i - 1]) + 0.5 * x[i - 1])
        return jnp.sum(x * x)

    a = np.random.default_rng(4).standard_normal((6, 4)).astype(np.float32)
    exported = sweep.export_slang(wrt=["a"], target=device)
    dispatch = exported.manifest["dispatch"]
    assert any(d["uniforms"] for d in dispatch)
    assert len({d["entry"] for d in dispatch}) < len(dispatch)
    ran = example.run_exported(backends.of(device).device(), exported.source, exported.manifest,
                               {"a": a, "out": np.ones(())})
    np.testing.assert_allclose(ran["a"], np.asarray(jax.jit(jax.grad(reference))(a.astype(np.float64))), rtol=1e-4, atol=1e-6)
