"""The error raised when a graph cannot be differentiated as asked."""
from __future__ import annotations


class DifferentiationError(ValueError):
    """A differentiation request that cannot be served; the message names the
    container, connector or function at fault."""
