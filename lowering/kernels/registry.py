"""The kernel forms, in priority order, and how a kernel's are chosen.

A kernel's code has four parts, each written by one form (``writer.Forms``):

* **body**: how the kernel's threads cover its box and run its steps;
* **loop**: how a reduction's loop is shared out and its partial results combined;
* **finish** (optional): what runs after the steps, in the same dispatch;
* **update** (optional): how writes that several points update are emitted.

``FORMS`` lists every form once, in priority order; for each part a kernel
takes the first form of that part whose ``applies`` holds for its shape
(``writer.KernelShape``: the kernel, the target's capabilities, its matmul
tiling and workgroup layout).  ``point`` and ``thread_loop`` apply to every
kernel, so every kernel has a body and a loop.  docs/design.md ("Kernel
forms") lists the same order, and tests/lowering/kernels/test_registry.py
holds the two together.

A form whose kernels need module-level code (a helper function, a
groupshared array) asks for it while writing (``KernelWriter.declare``) and
writes it in its ``declaration``; ``declarations`` collects what a module's
kernels asked for, each once, in the order of ``FORMS``.

To add a form: a module in this package with a ``KernelForm`` subclass of
its part (``BodyForm``, ``LoopForm``, ``FinishForm``, ``UpdateForm``) stating
where it applies and emitting through the writer (and its module-level code,
if any, through ``declaration``), and its ``FORM`` in ``FORMS`` at its place
in the order.
"""
from __future__ import annotations

from ..bounds_check import IndexGuards
from .. import targets
from ..plan_types import Kernel, Plan
from . import columns, coop_tiles, cpu_matmul, group_tiles, last_workgroup_finish, point, register_tiles, rows, scatter
from . import tensor_tiles, thread_loop
from . import workgroup_tree
from .writer import BODY, FINISH, LOOP, UPDATE, Declarations, Forms, KernelForm, KernelShape, KernelWriter

FORMS: tuple[KernelForm, ...] = (
    cpu_matmul.FORM,             # body: a large product on the CPU device, packed micro-kernel blocks
    tensor_tiles.FORM,           # body: a TF32 or 16-bit product's tiles summed by mma.sync (CUDA)
    coop_tiles.FORM,             # body: a 16-bit product's tiles summed in cooperative matrices (Vulkan)
    group_tiles.FORM,            # body: a GPU product's tiles staged through groupshared memory
    register_tiles.FORM,         # body: a matmul-shaped step's outputs in register tiles
    columns.FORM,                # body: CPU column sums, rows outer and the thread's points inner
    rows.FORM,                   # body: a row kernel, one row a thread (or a workgroup)
    point.FORM,                  # body: one point a thread (every kernel)
    workgroup_tree.FORM,         # loop: a workgroup's lanes share each loop, combined in a tree
    thread_loop.FORM,            # loop: each point's loop in its own thread (every kernel)
    last_workgroup_finish.FORM,  # finish: the second stage, in the last workgroup to finish
    scatter.FORM,                # update: colliding updates through atomic_<op> helpers
)


def choose(shape: KernelShape) -> Forms:
    """For each part of the kernel, the first form in ``FORMS`` that applies to it."""
    chosen: dict[str, KernelForm] = {}
    for form in FORMS:
        if form.part not in chosen and form.applies(shape):
            chosen[form.part] = form
    return Forms(chosen[BODY], chosen[LOOP], chosen.get(FINISH), chosen.get(UPDATE))


def writer(plan: Plan, kernel: Kernel, target: targets.Target, guards: IndexGuards,
           declared: Declarations) -> KernelWriter:
    """The writer of one kernel of ``plan``, in the forms chosen for it; what
    its forms declare at module level goes into ``declared``."""
    return KernelWriter(plan, kernel, target, choose, guards, declared)


def declarations(declared: Declarations, kind: str, target: targets.Target) -> list[str]:
    """The module-level code of ``kind`` (``writer.FUNCTION``, ``GROUPSHARED``) that a
    module's kernels asked their forms for, in the order of ``FORMS``."""
    return declared.texts(FORMS, kind, target)
