"""DLPack for device arrays: hand a ``DeviceArray`` to torch, JAX or numpy
(``DeviceArray.__dlpack__``), and take their arrays in ``asarray``.

Host memory.  slangpy's CPU device keeps buffers in host memory, and there
``Buffer.device_address`` is their host pointer.  So does lavapipe (Mesa's
software Vulkan): its device memory is a shared mapping in this process and
a buffer's device address is the pointer into it, which its backend checks
once (``lowering.backends.vulkan``: the address is mapped here, read and
write, and holds what the buffer holds) rather than trusting the driver's name.  On such a
device uploads and read-backs are plain copies into and out of the buffer,
and results can be handed over as views (``runtime``): on lavapipe reading
back a 200M-element gradient took 4-9 s through staging pieces and raised the
process's peak by 1.1x its bytes.

Export.  A float32, float64, float16 or int32 array on a host-memory device is
exported without a copy (the consumer's tensor is a view of the buffer and
keeps the array alive; writes through it change the array).  Elsewhere the
export is a host copy (a GPU's buffers are device memory; bool arrays are
stored as int32), and ``__dlpack_device__`` says CPU, where that copy lives.
A consumer passing ``copy=False`` gets ``BufferError`` instead of a copy.
A bfloat16 array is not exported at all (numpy's DLPack has no bfloat16):
``BufferError`` says to read it back, or to use ``sd.to_torch``.
CUDA buffers are exported as a host copy too (a CUDA DLPack export is not
built yet).

Import.  An upload is always one copy, into the device buffer slangpy
allocates.  A DLPack producer in host memory (numpy, torch CPU tensors, JAX CPU
arrays) is read in place by that upload, with no staging copy before it.  When
the producer's memory cannot be uploaded as it is (another device, a
non-contiguous layout, a dtype the program stores differently), ``asarray``
stages a host copy first and says so with a ``CopyWarning``, numpy arrays
included.
"""
from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from symdiff.ir.graph import DTYPES

from . import backends
from .backends import slangpy_base
from .slang import spy

CPU = (1, 0)  # (kDLCPU, device id): where every export lives
_VIEWABLE = ("float32", "float64", "float16", "bfloat16", "int32")  # stored as they are (bool is stored as int32)


class CopyWarning(UserWarning):
    """An array given to ``asarray`` was copied on the host before its upload."""


class _HostMemory:
    """A buffer's host memory behind numpy's array interface; holds the array
    owning the buffer, so a view (and any DLPack capsule made from it) keeps
    the buffer from being freed or handed back to an executable's spares."""

    def __init__(self, owner: Any, address: int, shape: tuple[int, ...], dtype: np.dtype):
        self.owner = owner
        self.__array_interface__ = {"data": (address, False), "shape": shape, "typestr": dtype.str,
                                    "version": 3}


def host_addressable(device: spy.Device) -> bool:
    """Whether ``device``'s buffers are host memory this process can address
    at their ``device_address``: its backend says (``Backend.host_memory``:
    slangpy's CPU device, and lavapipe once a probe passes); a device no
    backend made is treated as a GPU's, whose addresses are never dereferenced."""
    backend = slangpy_base.owner(device)
    return backend is not None and backend.host_memory()


def in_host_memory(kind: str) -> bool:
    """Whether arrays of device kind ``kind`` live in host memory, so that
    their DLPack export is a view (``host_addressable``)."""
    return backends.of(kind).host_memory()


def host_view(array: Any) -> np.ndarray | None:
    """A numpy view of ``array``'s buffer memory itself, or ``None`` where the
    buffer is not host memory (``host_addressable``) or is stored in another
    dtype (bool).  Waits for the device first: a call returning device arrays
    does not wait for its kernels."""
    buffer = array.buffer
    if not host_addressable(buffer.device) or array.dtype not in _VIEWABLE:
        return None
    buffer.device.wait()
    dtype = np.dtype(DTYPES[array.dtype])
    if array.size == 0:
        return np.zeros(array.shape, dtype)
    if array.dtype == "bfloat16":  # numpy's array interface has no bfloat16 (ml_dtypes' is void to it): its bits
        bits = np.asarray(_HostMemory(array, buffer.device_address, array.shape, np.dtype(np.uint16)))
        return bits.view(dtype)
    return np.asarray(_HostMemory(array, buffer.device_address, array.shape, dtype))


def viewable(dtype: str) -> bool:
    """Whether arrays of graph dtype ``dtype`` are stored as numpy holds them
    (bool is not: it is stored as int32), so that ``host_view`` can view them."""
    return dtype in _VIEWABLE


def export(array: Any, *, stream: Any = None, max_version: tuple[int, int] | None = None,
           dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> Any:
    """``array.__dlpack__(...)``: a capsule over the buffer memory where it is
    host memory, else over a host copy (refused under ``copy=False``)."""
    if array.dtype == "bfloat16":  # numpy's DLPack export knows no bfloat16 (ml_dtypes' is numpy's own)
        raise BufferError(f"a bfloat16 array cannot be exported through DLPack here: read it with .numpy() "
                          "(an ml_dtypes.bfloat16 array), or run the program through sd.to_torch, which hands "
                          "torch bfloat16 tensors")
    view = host_view(array)
    if view is None:
        if copy is False:
            raise BufferError(f"a {array.dtype} array on {array.device!r} lives outside host memory (or is stored "
                              "as another dtype): it can only be exported as a copy; pass copy=None or True")
        view, copy = array.numpy(), None
    return view.__dlpack__(stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)


def host_array(value: Any) -> np.ndarray:
    """``value`` as a numpy array: a DLPack producer in host memory is viewed
    in place; one elsewhere (a GPU tensor) is copied to the host with a
    ``CopyWarning``.  Other values go through ``np.asarray``."""
    if isinstance(value, np.ndarray) or not hasattr(value, "__dlpack__"):
        return np.asarray(value)
    if tuple(value.__dlpack_device__())[0] == CPU[0]:
        return np.from_dlpack(value)
    warnings.warn(CopyWarning(f"{type(value).__name__} on DLPack device {tuple(value.__dlpack_device__())} is "
                              "copied to host memory before its upload"), stacklevel=3)
    return np.from_dlpack(value, device="cpu", copy=True)


def staged(value: Any, host: np.ndarray, storage: type) -> np.ndarray:
    """``host`` (``host_array(value)``) as the C-contiguous ``storage`` array an
    upload reads; warns when that needs a copy of an array's memory (numpy's
    too: a transposed or float64-to-float32 argument kept on the device is the
    copy a hot loop means to avoid).  Python lists and numbers, converted by
    nature, do not warn."""
    upload = np.ascontiguousarray(host, dtype=storage).reshape(host.shape)  # it makes a 0-d array 1-d
    if upload.size and hasattr(value, "__dlpack__") and not np.may_share_memory(upload, host):
        reason = (f"dtype {host.dtype} is stored as {np.dtype(storage)}" if host.dtype != upload.dtype
                  else "its layout is not C-contiguous")
        warnings.warn(CopyWarning(f"{type(value).__name__} of shape {host.shape} is copied on the host before "
                                  f"its upload: {reason}"), stacklevel=3)
    return upload


# Pieces of transfers through staging buffers.  Read-backs take larger ones: on lavapipe an 800 MB
# read-back took 0.9-1.3 s in 64 MiB pieces, 2.8-5.7 s in 16 MiB ones (Buffer.to_numpy: 1.6-1.9 s).
UPLOAD_PIECE_BYTES = 16 << 20
READ_PIECE_BYTES = 64 << 20
_staging: dict[tuple[int, str], spy.Buffer] = {}  # per device and direction (devices live as long as the process)


def _staging_buffer(device: spy.Device, direction: str, size: int) -> spy.Buffer:
    """The device's one staging buffer of ``size`` bytes for ``direction``
    ("upload" or "read_back"), made on first use and kept for the next."""
    key = (id(device), direction)
    if key not in _staging or _staging[key].size < size:
        usage = spy.BufferUsage.copy_source if direction == "upload" else spy.BufferUsage.copy_destination
        _staging[key] = device.create_buffer(size=size, usage=usage, memory_type=getattr(spy.MemoryType, direction))
    return _staging[key]


def host_bytes(buffer: spy.Buffer) -> np.ndarray | None:
    """All of ``buffer``'s memory as a writable uint8 numpy view where it is
    host memory (``host_addressable``), else ``None``: a caller uploading
    into the same buffer call after call keeps it (``runtime``), and waits
    for the device before each write."""
    if not host_addressable(buffer.device):
        return None
    return memory_view(buffer, (buffer.size,), np.dtype(np.uint8))


def _host_memory(buffer: spy.Buffer, nbytes: int) -> np.ndarray | None:
    """The first ``nbytes`` of ``buffer`` as a writable uint8 numpy view where
    the buffer is host memory (``host_addressable``), else ``None``."""
    device = buffer.device
    if not host_addressable(device):
        return None
    device.wait()  # nothing recorded earlier still uses the buffer
    return memory_view(buffer, (nbytes,), np.dtype(np.uint8))


def memory_view(buffer: spy.Buffer, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """``buffer``'s memory as a writable numpy array of ``shape`` and ``dtype``
    (``lowering.host_products`` computes in it in place).  Only for a device
    whose buffers are host memory (``host_addressable``), once its work on the
    buffer is done."""
    if not host_addressable(buffer.device):
        raise ValueError("the buffer is not host memory: the host cannot compute in it")
    return np.asarray(_HostMemory(buffer, buffer.device_address, tuple(shape), dtype))


def upload(buffer: spy.Buffer, host: np.ndarray) -> None:
    """Copy ``host`` into ``buffer``: every upload of ``runtime`` goes through here.

    Where buffers are host memory (``host_addressable``) the array is copied
    straight into the buffer's memory: slangpy's own upload on the CPU device
    copied through a temporary of the array's size (a 200M-element float32
    upload raised the process's peak by 2x the array's bytes, 1x after).  On a GPU
    driver slangpy stages an upload in host-visible memory of its size and
    keeps that memory after the upload; uploaded in pieces through its own
    upload heap, the heap grew by each piece within a call.  So an upload over
    ``UPLOAD_PIECE_BYTES`` goes through one staging buffer of that size, refilled and
    copied piece by piece, each piece submitted and waited for: the staging
    memory is one piece, kept for the device's next large transfer."""
    data = uploadable(host)
    view = _host_memory(buffer, data.nbytes)
    if view is not None:
        view[:] = data.reshape(-1).view(np.uint8)
        return
    piece_bytes = UPLOAD_PIECE_BYTES
    if data.nbytes <= piece_bytes:
        buffer.copy_from_numpy(data)
        return
    device = buffer.device
    raw = data.reshape(-1).view(np.uint8)
    staging = _staging_buffer(device, "upload", piece_bytes)
    for offset in range(0, raw.size, piece_bytes):
        piece = raw[offset:offset + piece_bytes]
        staging.copy_from_numpy(piece)
        encoder = device.create_command_encoder()
        encoder.copy_buffer(buffer, offset, staging, 0, piece.size)
        device.wait_for_submit(device.submit_command_buffer(encoder.finish()))


def download(buffer: spy.Buffer, nbytes: int) -> np.ndarray:
    """The first ``nbytes`` of ``buffer`` as a new uint8 host array, once the
    device is done with it.  ``Buffer.to_numpy`` reads through a host-visible
    copy of the whole buffer and then copies it again: on lavapipe reading a
    200M-element gradient raised the process's peak by 2x its bytes for a 1x
    result.  Over ``READ_PIECE_BYTES`` the buffer is copied piece by piece
    through one read-back staging buffer into the array instead."""
    view = _host_memory(buffer, nbytes)
    if view is not None:
        return view.copy()
    piece_bytes = READ_PIECE_BYTES
    if nbytes <= piece_bytes:
        return buffer.to_numpy().view(np.uint8)[:nbytes]
    device = buffer.device
    out = np.empty(nbytes, np.uint8)
    staging = _staging_buffer(device, "read_back", piece_bytes)
    for offset in range(0, nbytes, piece_bytes):
        size = min(piece_bytes, nbytes - offset)
        encoder = device.create_command_encoder()
        encoder.copy_buffer(staging, 0, buffer, offset, size)
        device.wait_for_submit(device.submit_command_buffer(encoder.finish()))
        out[offset:offset + size] = staging.to_numpy().view(np.uint8)[:size]
    return out


def uploadable(host: np.ndarray) -> np.ndarray:
    """``host`` as slangpy's uploads take it (``upload``): they refuse read-only arrays (``np.asarray`` of a JAX array,
    what ``jax.pure_callback`` hands over, a memory map) though they only read
    them, so a read-only one is passed as a writable-flagged view of the same
    memory (no copy; nothing writes through it)."""
    if host.flags.writeable or not host.size:
        return host
    return np.asarray(_HostMemory(host, host.ctypes.data, host.shape, host.dtype))
