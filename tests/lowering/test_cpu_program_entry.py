"""The CPU device runs a whole call as one dispatch of ``run_program``: fills,
fill kernels and every kernel in order.  These programs put accumulations
(each with its own fill) between kernels that read earlier results, so a
wrong order or a missed fill shows up as a wrong number against ``ir.run``."""
import numpy as np
import sympy

from symdiff import ir
from symdiff import lowering
import symdiff as sd
from lowering_graphs import G, i, rng
from symdiff.lowering.buffer_plan import launches_of


def fills_between_kernels(n: int = 20000, bins: int = 5):
    """max, min and prod scatters and a sum long enough to be split in two
    stages, each reading the one before; ``h`` has two accumulated versions."""
    b = G("fills").c("idx", (n,), "argument", "int32").c("w", (n,), "argument")
    b.c("h", (bins,), "result").c("lo", (bins,), "result").c("p", (bins,), "result").c("total", (), "result")
    w, q = b.s("w", "w"), b.s("q", "idx")
    by_bin = {"w": ("w", (i,)), "q": ("idx", (i,))}
    b.t("hmax", [(i, 0, n)], w, by_bin, ("h", (q,)), "max")
    first = b.g.latest("h")
    b.g.add_tasklet("hmax_again", [(i, 0, n)], {"o": b.s("h", "h") + w},
                    {"w": ("w#0", (i,)), "q": ("idx#0", (i,)), "h": (first, (q,))},
                    {"o": (b.g.new_version("h"), (q,), "max")})
    b.t("hmin", [(i, 0, n)], w * b.s("h", "h"), {**by_bin, "h": ("h", (q,))}, ("lo", (q,)), "min")
    sign = sympy.Piecewise((2, w > 2.9), (sympy.Rational(1, 2), w < -2.9), (-1, w > 0), (1, True))
    b.t("hprod", [(i, 0, n)], sign, by_bin, ("p", (q,)), "prod")
    b.t("total", [(i, 0, n)], w * b.s("lo", "lo") + b.s("p", "p"),
        {**by_bin, "lo": ("lo", (q,)), "p": ("p", (q,))}, ("total", ()), "sum")
    g = rng(11)
    return b.g, {"idx": g.integers(0, bins, n).astype(np.int32), "w": g.uniform(-3, 3, n).astype(np.float32)}


def check(got: dict, want: dict) -> None:
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=2e-5, atol=1e-3, err_msg=name)


def test_accumulations_between_kernels_match_the_interpreter(device):
    graph, inputs = fills_between_kernels()
    exe = lowering.compile(graph, device=device)
    want = ir.run(graph, inputs)
    check(exe(inputs), want)
    check(exe(inputs), want)  # every fill is redone on the next call


def test_one_call_is_one_dispatch_on_the_cpu_device():
    graph, inputs = fills_between_kernels()
    exe = lowering.compile(graph, device="cpu")
    exe(inputs)
    assert "fill_" in exe.source  # non-zero identities are filled by kernels inside the program entry
    assert exe.stats()["kernels"] > 3 and exe.stats()["dispatches"] == 1


def test_a_cut_kernel_list_runs_in_pieces():
    """bench.profile times kernels alone by cutting the launch list: each run
    of consecutive kernels is one dispatch of the program entry."""
    graph, inputs = fills_between_kernels()
    exe = lowering.compile(graph, device="cpu")
    want = exe(inputs)
    inst, dev = exe._last, lowering.backends.of("cpu").device()
    bindings = dict(inst.buffers)
    everything, kernels = inst.launches, inst.module.kernels
    halves = [kernels[: len(kernels) // 2], kernels[len(kernels) // 2:]]
    try:
        for part in halves:  # the second half's fills are redone: they are read only after
            inst.launches = launches_of(part, sequential=True)
            dispatches, enc = exe._record(dev.create_command_encoder(), inst, bindings)
            assert dispatches == 1
            dev.submit_command_buffer(enc.finish())
        inst.launches = launches_of([kernels[0], kernels[-1]], sequential=True)
        assert exe._record(dev.create_command_encoder(), inst, bindings)[0] == 2
    finally:
        inst.launches = everything
    for name, array in want.items():
        np.testing.assert_array_equal(lowering.runtime._readback(bindings[inst.latest[name]], graph.containers[name].dtype,
                                                                 inst.shapes[inst.latest[name]]), array)


@sd.differentiable_program
def relaxed(u: sd.f32[48, 48]):
    """In-place updates (versions), a row max and a total: forward and backward
    hold many kernels and fills."""
    u = np.copy(u)
    for _ in range(3):
        u[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
    return np.sum(np.max(u, axis=1) * np.prod(np.tanh(u) + 2, axis=0)[:48])


def test_a_differentiated_program_matches_numpy_in_one_dispatch():
    u = rng(12).uniform(-1, 1, (48, 48)).astype(np.float32)
    value, grads = relaxed.value_and_grad(u, device="cpu")
    want_value, want_grads = relaxed.value_and_grad(u, device="numpy")
    np.testing.assert_allclose(value, want_value, rtol=1e-4)
    np.testing.assert_allclose(grads["u"], want_grads["u"], rtol=1e-4, atol=1e-4)
    exe = next(e for e in relaxed._executables.values() if e.graph.meta.get("gradients"))
    assert exe.stats()["kernels"] > 1 and exe.stats()["dispatches"] == 1
