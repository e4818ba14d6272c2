"""Bridges to other frameworks' autograd: ``to_torch`` and ``to_jax``.

Neither torch nor JAX is imported until a bridge is built or called, so
``import symdiff`` works without them."""
from .jax_bridge import to_jax
from .torch_bridge import to_torch

__all__ = ["to_torch", "to_jax"]
