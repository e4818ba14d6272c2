"""Argument specs: ``sd.f32[64, 16]``, ``sd.f64[N, 3]``, ``sd.f16[...]``, ``sd.bf16[...]``,
``sd.i32[...]``, ``sd.f32`` (0-d).

A spec is what tracing needs to know of an argument (dtype and shape), so
a program traced once per spec can be cached and re-run on new values.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import sympy

from .graph import as_expr, size_symbol


@dataclass(frozen=True)
class ArraySpec:
    """dtype and shape (ints or size symbols) of one argument."""

    dtype: str
    shape: tuple = ()

    def __getitem__(self, shape) -> "ArraySpec":
        if not isinstance(shape, tuple):
            shape = (shape,)
        return ArraySpec(self.dtype, tuple(as_expr(s) for s in shape))

    def __repr__(self) -> str:
        short = {"float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16", "int32": "i32",
                 "bool": "bool_"}[self.dtype]
        return f"sd.{short}[{', '.join(str(s) for s in self.shape)}]" if self.shape else f"sd.{short}"

    @property
    def is_symbolic(self) -> bool:
        return any(not as_expr(s).is_Integer for s in self.shape)


f32 = ArraySpec("float32")
f64 = ArraySpec("float64")
f16 = ArraySpec("float16")  # 16-bit storage, float32 arithmetic (``ir.storage``)
bf16 = ArraySpec("bfloat16")
i32 = ArraySpec("int32")
bool_ = ArraySpec("bool")


def symbol(name: str) -> sympy.Symbol:
    """A size symbol for shapes known only at call time: ``N = sd.symbol("N")``."""
    return size_symbol(name)


_DTYPE_OF_KIND = {"f": None, "i": "int32", "u": "int32", "b": "bool"}


def spec_of(value: Any) -> ArraySpec:
    """The spec a call-time value implies (unannotated arguments).

    Python floats become 0-d float32 (the program's default precision);
    float64, float16 and bfloat16 (``ml_dtypes.bfloat16``) arrays keep their
    dtype; integer arrays become int32.
    """
    if isinstance(value, ArraySpec):
        return value
    if isinstance(value, (bool, np.bool_)):
        return ArraySpec("bool", ())
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return ArraySpec("int32", ())
    if isinstance(value, float):
        return ArraySpec("float32", ())
    arr = np.asarray(value)
    kind = arr.dtype.kind
    if arr.dtype.name in ("float64", "float16", "bfloat16"):
        dtype = arr.dtype.name
    elif kind == "f":
        dtype = "float32"
    elif kind in _DTYPE_OF_KIND:
        dtype = _DTYPE_OF_KIND[kind]
    else:
        raise TypeError(f"unsupported argument dtype {arr.dtype}: pass float32, float64, float16, bfloat16, int32 or bool arrays")
    return ArraySpec(dtype, tuple(sympy.Integer(s) for s in arr.shape))
