"""Running a library node's ``Kernel`` on device arrays: the step
``lowering.host_steps`` takes instead of a host step where the op has one.

One ``Launch`` per node and size binding: the module compiled once (cached
by its text), the scratch buffers kept, and one buffer kept per input that
comes as a host array (a program's argument, a host step's result), which
each call uploads into; each call records a clear of the
scratch and the dispatches into one command encoder and submits it without
waiting (the next piece's submission queues behind it), and hands its
results over as device arrays whose buffers come back to the launch's
spares when dropped, as an executable's results do (``lowering.runtime``).
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from .. import backends, cache, dlpack
from ..buffer_plan import STORAGE, buffer_bytes
from ..runtime import DeviceArray
from .registry import Kernel, Spec


class Launch:
    """``kernel`` compiled for device kind ``device``, producing ``outputs``."""

    def __init__(self, device: str, kernel: Kernel, outputs: Sequence[Spec]):
        self.device, self.kernel, self.outputs = device, kernel, tuple(outputs)
        self.backend = backends.of(device)
        dev = self.backend.device()
        entries = sorted({d.entry for d in kernel.dispatches})
        self.kernels = cache.kernels(device, dev, kernel.source, entries, at="maximal")
        self.scratch = [self.backend.new_buffer(buffer_bytes(dtype, count)) for dtype, count in kernel.scratch]
        self._spares: dict[int, list] = {}
        self._uploads: dict[int, object] = {}  # input position -> the buffer its host arrays go to

    def _output(self, shape: tuple[int, ...], dtype: str) -> DeviceArray:
        size = buffer_bytes(dtype, math.prod(shape))
        spares = self._spares.setdefault(size, [])
        buffer = spares.pop() if spares else self.backend.new_buffer(size)
        return DeviceArray.pooled_in(spares, buffer, shape, dtype, self.device)

    def _uploaded(self, k: int, array: np.ndarray):
        """Input ``k``'s host array in this launch's buffer for it (bool as int32 words)."""
        host = np.ascontiguousarray(array, dtype=STORAGE.get(array.dtype.name, array.dtype))
        buffer = self._uploads.get(k)
        if buffer is None or buffer.size < max(host.nbytes, 1):
            buffer = self._uploads[k] = self.backend.new_buffer(max(host.nbytes, 1))
        if host.size:
            dlpack.upload(buffer, host.reshape(-1))
        return buffer

    def __call__(self, inputs: Sequence[DeviceArray | np.ndarray]) -> list[DeviceArray]:
        outs = [self._output(shape, dtype) for shape, dtype in self.outputs]
        buffers = {**{f"in{k}": a.buffer if isinstance(a, DeviceArray) else self._uploaded(k, a)
                      for k, a in enumerate(inputs)},
                   **{f"out{k}": a.buffer for k, a in enumerate(outs)},
                   **{f"scratch{k}": b for k, b in enumerate(self.scratch)}}
        dev = self.backend.device()
        enc = dev.create_command_encoder()
        for b in self.scratch:
            enc.clear_buffer(b)
        for d in self.kernel.dispatches:
            self.kernels[d.entry].dispatch(thread_count=list(d.threads), command_encoder=enc,
                                           **{p: buffers[b] for p, b in d.buffers.items()}, **d.uniforms)
        dev.submit_command_buffer(enc.finish())
        if self.kernel.failure is not None:
            k, message = self.kernel.failure
            flags = dlpack.download(self.scratch[k], self.scratch[k].size).view(np.int32)
            if flags.any():
                raise np.linalg.LinAlgError(message)
        return outs
