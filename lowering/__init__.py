"""Lowering: dataflow graphs to fused Slang compute kernels run by slangpy.

``compile(graph, device=...)`` plans kernels (``plan``), prints Slang
(``printer``, ``codegen``), compiles through a cache (``cache``) and returns an
``Executable`` (``runtime``) on a device whose backend (``backends``: one
module per device kind) ``devices`` settings and ``"auto"`` choose (between
GPU kinds by timing ``backend_probe``); a graph with
library nodes (``np.linalg``) is split around them (``host_steps``).
"""
from .backends import available_devices
from .cache import SlangGenerationError
from .devices import DeviceUnavailable
from .memory import clear_caches, held_bytes, limit as cache_limit, set_limit as set_cache_limit
from .plan_types import LoweringError
from .runtime import ArgumentError, DeviceArray, Executable, UnsupportedOnDevice, asarray, planned_buffers
from .host_steps import compile  # runtime.compile, or pieces and host steps around library nodes
from .source_view import SlangSource, highlight_html
from . import backend_probe  # noqa: F401  hands auto its probe for choosing between GPU kinds

__all__ = ["compile", "Executable", "DeviceArray", "asarray", "available_devices", "LoweringError",
           "SlangGenerationError", "UnsupportedOnDevice", "DeviceUnavailable", "SlangSource",
           "highlight_html", "ArgumentError", "clear_caches", "held_bytes", "cache_limit", "set_cache_limit",
           "planned_buffers"]
