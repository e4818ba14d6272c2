"""Backends: one module per device kind, each registering itself.

A backend module holds everything about its kind: its capabilities (its
``targets.Target``, numbers included), how ``auto`` ranks it, its device and
buffers, its compile policy, and for the interpreter how a call runs
(``base.Backend``).  Code elsewhere asks ``of(kind)`` these questions and
never compares device names.

* ``cuda``, ``vulkan`` (lavapipe too) and ``cpu`` drive slangpy
  (``slangpy_base.SlangpyBackend``); ``lowering.runtime`` runs their programs.
* ``interpreter`` is ``device="numpy"``: the IR interpreter.

``"auto"`` takes the lowest ``auto_rank``; where several hardware-GPU kinds
are available it times a probe on each once per machine and keeps the
fastest (``choice``).

A new kind (Metal, D3D12) is one more module here, imported below: a
``SlangpyBackend`` subclass with its ``Target``, registered with
``register(...)`` (docs/design.md, "Adding a backend").
"""
from .base import Backend
from .registry import (auto, available_devices, change_targets, kinds, of, register, resolve, set_probe,
                       targets_changed, unregister)
from . import cuda, vulkan, cpu, interpreter  # noqa: E402  registration order: how available_devices lists them

__all__ = ["Backend", "auto", "available_devices", "change_targets", "kinds", "of", "register", "resolve",
           "set_probe", "targets_changed", "unregister", "cuda", "vulkan", "cpu", "interpreter"]
