"""Export a program's forward + backward as a standalone Slang module and run it
with plain slangpy (no symdiff at run time), on slangpy's CPU device.

Run:  python examples/export_slang.py [out.slang]

The module's header comment documents its buffers and the dispatch order;
``program.export_slang`` returns the same facts as a manifest, which
``run_exported`` below follows: create one buffer per manifest entry, upload
the arguments and the seed (1 for a scalar loss), dispatch every entry point
in order (on the CPU target: its one ``run_all`` entry point), read the
gradients.
"""
import sys
import tempfile
from pathlib import Path

import numpy as np
import slangpy as spy

import symdiff as sd

BATCH, IN, OUT = 8, 5, 3

NUMPY_TYPES = {"float": np.float32, "double": np.float64, "int": np.int32}


@sd.differentiable_program
def regression(x: sd.f32[BATCH, IN], w: sd.f32[IN, OUT], b: sd.f32[OUT], y: sd.f32[BATCH, OUT]):
    pred = np.tanh(x @ w + b)
    return np.mean((pred - y) ** 2) + 0.01 * np.sum(w * w)


def run_exported(device: spy.Device, source: str, manifest: dict, inputs: dict[str, np.ndarray]) -> dict:
    """Run an exported module once: ``inputs`` holds the arguments and seeds by
    program name; returns every result and gradient by program name."""
    module = device.load_module_from_source(f"exported_{manifest['program']}_{abs(hash(source))}", source)
    buffers = {}
    for param, info in manifest["buffers"].items():
        count = max(1, int(np.prod(info["shape"])))
        buffers[param] = device.create_buffer(
            size=count * np.dtype(NUMPY_TYPES[info["type"]]).itemsize,
            usage=spy.BufferUsage.shader_resource | spy.BufferUsage.unordered_access)
    for name, param in {**manifest["arguments"], **manifest["seeds"]}.items():
        dtype = NUMPY_TYPES[manifest["buffers"][param]["type"]]
        buffers[param].copy_from_numpy(np.ascontiguousarray(inputs[name], dtype=dtype).reshape(-1))
    encoder = device.create_command_encoder()
    # the documented order; a CPU export can run it all in one dispatch instead
    steps = [manifest["run_all"]] if "run_all" in manifest else manifest["dispatch"]
    for step in steps:
        kernel = device.create_compute_kernel(device.link_program([module], [module.entry_point(step["entry"])]))
        kernel.dispatch(thread_count=step["thread_count"], command_encoder=encoder,
                        **step.get("uniforms", {}), **{param: buffers[b] for param, b in step["buffers"].items()})
    device.submit_command_buffer(encoder.finish())
    device.wait()
    out = {}
    for name, param in {**manifest["results"], **manifest["gradients"]}.items():
        info = manifest["buffers"][param]
        raw = buffers[param].to_numpy().view(NUMPY_TYPES[info["type"]])
        out[name] = raw[:max(1, int(np.prod(info["shape"])))].reshape(info["shape"])
    return out


def main(path: str) -> None:
    rng = np.random.default_rng(0)
    inputs = {"x": rng.standard_normal((BATCH, IN)), "w": rng.standard_normal((IN, OUT)) / 2,
              "b": np.full(OUT, 0.1), "y": rng.standard_normal((BATCH, OUT))}
    inputs = {k: v.astype(np.float32) for k, v in inputs.items()}
    exported = regression.export_slang(wrt=["w", "b"], path=path, target="cpu")
    print(f"wrote {path} ({len(exported.source.splitlines())} lines) and its manifest; dispatch order:")
    for step in exported.manifest["dispatch"]:
        print(f"  {step['entry']} {step['thread_count']} ({step['phase']})")

    spy.Logger.get().level = spy.LogLevel.error   # the CPU device warns that it has no shader model
    device = spy.Device(type=spy.DeviceType.cpu)
    ran = run_exported(device, exported.source, exported.manifest, {**inputs, "out": np.ones(())})
    value, grads = regression.value_and_grad(*inputs.values(), wrt=["w", "b"], device="cpu")
    print(f"loss: exported {float(ran['out']):.6f}, program {float(value):.6f}")
    for name in ("w", "b"):
        np.testing.assert_allclose(ran[name], grads[name], rtol=1e-5, atol=1e-6)
        print(f"grad {name}: matches program.grad (max |difference| {np.abs(ran[name] - grads[name]).max():.2e})")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else str(Path(tempfile.mkdtemp()) / "regression.slang"))
