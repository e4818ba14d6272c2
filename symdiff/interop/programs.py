"""What the framework bridges (``to_torch``, ``to_jax``) need from a program
besides calling it: its outputs' shapes and dtypes for given argument shapes
without running it (torch's fake tensors, JAX's abstract values), and the
vector-Jacobian-product program their backward passes run.

The VJP program takes the program's arguments followed by one cotangent per
output and returns the gradients of ``wrt``: the program's own backward graph
with its seeds left as arguments (``gradients_as_results``).  Being a program
itself, a bridge can wrap it again, which is how torch's ``create_graph=True``
and ``jax.grad`` of ``jax.grad`` get second (and higher) derivatives.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from symdiff import ir
from symdiff.ir.graph_notes import GraphNotes

from ..program import DifferentiableProgram, gradients_as_results

Shape = tuple[int, ...]


def stand_ins(program: DifferentiableProgram, shapes: Sequence[tuple[Shape, Any]]) -> dict[str, np.ndarray]:
    """Zero-strided arrays of the given ``(shape, dtype)``s, one per argument:
    enough to choose specs and bind sizes, at no memory cost."""
    if len(shapes) != len(program.arg_names):
        raise TypeError(f"{program.name}() takes {len(program.arg_names)} arguments "
                        f"({', '.join(program.arg_names)}), got {len(shapes)}")
    return {n: np.broadcast_to(np.zeros((), dtype), tuple(shape))
            for n, (shape, dtype) in zip(program.arg_names, shapes)}


def output_specs(program: DifferentiableProgram, shapes: Sequence[tuple[Shape, Any]]) -> list[tuple[Shape, np.dtype]]:
    """``(shape, numpy dtype)`` of each output for arguments of these shapes
    and dtypes (traces the program if it was not traced for them yet)."""
    values = stand_ins(program, shapes)
    forward = program._forward_graph(program._specs_for(values))
    outputs = GraphNotes(forward).result_names
    found = program._concrete_shapes(forward, values, forward, outputs)
    return [(tuple(s), np.dtype(ir.DTYPES[forward.containers[o].dtype])) for o, s in zip(outputs, found)]


def float_arguments(program: DifferentiableProgram, shapes: Sequence[tuple[Shape, Any]]) -> list[str]:
    """The arguments that can be differentiated (float) for these argument shapes."""
    values = stand_ins(program, shapes)
    return program._float_args(program._forward_graph(program._specs_for(values)))


def vjp_program(program: DifferentiableProgram, shapes: Sequence[tuple[Shape, Any]],
                wrt: Sequence[str]) -> DifferentiableProgram:
    """``(arguments..., cotangents...) -> gradients of wrt`` (one gradient:
    an array; several: a tuple in ``wrt`` order), for arguments of these
    shapes.  Its cotangent arguments are named after the backward graph's
    seeds, so it is built per argument specs."""
    wrt = tuple(wrt)
    specs = program._specs_for(stand_ins(program, shapes))
    forward = program._forward_graph(specs)
    seeds = GraphNotes(program._backward_graph(specs, wrt)).seeds
    count = len(program.arg_names)

    def build(all_specs: tuple) -> ir.DataflowGraph:
        return gradients_as_results(program._backward_graph(tuple(all_specs[:count]), wrt).copy(), wrt)

    cotangents = [seeds[o] for o in GraphNotes(forward).result_names]
    return DifferentiableProgram(build, program.arg_names + cotangents, program._annotations,
                                 f"vjp({program.name})", program.device, program.deterministic,
                                 program.check_bounds, program.stencil_gathers)
