"""The store-versus-recompute cost model (lowering.cost_model): each target's
model, and its numbers (targets.Tuning) deciding the plan."""
import dataclasses

import numpy as np

import symdiff as sd
from symdiff.ir.op_cost import Op
from symdiff.lowering import backends, targets
from symdiff.lowering.cost_model import CostModel
from symdiff.lowering.plan import plan


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
