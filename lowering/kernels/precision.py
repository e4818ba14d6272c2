"""``matmul_precision``: what a program's float32 matrix products may compute in.

``"highest"`` (the default) is exact float32: every product's sums are
float32 multiply-adds.  ``"tf32"`` allows tensor cores' TF32 inputs (10-bit
mantissas, float32 sums), as JAX's default float32 matmul on an H100 does
(its MLP gradients then differ from float64 by 2.6e-3,
``../shared/notes/gpu.md``): on a target with tensor cores (CUDA) float32
products then take ``tensor_tiles``; elsewhere results stay exact float32.
The tensor-core form applies where it is set and nowhere else.

As in JAX, it is set per program (``sd.differentiable_program(...,
matmul_precision="tf32")``), globally (``sd.set_matmul_precision``, as
``jax.config.update("jax_default_matmul_precision", ...)``) or for a block
(``with sd.default_matmul_precision("tf32"):``, as
``jax.default_matmul_precision``); a program's own setting wins.  It travels
with the graph a program compiles, as its ``matmul_precision`` note
(``ir.graph_notes``, in ``graph.meta``; ``with_precision``):
the planner, the kernel forms (``of``) and the on-disk caches' keys all see
it, so a program compiled at one precision never runs another's kernels."""
from __future__ import annotations

import contextlib
import contextvars
from typing import Iterator

from symdiff.ir.graph import DataflowGraph
from symdiff.ir.graph_notes import GraphNotes

PRECISIONS = ("highest", "tf32")
DEFAULT = "highest"

_global = DEFAULT
_block: contextvars.ContextVar[str | None] = contextvars.ContextVar("symdiff_matmul_precision", default=None)


def check(value: object, where: str) -> str:
    """``value`` if it names a precision, else an error saying what to write."""
    if value not in PRECISIONS:
        raise ValueError(f"{where}: matmul_precision={value!r} is not one of {list(PRECISIONS)}; "
                         f"write matmul_precision=\"highest\" (exact float32) or \"tf32\" (tensor cores allowed)")
    return value  # type: ignore[return-value]


def set_matmul_precision(value: str) -> None:
    """The precision of programs that set none (``"highest"`` until changed)."""
    global _global
    _global = check(value, "sd.set_matmul_precision")


@contextlib.contextmanager
def default_matmul_precision(value: str) -> Iterator[None]:
    """Within the block, the precision of programs that set none."""
    token = _block.set(check(value, "sd.default_matmul_precision"))
    try:
        yield
    finally:
        _block.reset(token)


def current() -> str:
    """The precision a program that sets none compiles with now."""
    return _block.get() or _global


def with_precision(graph: DataflowGraph, value: str) -> DataflowGraph:
    """``graph`` to compile at ``value``: itself at the default, else a copy
    marked in its meta, made once per graph and precision (the executables a
    graph caches are then per precision)."""
    if value == DEFAULT:
        return graph
    copies = graph.derived.setdefault("matmul_precision", {})
    if value not in copies:
        marked = graph.copy()
        GraphNotes(marked).matmul_precision = value  # set only where not DEFAULT
        copies[value] = marked
    return copies[value]


def of(graph: DataflowGraph) -> str:
    """The precision a planned graph's products may compute in."""
    return GraphNotes(graph).matmul_precision or DEFAULT
