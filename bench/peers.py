"""The peers symdiff is measured against: numpy (forward only), JAX and PyTorch.

A peer turns a workload and its inputs into a ``Runner``: two zero-argument
callables that block until their result is ready, plus a conversion of the
gradient result to numpy for the correctness check (kept out of the timed
call).  A peer whose package is not installed is skipped, not an error.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import types
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from symdiff.interop.torch_bridge import from_numpy, host_array

from .workloads import Workload

Grads = tuple[float, dict[str, np.ndarray]]


@dataclass
class Runner:
    forward: Callable[[], Any]
    value_and_grad: Callable[[], Any] | None      # None: the peer has no gradients (numpy)
    to_numpy: Callable[[Any], Grads]              # value_and_grad's result -> (value, {name: grad})


class Peer:
    name: str
    package: str

    def available(self) -> bool:
        return importlib.util.find_spec(self.package) is not None

    def version(self) -> str:
        return importlib.metadata.version(self.package)

    def runner(self, workload: Workload, inputs: dict[str, np.ndarray]) -> Runner:
        raise NotImplementedError


class NumpyPeer(Peer):
    name, package = "numpy", "numpy"

    def runner(self, workload: Workload, inputs: dict[str, np.ndarray]) -> Runner:
        body, args = workload.array_body(for_jax=False), list(inputs.values())
        return Runner(lambda: body(np, *args), None, lambda out: (float(out), {}))


class JaxPeer(Peer):
    """``jax.jit(jax.value_and_grad(f))`` in float32, as a JAX user would write it, on
    ``device`` (a JAX platform: the CPU unless bench.gpu asks for "gpu")."""

    name, package = "jax", "jax"

    def runner(self, workload: Workload, inputs: dict[str, np.ndarray], device: str = "cpu") -> Runner:
        import jax
        import jax.numpy as jnp

        body, names = workload.array_body(for_jax=True), list(inputs)
        argnums = tuple(names.index(w) for w in workload.wrt)
        args = [jax.device_put(v, jax.devices(device)[0]) for v in inputs.values()]
        fwd = jax.jit(lambda *a: body(jnp, *a))
        vg = jax.jit(jax.value_and_grad(lambda *a: body(jnp, *a), argnums=argnums))

        def to_numpy(out: Any) -> Grads:
            value, grads = out
            return float(value), {w: np.asarray(g) for w, g in zip(workload.wrt, grads)}

        return Runner(lambda: fwd(*args).block_until_ready(),
                      lambda: jax.block_until_ready(vg(*args)), to_numpy)


def torch_namespace() -> types.SimpleNamespace:
    """``torch`` with numpy's spelling where the two differ for our bodies
    (``maximum`` with a Python scalar, ``max`` returning values, ``copy``)."""
    import torch

    ns = types.SimpleNamespace(**{k: getattr(torch, k) for k in dir(torch) if not k.startswith("_")})
    ns.maximum = lambda a, b: torch.clamp_min(a, b) if isinstance(b, float) else torch.maximum(a, b)
    ns.max = lambda a, axis=None, keepdims=False: (
        torch.amax(a) if axis is None else torch.amax(a, dim=axis, keepdim=keepdims))
    ns.copy = torch.clone
    return ns


class TorchPeer(Peer):
    """PyTorch eager autograd: a forward pass, then ``torch.autograd.grad``, on ``device``
    (a torch device: the CPU unless bench.gpu asks for "cuda")."""

    name, package = "torch", "torch"

    def runner(self, workload: Workload, inputs: dict[str, np.ndarray], device: str = "cpu") -> Runner:
        import torch

        tnp = torch_namespace()
        body = workload.array_body(for_jax=False)
        args = [from_numpy(v.copy()).to(device).requires_grad_(n in workload.wrt) for n, v in inputs.items()]
        wrt_args = [a for n, a in zip(inputs, args) if n in workload.wrt]

        def forward() -> Any:
            with torch.no_grad():
                return body(tnp, *args)

        def value_and_grad() -> Any:
            value = body(tnp, *args)
            return value.detach(), torch.autograd.grad(value, wrt_args)

        def to_numpy(out: Any) -> Grads:
            value, grads = out
            return float(value), {w: host_array(g) for w, g in zip(workload.wrt, grads)}

        return Runner(forward, value_and_grad, to_numpy)


PEERS: list[Peer] = [NumpyPeer(), JaxPeer(), TorchPeer()]
