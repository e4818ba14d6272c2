"""Registries from numpy callables to their tracing implementations.

The op modules fill them with ``@implements``; traced arrays look handlers up
here, so the array class needs no import of the op modules (no cycles).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from .errors import UnsupportedOperationError

FUNCTIONS: dict[object, Callable] = {}


def implements(*funcs) -> Callable:
    """Register the decorated function as the traced form of each of ``funcs``
    (numpy functions, ufuncs, or string keys for operations without a numpy
    function such as ``"getitem"``)."""
    def register(handler: Callable) -> Callable:
        for f in funcs:
            FUNCTIONS[f] = handler
        return handler
    return register


def handler(func) -> Callable:
    """The traced form of ``func``; an error naming it when there is none."""
    try:
        return FUNCTIONS[func]
    except KeyError:
        from .api_table import REFUSED  # noqa: PLC0415 (the table imports the registry)
        name = getattr(func, "__name__", str(func))
        module = "numpy." if isinstance(func, np.ufunc) or getattr(func, "__module__", "").startswith("numpy") else ""
        why = f": {REFUSED[name]}" if module and name in REFUSED else ""
        raise UnsupportedOperationError(f"{module}{name}", f"is not supported on traced arrays{why}") from None
