"""The external-kernel suite: PolyBench/NPBench kernels (tests/kernels/polybench.py),
differentiated by symdiff w.r.t. every float argument and checked against JAX.

- ``numpy`` device in float64: value and gradients within 1e-9 (relative) of JAX float64.
- every Slang device present in float32: within 10x JAX float32's own error, at least 1e-4.
- kernels symdiff cannot trace must raise symdiff's own error naming the body's line.

A case that hits a known bug is marked ``xfail(strict=True)`` in the registry (``Kernel.xfail``,
per device) with the bug's name, so that it fails (XPASS) once the bug is fixed and the mark
must go.  JAX's results come from ``jax_reference.npz`` (see kernel_oracle.py).
"""
from __future__ import annotations

import functools
import inspect
import types

import numpy as np
import pytest

from symdiff import ir
from symdiff import lowering
import symdiff as sd
from symdiff.errors import DifferentiationError
from symdiff.program import ProgramError

from kernel_oracle import DTYPES as DTYPES_STORED, assert_matches, reference, rounded_inputs, stored
from polybench import KERNELS, Kernel

DEVICES = ("numpy", "cpu", "vulkan", "cuda")   # Slang devices absent here are skipped
# Errors a user may get from a program symdiff cannot run: symdiff's own, never numpy's or sympy's.
SYMDIFF_ERRORS = (ir.TraceError, DifferentiationError, ProgramError, lowering.LoweringError)

TRACED = [k for k in KERNELS if k.refused is None]
REFUSED = [k for k in KERNELS if k.refused is not None]


@functools.lru_cache(maxsize=None)
def program(kernel: Kernel, dtype_name: str) -> sd.DifferentiableProgram:
    """The kernel's body as a ``@differentiable_program`` with ``sd.f32``/``sd.f64`` annotations
    (one per dtype, shared by the devices so each is traced and differentiated once)."""
    spec = {"float32": sd.f32, "float64": sd.f64}[dtype_name]
    body = kernel.body
    fn = types.FunctionType(body.__code__, body.__globals__, body.__name__, body.__defaults__, body.__closure__)
    specs = {n: sd.i32 if n in kernel.indices else spec for n in kernel.shapes}
    fn.__annotations__ = {n: (specs[n][s] if s else specs[n]) for n, s in kernel.shapes.items()}
    return sd.differentiable_program(fn)


def _case(kernel: Kernel, device: str):
    marks = [pytest.mark.vulkan] if device == "vulkan" else []
    if device in kernel.xfail:
        marks.append(pytest.mark.xfail(strict=True, reason=kernel.xfail[device]))
    return pytest.param(kernel, device, marks=marks, id=f"{kernel.name}-{device}")


@pytest.mark.parametrize("kernel", TRACED, ids=lambda k: k.name)
def test_jax_twin_matches_numpy(kernel):
    """The oracle is checked first: the JAX twin's float64 value equals plain numpy running the body."""
    inputs = {n: v.copy() for n, v in kernel.inputs().items()}
    with np.errstate(all="raise"):
        want = float(kernel.body(*inputs.values()))
    got = reference(kernel, "float64")["value"]
    assert abs(got - want) <= 1e-10 * max(1.0, abs(want)), (got, want)


@pytest.mark.parametrize("kernel,device", [_case(k, d) for k in TRACED for d in DEVICES])
def test_value_and_grad_matches_jax(kernel, device):
    if device != "numpy" and device not in lowering.available_devices():
        pytest.skip(f"no {device} device here")
    dtype_name = "float64" if device == "numpy" else "float32"
    inputs = reference(kernel, dtype_name)["inputs"]
    value, grads = program(kernel, dtype_name).value_and_grad(*inputs.values(), wrt=kernel.floats,
                                                              device=device)
    assert_matches(kernel, dtype_name, value, grads)


def _refused_line(kernel: Kernel) -> str:
    """``polybench.py:LINE`` of the body's line marked ``# refused``."""
    lines, first = inspect.getsourcelines(kernel.body)
    marked = [first + k for k, line in enumerate(lines) if line.rstrip().endswith("# refused")]
    assert len(marked) == 1, f"{kernel.name}: mark exactly one line of the body with '# refused'"
    return f"{inspect.getsourcefile(kernel.body).rsplit('/', 1)[-1]}:{marked[0]}"


@pytest.mark.parametrize("kernel", REFUSED, ids=lambda k: k.name)
def test_refused_with_a_clear_error(kernel):
    """A kernel symdiff cannot trace raises symdiff's error type naming the user's line."""
    inputs = rounded_inputs(kernel, "float32")
    with pytest.raises(SYMDIFF_ERRORS) as caught:
        program(kernel, "float32").value_and_grad(*inputs.values(), wrt=kernel.floats, device="numpy")
    error = caught.value
    assert type(error).__name__ == kernel.refused.error, f"{type(error).__name__}: {error}"
    assert _refused_line(kernel) in str(error), str(error)
    assert kernel.refused.says in str(error), str(error)


@pytest.mark.parametrize("kernel", TRACED, ids=lambda k: k.name)
def test_stored_references_are_current(kernel):
    """jax_reference.npz holds JAX's results for the kernels as they are written now."""
    stale = [d for d in DTYPES_STORED if stored(kernel, d) is None]
    assert not stale, (f"{kernel.name}: stored JAX reference stale for {stale}; "
                       "run python tests/kernels/kernel_oracle.py")
