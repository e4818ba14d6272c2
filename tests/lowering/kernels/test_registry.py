"""The kernel forms' priority order (lowering.kernels.registry): the list in
docs/design.md is the registry's, and for planned kernels of known shapes each
target gets the form its capabilities call for, the first that applies where
several do (a large CPU product is both register-tiled and a micro-kernel)."""
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import symdiff as sd
from symdiff import ir
from symdiff.ir.specs import f32
from symdiff.lowering import backends, targets
from symdiff.lowering.codegen import generate
from symdiff.lowering.kernels.registry import FORMS, choose
from symdiff.lowering.kernels.writer import KernelShape
from symdiff.lowering.plan import plan
from symdiff.lowering.plan_types import HostKernel

DESIGN = Path(__file__).parents[3] / "docs" / "design.md"
CPU = replace(backends.cpu.TARGET, host_blas=False)  # products as Slang kernels, not numpy.matmul between launches


def documented_order() -> list[tuple[str, str]]:
    """``(name, part)`` of each numbered entry of docs/design.md's "Kernel forms" list."""
    text = DESIGN.read_text()
    section = text[text.index("### Kernel forms"):]
    section = section[:section.index("\n#")]
    return re.findall(r"^\d+\. `(\w+)` \((\w+)\)", section, flags=re.M)


def test_the_documented_order_is_the_registry_order():
    assert documented_order() == [(form.name, form.part) for form in FORMS]


def matmul(n: int):
    def f(x: f32[n, n], y: f32[n, n]):
        return np.tanh(x @ y)
    return f


def column_sum(x: f32[64, 2048]):
    return np.sum(x * x, axis=0)


def softmax(x: f32[48, 10]):
    e = np.exp(x - np.max(x, axis=1, keepdims=True))
    return e / np.sum(e, axis=1, keepdims=True)


def elementwise(x: f32[300]):
    return np.tanh(x) * 2.0


def long_sum(x: f32[1 << 16]):
    return np.sum(np.sin(x) * x)


def gather_gradient():
    """The gradient of a gather with repeated indices: a scatter-add."""
    def f(t: sd.f32[8], idx: sd.i32[64]):
        return np.sum(np.tanh(t[idx]))
    return sd.differentiable_program(f).backward_graph(wrt=["t"])


def forms(graph, target: targets.Target) -> list[tuple[str, str, str | None, str | None]]:
    """(body, loop, finish, update) form names of each Slang kernel the graph plans into."""
    chosen = [choose(KernelShape(p, k, target)) for p in [plan(graph, {}, target)] for k in p.kernels
              if not isinstance(k, HostKernel)]
    return [(c.body.name, c.loop.name, c.finish and c.finish.name, c.update and c.update.name) for c in chosen]


def bodies(graph, target: targets.Target) -> set[str]:
    return {body for body, *_ in forms(graph, target)}


@pytest.mark.parametrize("target, expected", [(CPU, "cpu_matmul"), (backends.cuda.TARGET, "group_tiles"),
                                              (backends.vulkan.LAVAPIPE, "register_tiles")])
def test_a_large_product_is_a_micro_kernel_on_the_cpu_only(target, expected):
    assert bodies(ir.trace(matmul(256)), target) == {expected}


def test_a_small_cpu_product_keeps_the_plain_register_tiles():
    assert bodies(ir.trace(matmul(32)), CPU) == {"register_tiles"}


def test_column_sums_run_rows_outer_on_the_cpu_only():
    graph = ir.trace(column_sum)
    assert forms(graph, CPU) == [("columns", "thread_loop", None, None)]
    assert [f[:2] for f in forms(graph, backends.cuda.TARGET)] == [("point", "workgroup_tree")]  # across points
    assert [f[:2] for f in forms(graph, backends.vulkan.LAVAPIPE)] == [("point", "thread_loop")]


def test_a_softmax_is_a_row_kernel():
    for target in (CPU, backends.vulkan.LAVAPIPE):
        assert bodies(ir.trace(softmax), target) == {"rows"}


def test_an_elementwise_kernel_is_points_and_nothing_else():
    for target in (CPU, backends.cuda.TARGET):
        assert forms(ir.trace(elementwise), target) == [("point", "thread_loop", None, None)]


def test_a_long_sum_finishes_in_its_last_workgroup_where_workgroups_reduce():
    graph = ir.trace(long_sum)
    assert ("point", "workgroup_tree", "last_workgroup", None) in forms(graph, backends.cuda.TARGET)
    assert all(f[1:3] == ("thread_loop", None) for f in forms(graph, backends.vulkan.LAVAPIPE))


def test_colliding_updates_are_scatters_on_every_target():
    graph = gather_gradient()
    for target in (CPU, backends.vulkan.LAVAPIPE, backends.cuda.TARGET):
        assert "scatter" in {update for *_, update in forms(graph, target)}
    assert all(update is None for *_, update in forms(ir.trace(elementwise), backends.cuda.TARGET))


def sums_and_gather(x: sd.f32[1 << 16], y: sd.f32[1 << 16], t: sd.f32[8], idx: sd.i32[64]):
    return np.sum(np.sin(x) * x) * np.sum(np.cos(y) * y) + np.sum(np.tanh(t[idx]))


def test_module_level_code_is_the_forms_own_declared_once():
    """What a module holds outside its kernels comes from the forms that asked
    for it (``KernelForm.declaration``), once however often it was asked for
    (here the lanes of several sums combine in the same scratch): the
    scatter's ``atomic_sum`` helper, then the workgroup tree's scratch array and
    the last workgroup's flag.  A target's own ``Tuning.group_size`` sizes the
    scratch, the entry points and the tree's lanes alike."""
    graph = sd.differentiable_program(sums_and_gather).backward_graph(wrt=["x", "y", "t"])
    cuda = backends.cuda.TARGET
    for group in (256, 128):
        target = replace(cuda, tuning=replace(cuda.tuning, group_size=group))
        p = plan(graph, {}, target)
        used = forms(graph, target)
        assert "scatter" in {f[3] for f in used} and "workgroup_tree" in {f[1] for f in used}
        source = generate(p, target).source
        assert source.count("partial results combined in a fixed tree") > 1
        outside = [line for line in source.splitlines() if line.startswith(("void atomic_", "groupshared "))]
        assert len(outside) == len(set(outside)) == 3, outside
        helper, scratch, flag = outside
        assert helper.startswith("void atomic_sum(") and flag.startswith("groupshared int workgroup_last;")
        assert re.fullmatch(rf"groupshared \w+ workgroup_\w+\[{group}\];", scratch)
        assert set(re.findall(r"numthreads\((\d+), 1, 1\)", source)) == {str(group)}
        assert f"int group_thread = global_thread % {group};" in source
