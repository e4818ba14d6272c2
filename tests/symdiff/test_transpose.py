"""Stencil transposition: the reverse of shifted reads is one gather per
gradient element (plain write, guarded and clamped), exact at the boundaries."""
import numpy as np
import sympy

from symdiff import ir
import symdiff as sd
from symdiff.transpose import shift_solution

o = ir.index_symbol("o0")
i = ir.index_symbol("i")


def test_shift_solution_inverts_offsets_and_rejects_the_rest():
    sol, conds = shift_solution((i + 2,), ((i, 1, 9),), (o,))
    assert sol == {i: o - 2} and sympy.And(*conds).subs(o, 3) and not sympy.And(*conds).subs(o, 11)
    idx = ir.connector_symbol("idx", "int32")
    assert shift_solution((idx,), ((i, 0, 9),), (o,)) is None           # gather: data dependent
    assert shift_solution((2 * i,), ((i, 0, 9),), (o,)) is None         # strided
    j = ir.index_symbol("j")
    assert shift_solution((i,), ((i, 0, 9), (j, 0, 3)), (o,)) is None   # reduction over j


def _stencil(a: sd.f32[12]):
    out = np.zeros_like(a)
    for k in sd.map[1:11]:
        out[k] = a[k - 1] * a[k] + 3.0 * a[k + 1]
    return np.sum(out * out)


def test_stencil_backward_is_one_plain_gather_matching_finite_differences():
    p = sd.differentiable_program(_stencil)
    g = p.backward_graph()
    grad_a = g.meta["gradients"]["a"]
    writers = g.writers(g.access(grad_a, 0))
    assert len(writers) == 1
    t = g.node(writers[0][0])
    assert t.meta["strategy"] == "gather" and writers[0][1].accumulate is None
    assert "strategy: gather" in g.to_svg(engine="builtin")
    a = np.random.default_rng(1).standard_normal(12).astype(np.float32)
    sd.gradcheck(_stencil, a)


def test_an_elementwise_gradient_gathered_from_two_readers_has_no_guard():
    """Both writes of grad_x are at shift 0 over all of x: every gathered
    element has both contributions, so the gather needs no Piecewise (the
    numpy device evaluated its always-true bounds on full-size arrays)."""
    def f(x: sd.f32[32]):
        return np.mean(np.tanh(x) * x)
    graph = ir.trace(f).copy()
    sd.add_backward_pass(graph, inputs=["x"], outputs=graph.results)
    (gather,) = [t for t in graph.tasklets() if t.meta.get("strategy") == "gather"]
    assert not gather.body["d"].has(sympy.Piecewise)
    x = np.linspace(-2, 2, 32)
    got = sd.differentiable_program(f).grad(x.astype(np.float32), device="numpy")["x"]
    np.testing.assert_allclose(got, (x / np.cosh(x) ** 2 + np.tanh(x)) / 32, rtol=1e-5)



def test_gather_connectors_are_named_alike_in_every_process():
    """The gather's read connectors were numbered in set order, which follows
    Python's per-process string hashes: the same program generated different
    Slang in different processes (and missed slangpy's on-disk cache)."""
    import subprocess
    import sys
    code = ("import numpy as np, symdiff as sd\nfrom symdiff import ir\n"
            "def f(a: sd.f32[16], b: sd.f32[16]):\n"
            "    return np.sum(a[1:-1] * b[2:] + a[:-2] * a[2:] * b[1:-1] + np.sin(a[1:-1]) * b[:-2])\n"
            "g = ir.trace(f).copy()\n"
            "sd.add_backward_pass(g, inputs=['a', 'b'], outputs=g.results)\n"
            "print(sorted((t.name, sorted((m.connector, str(m)) for _, m in g.reads(t.name)), str(t.body))\n"
            "             for t in g.tasklets() if t.meta.get('strategy') == 'gather'))\n")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**__import__("os").environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2", "3")}
    assert len(outs) == 1, outs
