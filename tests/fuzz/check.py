"""Run one generated program on one device and judge it against JAX.

The numpy device runs the program with float64 specs and must match JAX
float64 closely; a Slang device runs float32 specs and may differ from JAX
float64 by at most ``max(SLACK * |JAX32 - JAX64|, FLOOR * scale)`` per
compared quantity (the value and each float input's gradient), i.e. relative to
the error JAX float32 itself makes on the same program.

Outcomes: ``ok``, ``wrong`` (a quantity out of tolerance, or NaN where JAX has
none), ``refused`` (a deliberate symdiff error type: the program was rejected
with a message), ``error`` (any other exception: a bug), ``invalid`` (JAX
itself fails or gives a non-finite float64 reference: a generator problem, not
counted against symdiff).  ``crash`` is decided by the runner (the process died
after the JAX reference was known; a death inside XLA while computing the
reference is ``invalid``: the oracle failed, not symdiff).
"""
from __future__ import annotations

import contextlib
import linecache
import traceback
from dataclasses import dataclass, field, replace

import ml_dtypes
import numpy as np

from .gen import Program, make_inputs

SLACK = 10.0        # times JAX float32's own error
FLOOR32 = 2e-5      # relative to the quantity's magnitude (max |ref|, at least 1)
# lavapipe's float32 asin/acos/log1p/expm1/sinh/asinh... are 1e-4-accurate (the Vulkan spec allows it;
# /work/findings/bugs.md "lavapipe ... transcendentals"): a wider floor there, still far below a wrong gradient
FLOOR32_DEVICE = {"vulkan": 1e-3}
RTOL64 = 1e-9       # numpy device (float64) against JAX float64: rounding is ~1e-16, so more is a wrong formula
# "vulkan+gpu-form": lavapipe running the code a hardware GPU gets (workgroup
# reductions, recomputed transcendentals: lowering.targets), which lavapipe's own
# target does not choose for speed; so campaigns here check the GPU kernels' logic.
GPU_FORM = "+gpu-form"
# "vulkan+tensor-form": the GPU form with CUDA's tensor-core products (lowering.kernels.
# tensor_tiles, the instruction's plain-Slang stand-in on lavapipe) at every product of
# every size, each program at matmul_precision="tf32" with the rounding to TF32 left out,
# so that a product differs from float32 only in its order of sums: the float32 oracle then
# checks the form's tiles, fragments, edges and fused epilogues on every program.
TENSOR_FORM = "+tensor-form"
# "vulkan+coop-form+f16": the GPU form with a Vulkan GPU's cooperative-matrix products
# (lowering.kernels.coop_tiles, their plain-Slang stand-in on lavapipe) at every product
# of two 16-bit arguments of every size (with +f16 or +bf16: other products keep the exact
# forms), so the float32 oracle checks that form's tiles, layouts, edges and epilogues.
COOP_FORM = "+coop-form"
# "cpu+recompute" (any device + "+recompute"): every value lowering.rematerialise can
# recompute is recomputed where it is read, as the tightest memory budget would
# choose (symdiff.memory_budget), so campaigns check that rewrite on every program.
RECOMPUTE = "+recompute"
# "cpu+bf16", "vulkan+f16" (any device + one of these): the program's float arguments in a
# 16-bit format (ir.storage: float32 arithmetic, each result and gradient rounded once to the
# format).  JAX judges it on the same rounded arguments, and each element may be off by half
# the format's spacing more than a float32 program; a program whose exact results leave the
# format's range is invalid for the variant.
HALVES = {"+f16": "float16", "+bf16": "bfloat16"}


def base_device(device: str) -> str:
    """The real device under a campaign's variants (``cpu+recompute`` -> ``cpu``)."""
    return device.split("+", 1)[0]


def storage_of(device: str) -> str | None:
    """The 16-bit format a campaign's variant gives the arguments (``HALVES``), or None."""
    return next((fmt for suffix, fmt in HALVES.items() if device.endswith(suffix)), None)

JAX_PRELUDE = '''
def _abs(x):
    """|x| with abs'(0) = 0, symdiff's documented convention (JAX's is 1)."""
    return jnp.sign(x) * x

def _bc(x, axes, nd):
    """x's axes stand for the sd.map domain axes `axes`: broadcastable to the domain."""
    order = sorted(range(len(axes)), key=lambda t: axes[t])
    if order != list(range(len(axes))):
        x = jnp.transpose(x, order)
    srt = sorted(axes)
    return jnp.reshape(x, tuple(x.shape[srt.index(d)] if d in srt else 1 for d in range(nd)))
'''


@dataclass
class Result:
    seed: int
    device: str
    outcome: str
    detail: str = ""
    worst: dict = field(default_factory=dict)   # quantity, err, tol

    def as_dict(self) -> dict:
        return {"seed": self.seed, "device": self.device, "outcome": self.outcome, "detail": self.detail,
                "worst": self.worst}


def refusal_types() -> tuple[type, ...]:
    """symdiff's deliberate errors: a clear refusal, not a crash inside a dependency."""
    from symdiff import ir
    from symdiff import lowering
    import symdiff
    from symdiff.ir.tracer.errors import TraceError
    from symdiff.lowering.runtime import UnsupportedOnDevice
    return (TraceError, symdiff.ProgramError, symdiff.DifferentiationError, UnsupportedOnDevice,
            getattr(ir, "IndexOutOfRange", ()), getattr(lowering, "DeviceUnavailable", ()))


def _exec(source: str, filename: str, ns: dict):
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), ns)


def build_symdiff(prog: Program, float64: bool, storage: str | None = None):
    import symdiff as sd
    ns = {"np": np, "sd": sd, "F": sd.f64 if float64 else sd.ArraySpec(storage) if storage else sd.f32}
    _exec(prog.numpy_source(), f"<fuzz seed {prog.seed}>", ns)
    return ns["prog"]


def build_jax(prog: Program, dtype):
    import jax.numpy as jnp
    ns = {"jnp": jnp, "DT": dtype}
    _exec(JAX_PRELUDE + prog.jax_source(), f"<fuzz jax seed {prog.seed}>", ns)
    return ns["prog_jax"]


def cotangent(prog: Program) -> np.ndarray:
    """A second-order program's cotangent: exact in float32 and in both 16-bit formats
    (bfloat16's 8 significant bits, nothing below float16's normal range), so that every
    variant's program and JAX get the same one (``HALVES``)."""
    rng = np.random.default_rng([prog.seed, 99])
    v = rng.standard_normal(prog.floats[prog.second]).astype(ml_dtypes.bfloat16).astype(np.float32)
    return np.where(np.abs(v) < 2.0 ** -14, np.float32(0), v)


_REFERENCES: dict = {}   # one worker judging a program on several devices asks JAX once


def jax_reference(prog: Program, inputs: dict, dtype, eager: bool = False) -> dict[str, np.ndarray]:
    """``{"value": ..., "grad:x": ...}`` from JAX at ``dtype`` (second order:
    ``value`` is d/d second and the gradients are its vjp with the cotangent).

    Compiled by ``jax.jit`` with most of XLA's optimisations off (compile time
    dominates on these small programs), or op by op (``eager``).  A compiled
    XLA program recomputes a maximum's operand where its gradient tests for
    ties, optimised or not, and so gets max/min gradients NaN or misplaced where
    the recomputation rounds differently (symdiff's own issue 29; seeds 3, 4,
    67 and 1045 of the model-shaped generator: central differences and eager
    JAX agree with symdiff there).  ``check`` judges against the eager answer
    where the compiled one is not finite or disagrees."""
    key = (prog.jax_source(), prog.seed, prog.edge, prog.second, repr(prog.floats), repr(prog.indices),
           np.dtype(dtype).name, eager)
    if key not in _REFERENCES:
        if len(_REFERENCES) > 8:
            _REFERENCES.clear()
        _REFERENCES[key] = _jax_reference(prog, inputs, dtype, eager)
    return _REFERENCES[key]


def _jax_reference(prog: Program, inputs: dict, dtype, eager: bool) -> dict[str, np.ndarray]:
    import jax
    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_disable_most_optimizations", True)
    if eager:
        with jax.disable_jit():
            return _jax_reference(prog, inputs, dtype, eager=False)
    import jax.numpy as jnp
    fn = build_jax(prog, dtype)
    names = list(prog.floats)
    fl = [jnp.asarray(inputs[n], dtype=dtype) for n in names]
    ix = [jnp.asarray(inputs[n], dtype=jnp.int32) for n in prog.indices]

    def f(*xs):
        return fn(*xs, *ix)

    if prog.second is None:
        v, g = jax.jit(jax.value_and_grad(f, argnums=tuple(range(len(names)))))(*fl)
    else:
        inner = jax.grad(f, argnums=names.index(prog.second))

        def second(ct, *xs):
            v, pull = jax.vjp(inner, *xs)
            return v, pull(ct)
        v, g = jax.jit(second)(jnp.asarray(cotangent(prog), dtype=dtype), *fl)
    out = {"value": np.asarray(v, np.float64)}
    out.update({f"grad:{n}": np.asarray(x, np.float64) for n, x in zip(names, g)})
    return out


@contextlib.contextmanager
def gpu_form():
    """Every device's target with a GPU's performance choices, for the duration;
    and workgroups for loops and point counts as small as the generator's
    (a GPU takes them from 64 elements and 2048 points: lowering.workgroups)."""
    from symdiff.lowering import backends
    with backends.targets_changed(lambda t: replace(
            t, workgroup_reductions=True, recompute_transcendentals=True,
            tuning=replace(t.tuning, workgroup_min_loop=2, workgroup_few_points=4))):
        yield


@contextlib.contextmanager
def tensor_form():
    """``gpu_form`` with tensor cores at every product (small tiles, no least
    size) and every program at ``matmul_precision="tf32"``, its operands not
    rounded (``TENSOR_FORM``), for the duration."""
    import symdiff as sd
    from symdiff.lowering import backends
    from symdiff.lowering.kernels import precision, tensor_tiles
    own_staged, own_precision = tensor_tiles.TensorTiles.staged, precision.current()
    tensor_tiles.TensorTiles.staged = lambda self, w, gt, value: value
    sd.set_matmul_precision("tf32")
    try:
        with tensor_cores(backends.cuda.TARGET.tensor_cores, tensor_tile=(32, 32), tensor_warps=(2, 4),
                          tensor_tile_k=8):
            yield
    finally:
        tensor_tiles.TensorTiles.staged = own_staged
        sd.set_matmul_precision(own_precision)


@contextlib.contextmanager
def coop_form():
    """``gpu_form`` with the cooperative-matrix form's stand-in at every product
    of two 16-bit arguments (``COOP_FORM``), for the duration."""
    from symdiff.lowering import targets
    cores = targets.TensorCores(targets.COOPERATIVE_MATRIX, frozenset({"float16", "bfloat16"}), stand_in=True)
    with tensor_cores(cores, tensor_tile=(64, 32), tensor_warps=(4, 2), tensor_tile_k=16):
        yield


@contextlib.contextmanager
def tensor_cores(cores, **tiles):
    """``gpu_form`` with matrix units ``cores`` at every product (tiles of
    ``tiles``, narrow ones 128x16, no least size)."""
    from symdiff.lowering import backends
    with gpu_form(), backends.targets_changed(lambda t: replace(t, tensor_cores=cores, tuning=replace(
            t.tuning, min_tiled_outputs=1, tensor_narrow_tile=(128, 16), tensor_narrow_warps=(8, 1), **tiles))):
        yield


@contextlib.contextmanager
def recompute_everything():
    """Every plan made for the duration recomputes all it can where it is read."""
    from symdiff.lowering import cost_model, rematerialise, runtime
    own = runtime.plan

    def everything(graph, sizes, target=None):
        return own(cost_model.with_recomputed(graph, rematerialise.candidates(graph)), sizes, target)
    runtime.plan = everything
    try:
        yield
    finally:
        runtime.plan = own


def symdiff_result(prog: Program, inputs: dict, device: str, storage: str | None = None) -> dict[str, np.ndarray]:
    if device.endswith(GPU_FORM):
        with gpu_form():
            return symdiff_result(prog, inputs, device[:-len(GPU_FORM)], storage)
    if device.endswith(TENSOR_FORM):
        with tensor_form():
            return symdiff_result(prog, inputs, device[:-len(TENSOR_FORM)], storage)
    if device.endswith(COOP_FORM):
        with coop_form():
            return symdiff_result(prog, inputs, device[:-len(COOP_FORM)], storage)
    if device.endswith(RECOMPUTE):
        with recompute_everything():
            return symdiff_result(prog, inputs, device[:-len(RECOMPUTE)], storage)
    if storage_of(device):
        suffix = next(s for s in HALVES if device.endswith(s))
        return symdiff_result(prog, inputs, device[:-len(suffix)], HALVES[suffix])
    float64 = device == "numpy" and storage is None
    fn = build_symdiff(prog, float64, storage)
    ftype = np.float64 if float64 else np.dtype(storage) if storage else np.float32
    args = [np.array(inputs[n], dtype=ftype) for n in prog.floats] + [np.array(inputs[n]) for n in prog.indices]
    names = list(prog.floats)
    if prog.second is None:
        v, g = fn.value_and_grad(*args, wrt=names, device=device)
    else:
        gp = fn.grad_program(wrt=[prog.second])
        v, g = gp.vjp(*args, cotangent=cotangent(prog).astype(ftype), wrt=names, device=device)
    out = {"value": np.asarray(v, np.float64)}
    out.update({f"grad:{n}": np.asarray(g[n], np.float64) for n in names})
    return out


def _max_abs(x: np.ndarray) -> float:
    return float(np.max(np.abs(x))) if x.size else 0.0


def _error(g: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """|g - ref| per element; zero where both are the same infinity (or both NaN)."""
    same = (g == ref) | (np.isnan(g) & np.isnan(ref))
    with np.errstate(invalid="ignore"):
        return np.where(same, 0.0, np.abs(g - ref))


def _jax32_error(j32: np.ndarray, ref: np.ndarray) -> float:
    """JAX float32's worst error where it and float64 are finite.  Where float32 overflowed
    and float64 did not, JAX gives no unit for the bound, and the floor stands: the
    tolerance is never infinite, so symdiff must match float64 there too."""
    finite = np.isfinite(j32) & np.isfinite(ref)
    return _max_abs(j32[finite] - ref[finite])


def _half_spacing(ref: np.ndarray, storage: str) -> np.ndarray:
    """Half the ``storage`` format's spacing at each element of ``ref``: a once-rounded result's allowance."""
    with np.errstate(over="ignore", invalid="ignore"):
        r = np.abs(ref).astype(storage)
        up = np.nextafter(r, np.array(np.inf, storage)).astype(np.float64)
        return np.where(np.isfinite(up), 0.5 * (up - r.astype(np.float64)), 0.0)


def compare(got: dict, ref64: dict, ref32: dict | None, floor32: float = FLOOR32,
            storage: str | None = None) -> tuple[bool, dict]:
    """(all within tolerance, the worst quantity as {quantity, err, tol, ...}); results
    rounded to ``storage`` (``HALVES``) are allowed half its spacing more at each element."""
    worst, ok = {"ratio": -1.0}, True
    for q, ref in ref64.items():
        g = np.asarray(got[q], np.float64)
        if g.size != ref.size:
            return False, {"quantity": q, "err": float("inf"), "tol": 0.0,
                           "detail": f"shape {g.shape} vs JAX {ref.shape}"}
        g = g.reshape(ref.shape)
        if np.any(np.isnan(g) & ~np.isnan(ref)):
            return False, {"quantity": q, "err": float("nan"), "tol": 0.0, "detail": "NaN where JAX float64 has none"}
        scale = max(_max_abs(ref[np.isfinite(ref)]), 1.0)
        error = _error(g, ref)
        if storage is not None:
            error = np.maximum(error - _half_spacing(ref, storage), 0.0)
        err = _max_abs(error)
        if ref32 is None:
            tol = RTOL64 * scale
        else:
            j32 = np.asarray(ref32[q], np.float64).reshape(ref.shape)
            tol = max(SLACK * _jax32_error(j32, ref), floor32 * scale)
        ratio = err / tol if tol > 0 else (0.0 if err == 0 else float("inf"))
        if not err <= tol:
            ok = False
        if ratio > worst["ratio"]:
            at = np.unravel_index(int(np.argmax(error)), ref.shape) if ref.size else ()
            worst = {"ratio": ratio, "quantity": q, "err": err, "tol": tol, "at": [int(a) for a in at],
                     "got": float(g[at]) if ref.size else None, "expected": float(ref[at]) if ref.size else None}
    return ok, worst


def check(prog: Program, device: str, on_reference=lambda: None) -> Result:
    """Judge one program on one device (exceptions are outcomes, never raised).
    ``on_reference`` is called once JAX's reference is known, so that the runner
    can tell a process that died inside the oracle from one symdiff killed."""
    inputs, storage = make_inputs(prog), storage_of(device)
    if storage:  # the arguments as the variant stores them; JAX judges on those
        inputs = {n: v.astype(storage).astype(np.float32) if n in prog.floats else v for n, v in inputs.items()}

    def references(eager: bool) -> tuple[dict, dict | None]:
        ref32 = None if device == "numpy" else jax_reference(prog, inputs, np.float32, eager)
        return jax_reference(prog, inputs, np.float64, eager), ref32
    try:
        ref64, ref32 = references(eager=False)
        eager = not all(np.all(np.isfinite(r)) for r in ref64.values())
        if eager:  # a compiled program's max/min gradients may be NaN (jax_reference)
            ref64, ref32 = references(eager=True)
    except Exception as e:  # the generator made something JAX rejects
        return Result(prog.seed, device, "invalid", f"JAX: {type(e).__name__}: {e}"[:500])
    if not all(np.all(np.isfinite(r)) for r in ref64.values()):
        return Result(prog.seed, device, "invalid", "JAX float64 reference is not finite")
    if storage and not all(np.all(np.abs(r) < float(ml_dtypes.finfo(storage).max)) for r in ref64.values()):
        return Result(prog.seed, device, "invalid", f"results past {storage}'s range")
    on_reference()
    try:
        got = symdiff_result(prog, inputs, device)
    except refusal_types() as e:
        return Result(prog.seed, device, "refused", f"{type(e).__name__}: {e}"[:800])
    except Exception as e:
        tb = traceback.format_exc(limit=-4)
        return Result(prog.seed, device, "error", f"{type(e).__name__}: {e}"[:500] + "\n" + tb[-1500:])
    floor = FLOOR32_DEVICE.get(base_device(device), FLOOR32)
    ok, worst = compare(got, ref64, ref32, floor, storage)
    if not ok and not eager:  # the compiled program may have placed a tie's gradient wrongly
        ok, worst = compare(got, *references(eager=True), floor, storage)
    return Result(prog.seed, device, "ok" if ok else "wrong", "", worst)
