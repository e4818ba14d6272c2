"""The store-versus-recompute cost model (lowering.cost_model): each target's
model, and its numbers (targets.Tuning) deciding the plan."""
import dataclasses

import numpy as np

import symdiff as sd
from symdiff.ir.op_cost import Op
from symdiff.lowering import backends, targets
from symdiff.lowering.cost_model import CostModel
from symdiff.lowering.plan import plan
from lowering_graphs import G, i, j, k


def test_each_targets_model():
    assert CostModel.of(None) == CostModel()  # a plan for every target: no calls recomputed, no trial
    assert CostModel.of(None).trial_ops is None and not CostModel.of(None).recompute_calls
    assert CostModel.of(backends.cuda.TARGET).recompute_calls and CostModel.of(backends.cuda.TARGET).trial_ops is None
    assert CostModel.of(backends.cpu.TARGET).trial_ops is Op.ARITHMETIC  # its vectorised loop pays for a call again
    assert CostModel.of(backends.vulkan.LAVAPIPE).trial_ops is Op.CALL
    small = dataclasses.replace(targets.TUNING, trial_min_elements=10)
    cpu = CostModel.of(dataclasses.replace(backends.cpu.TARGET, tuning=small))
    assert cpu.trial_pays([10]) and not cpu.trial_pays([9])
    assert CostModel.of(backends.vulkan.LAVAPIPE).trial_pays([1])  # lavapipe's trial has no size floor


def _softplus_logsumexp(x: sd.f32[64, 128]):
    m = np.max(x, axis=1, keepdims=True)
    return np.sum(np.log1p(np.exp(x))) + np.sum(m[:, 0] + np.log(np.sum(np.exp(x - m), axis=1)))


def test_recompute_ops_decides_what_a_gpu_recomputes():
    """On a GPU target values of up to ``recompute_ops`` operations are recomputed where
    they are read: at 0, ``exp(x)`` and the reverse pass's terms are stored instead."""
    graph = sd.differentiable_program(_softplus_logsumexp).backward_graph(wrt=["x"])
    default = plan(graph, {}, backends.cuda.TARGET)
    none = plan(graph, {}, dataclasses.replace(backends.cuda.TARGET,
                                               tuning=dataclasses.replace(targets.TUNING, recompute_ops=0)))
    assert CostModel.stored_elements(default) < CostModel.stored_elements(none)
    assert CostModel.of(backends.cuda.TARGET).stores_less(default, none)


def _product_of(value, through_a_scale: bool) -> G:
    """``d = value(y, g)`` elementwise (``g`` a scalar, as a reverse pass's seed; read where used), then
    ``out = d @ w`` (with ``through_a_scale``: ``(1.5 * d) @ w``, the scale its own
    tasklet), and ``d + 1`` elementwise."""
    n = 8
    b = G("product_operand").c("y", (n, n), "argument").c("g", (), "argument").c("w", (n, n), "argument")
    b.c("d", (n, n)).c("e", (n, n)).c("out", (n, n), "result").c("plus", (n, n), "result")
    expr = value(b.s("y", "y"), b.s("g", "g"))
    reads = {"y": ("y", (i, k)), "g": ("g", ())}
    b.t("value", [(i, 0, n), (k, 0, n)], expr, {c: r for c, r in reads.items() if b.s(c, c) in expr.free_symbols},
        ("d", (i, k)))
    b.t("plus_one", [(i, 0, n), (k, 0, n)], b.s("d", "d") + 1, {"d": ("d", (i, k))}, ("plus", (i, k)))
    operand = "d"
    if through_a_scale:
        b.t("scale", [(i, 0, n), (k, 0, n)], 1.5 * b.s("d", "d"), {"d": ("d", (i, k))}, ("e", (i, k)))
        operand = "e"
    b.t("product", [(i, 0, n), (j, 0, n), (k, 0, n)], b.s("a", operand) * b.s("w", "w"),
        {"a": (operand, (i, k)), "w": ("w", (k, j))}, ("out", (i, j)), acc="sum")
    return b


def test_a_value_a_product_reads_spoils_it_unless_free():
    """``2 * y * g`` is cheap for a GPU to recompute, but read by a product
    (directly, or through a scale recomputed in the product in turn) it would
    turn the product into an elementwise reduction: ``spoils_a_product``.  A
    copy of one element costs the product nothing; an elementwise reader alone
    spoils nothing."""
    model = CostModel.of(backends.cuda.TARGET)
    anything, nothing = (lambda name: True), (lambda name: False)
    direct = _product_of(lambda y, g: 2 * y * g, through_a_scale=False).g
    value = direct.node("value")
    assert model.cheap_on_a_gpu(direct, value) and model.spoils_a_product(direct, value, nothing)
    scaled = _product_of(lambda y, g: 2 * y * g, through_a_scale=True).g
    assert model.spoils_a_product(scaled, scaled.node("value"), anything)
    assert not model.spoils_a_product(scaled, scaled.node("value"), nothing)  # the scale stays stored
    copied = _product_of(lambda y, g: -y, through_a_scale=False).g
    assert not model.spoils_a_product(copied, copied.node("value"), anything)
    assert not model.spoils_a_product(direct, direct.node("plus_one"), anything)


def test_a_gpu_plan_keeps_a_products_operand_stored():
    """Planned for a GPU, which recomputes ``2 * y * g`` where it is read, the
    product still reads ``d`` from its buffer and stays one tiled product;
    ``d + 1`` reads the same buffer.  Values against the interpreter."""
    from symdiff import ir
    from symdiff.lowering.matmul import matmul_shape
    graph = _product_of(lambda y, g: 2 * y * g, through_a_scale=False).g
    p = plan(graph, {}, backends.cuda.TARGET)
    assert any(a.startswith("d#") for a in p.buffers)
    assert sum(matmul_shape(p.graph, s.tasklet) is not None for kern in p.kernels for s in kern.steps) == 1
    rng = np.random.default_rng(5)
    inputs = {n: rng.standard_normal(shape).astype(np.float32) for n, shape in (("y", (8, 8)), ("g", ()),
                                                                                 ("w", (8, 8)))}
    want = ir.run(graph, inputs)
    y, g, w = (inputs[n].astype(np.float64) for n in ("y", "g", "w"))
    np.testing.assert_allclose(want["out"], (2 * y * g) @ w, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ir.run(p.graph, inputs)["out"], want["out"], rtol=1e-6, atol=1e-6)
