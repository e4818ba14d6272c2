"""How symdiff installs: everything under the ``symdiff`` name, and an import that pulls in no GPU
stack, so a user's environment keeps its own ``ir``/``lowering`` modules and the numpy device works
on a machine without a GPU driver."""
import subprocess
import sys
import textwrap
from importlib import metadata

import pytest


def _run(code: str) -> str:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          check=True, cwd="/").stdout.strip()


def test_distribution_installs_only_the_symdiff_package():
    # setuptools writes the distribution's importable top-level names here, editable or not.
    assert metadata.distribution("symdiff-slang").read_text("top_level.txt").split() == ["symdiff"]
    top_level = _run("""
        import importlib.util
        print(sorted(n for n in ("ir", "lowering") if importlib.util.find_spec(n) is not None))""")
    assert top_level == "[]"


def test_stages_import_under_the_symdiff_namespace():
    files = _run("""
        from symdiff import ir, lowering
        import symdiff.ir.tracer, symdiff.lowering.runtime
        print(ir.__name__, lowering.__name__, symdiff.lowering.runtime.__name__)""")
    assert files == "symdiff.ir symdiff.lowering symdiff.lowering.runtime"


def test_numpy_device_runs_without_slangpy_torch_or_jax():
    # A None entry in sys.modules makes any import of that name fail, as on a machine without them.
    out = _run("""
        import sys
        for name in ("slangpy", "torch", "jax"):
            sys.modules[name] = None
        import numpy as np, symdiff as sd

        n = sd.symbol("n")

        @sd.differentiable_program
        def f(x: sd.f64[n]):
            return np.sum(x * x)

        value, grads = f.value_and_grad(np.arange(3.0), device="numpy")
        print(value, grads["x"].tolist())""")
    assert out == "5.0 [0.0, 2.0, 4.0]"


def test_slang_devices_do_not_import_torch():
    # slangpy's native extension imports torch (seconds, ~190 MB) for a bridge symdiff never uses.
    pytest.importorskip("slangpy")
    out = _run("""
        import sys
        import numpy as np, symdiff as sd
        n = sd.symbol("n")

        @sd.differentiable_program
        def f(x: sd.f32[n]):
            return np.sum(x * x)

        value, grads = f.value_and_grad(np.arange(3.0, dtype=np.float32), device="cpu")
        print(value, grads["x"].tolist(), "torch" in sys.modules)""")
    assert out == "5.0 [0.0, 2.0, 4.0] False"
