"""``device="numpy"``: the IR interpreter (``symdiff.ir.run``) as a backend.

Nothing is planned, generated, compiled or allocated: a call runs the graph
on numpy arrays and returns numpy arrays, and its scatters are deterministic
by construction.  ``auto`` never picks it (every other backend is faster).
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from symdiff import ir
from symdiff.ir.graph import DataflowGraph
from symdiff.ir.storage import computed_in_float32

from .base import Backend
from .registry import register


class InterpreterBackend(Backend):
    """Runs graphs with the IR interpreter under the device name ``name``."""

    interprets = True

    def __init__(self, name: str = "numpy") -> None:
        self.name = name

    def run(self, graph: DataflowGraph, inputs: Mapping[str, np.ndarray], sizes: Mapping[str, int]) -> dict:
        """``graph`` on host arrays ``inputs`` (already in the graph's dtypes);
        an out-of-range index names the argument's element where one is at fault."""
        try:
            return ir.run(computed_in_float32(graph), inputs, sizes)
        except ir.IndexOutOfRange:
            ir.check_index_arguments(graph, inputs, sizes)
            raise


BACKEND = register(InterpreterBackend())
