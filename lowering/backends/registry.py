"""The registered backends, by device name, and which one a request means.

Each backend module registers one instance at import (``register``); the
order of registration is the order ``available_devices`` lists them in.
``auto`` ranks them, and measures between several GPU kinds (``choice``).
"""
from __future__ import annotations

import contextlib
from typing import Callable, Iterator

from .. import targets
from ..devices import DeviceUnavailable, requested
from ..targets import Target
from . import choice
from .base import Backend

_BACKENDS: dict[str, Backend] = {}
_probe: choice.Probe | None = None  # how auto times GPU kinds (set_probe)


def register(backend: Backend) -> Backend:
    """Make ``backend`` the one of its device name (its ``TARGET`` too, for
    ``targets.of``); returns it.  Registering a name again replaces it."""
    if not backend.name:
        raise ValueError(f"{type(backend).__name__} has no device name")
    if backend.TARGET is not None and backend.TARGET.name != backend.name:
        raise ValueError(f"backend {backend.name!r} states a target named {backend.TARGET.name!r}: "
                         f"give its Target the backend's name")
    _BACKENDS[backend.name] = backend
    if backend.TARGET is not None:
        targets.register(backend.TARGET)
    return backend


def unregister(name: str) -> None:
    """Forget the backend of device ``name`` (and its target): for tests registering their own."""
    backend = _BACKENDS.pop(name)
    if backend.TARGET is not None and targets.TARGETS.get(name) is backend.TARGET:
        del targets.TARGETS[name]


def kinds() -> tuple[str, ...]:
    """Every registered device name, in registration order."""
    return tuple(_BACKENDS)


def of(kind: str) -> Backend:
    """The backend of a resolved device kind (``resolve``)."""
    try:
        return _BACKENDS[kind]
    except KeyError:
        raise ValueError(f"unknown device {kind!r}: one of {', '.join(_BACKENDS)}") from None


def available_devices() -> list[str]:
    """Device names that work here, in registration order."""
    return [name for name, backend in _BACKENDS.items() if backend.available()]


def set_probe(probe: choice.Probe | None) -> choice.Probe | None:
    """Time GPU kinds with ``probe`` when ``auto`` has several to choose from
    (None: never measure, rank them); returns the probe it replaces.  The
    probe runs programs through ``lowering.runtime``, which imports this
    module, so ``lowering.backend_probe`` hands it in when it is imported."""
    global _probe
    previous, _probe = _probe, probe
    return previous


def auto(accepts: Callable[[Backend], bool] = lambda backend: True) -> str:
    """The device ``"auto"`` means here: of the available backends that
    ``accepts`` and that ``auto`` may pick, the lowest ``auto_rank``, except
    that several hardware-GPU kinds (CUDA and Vulkan on one card) are chosen
    between by timing a probe on each, once per machine (``choice.fastest``)."""
    ranked = sorted((rank, name) for name, backend in _BACKENDS.items()
                    if accepts(backend) and (rank := backend.auto_rank()) is not None and backend.available())
    if not ranked:
        raise DeviceUnavailable("no device here that device='auto' may pick")
    gpus = [_BACKENDS[name] for _, name in ranked if _BACKENDS[name].is_hardware_gpu()]
    if len(gpus) > 1 and _probe is not None and (measured := choice.fastest(gpus, _probe)) is not None:
        return measured
    return ranked[0][1]


def resolve(device: str | None) -> str:
    """The concrete device kind for a request (``None``: ``$SYMDIFF_DEVICE``,
    then ``"auto"``); a named kind must be available here."""
    name = requested(device)
    if name == "auto":
        return auto()
    if name not in _BACKENDS:
        raise ValueError(f"unknown device {name!r}: expected one of {('auto',) + kinds()}")
    if not _BACKENDS[name].available():
        raise DeviceUnavailable(f"device {name!r} is not available here (found {available_devices()})")
    return name


def change_targets(change: Callable[[Target], Target]) -> Callable[[], None]:
    """From now on every code-generating backend's ``target()`` comes through
    ``change``; returns what undoes it.  The fuzzer and the GPU benchmarks
    plan for lavapipe as for a hardware GPU (their "GPU form"), or with other
    ``Tuning`` numbers, this way."""
    saved = {}
    for backend in _BACKENDS.values():
        if not backend.interprets:
            saved[backend] = backend.__dict__.get("target")
            backend.target = (lambda own: lambda: change(own()))(backend.target)

    def undo() -> None:
        for backend, own in saved.items():
            if own is None:
                del backend.target
            else:
                backend.target = own
    return undo


@contextlib.contextmanager
def targets_changed(change: Callable[[Target], Target]) -> Iterator[None]:
    """``change_targets`` for the block."""
    undo = change_targets(change)
    try:
        yield
    finally:
        undo()
