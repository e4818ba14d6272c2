"""``python -m bench.zero_copy --device cuda [--json PATH]``: whether arrays cross
between symdiff and torch / JAX without a copy, checked by pointers.

A copy is invisible in results and cheap in a small test, so each path is
judged by where the consumer's memory is: the consumer's data pointer
(``Tensor.data_ptr()``, JAX's ``unsafe_buffer_pointer()``) against the slangpy
buffer's ``device_address``, and the consumer's device against the one the
arrays should stay on (CUDA for ``device="cuda"``; host memory for slangpy's
CPU device and lavapipe).  Where the consumer can write (torch), a write
through it must show in the other side too.  Paths:

* ``export->torch`` / ``export->jax``: a program's result kept on the device
  (``device_arrays=True``) taken by ``torch.from_dlpack`` / ``jax.dlpack``;
* ``import<-torch`` / ``import<-jax``: ``sd.asarray`` of a tensor already on
  the device;
* ``to_torch`` / ``to_jax``: the bridges' results (``sd.to_torch``,
  ``sd.to_jax``) against the buffers symdiff exported during the call.

Run by ``bench.gpu_session``'s ``interop`` stage on CUDA; runs anywhere.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

import symdiff as sd
from symdiff import lowering
from symdiff.lowering import dlpack

N = 4096


@sd.differentiable_program
def affine(x: sd.f32[N]):
    return x * 2.0 + 1.0


def expected(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float64) * 2.0 + 1.0


def address(array: Any) -> int:
    """Where ``array``'s elements are: a symdiff device array's buffer address,
    a torch tensor's data pointer, a JAX array's buffer pointer."""
    if isinstance(array, lowering.DeviceArray):
        return int(array.buffer.device_address)
    if hasattr(array, "data_ptr"):
        return int(array.data_ptr())
    return int(array.unsafe_buffer_pointer())


def place(array: Any) -> str:
    """The consumer's device type: ``cuda``/``gpu`` or ``cpu``."""
    if hasattr(array, "data_ptr"):
        return array.device.type
    return next(iter(array.devices())).platform


def stays_on(device: str) -> set[str]:
    """The device types a zero-copy consumer's array has for symdiff ``device``."""
    return {"cuda", "gpu"} if device == "cuda" else {"cpu"}


def torch_device(device: str) -> str:
    return "cuda" if device == "cuda" else "cpu"


def _synchronize() -> None:
    import torch
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


@contextlib.contextmanager
def exported() -> Iterator[list[int]]:
    """The buffer addresses symdiff hands out through DLPack in the block."""
    addresses: list[int] = []
    export = dlpack.export

    def recording(array, **kwargs):
        addresses.append(address(array))
        return export(array, **kwargs)
    dlpack.export = recording
    try:
        yield addresses
    finally:
        dlpack.export = export


def row(device: str, producer: int, consumer: Any, values_ok: bool, copy_warnings: int = 0,
        aliased: bool | None = None) -> dict[str, Any]:
    """One path's verdict: zero-copy when the consumer's pointer is the
    producer's, on the device the data should stay on, and (where checked) a
    write through one shows in the other."""
    on = place(consumer)
    same = address(consumer) == producer
    zero = same and on in stays_on(device) and aliased is not False
    theirs = f"symdiff's {producer:#x}" if producer else "no buffer symdiff handed over"
    why = ("same memory" if zero else f"a copy: consumer on {on}, pointer {address(consumer):#x} "
           f"{'==' if same else '!='} {theirs}"
           + ("" if aliased is None else f", a write through it {'shows' if aliased else 'does not show'}"))
    return {"zero_copy": zero, "values_ok": bool(values_ok), "consumer_device": on,
            "copy_warnings": copy_warnings, "detail": why}


def _export_torch(device: str, x: np.ndarray) -> dict[str, Any]:
    import torch
    out = affine(x, device=device, device_arrays=True)
    tensor = torch.from_dlpack(out)
    ok = np.allclose(tensor.cpu().numpy(), expected(x), rtol=1e-6)
    tensor[0] = -7.0  # through torch; read back from the buffer by symdiff
    _synchronize()
    return row(device, address(out), tensor, ok, aliased=float(out.numpy()[0]) == -7.0)


def _export_jax(device: str, x: np.ndarray) -> dict[str, Any]:
    import jax
    out = affine(x, device=device, device_arrays=True)
    array = jax.dlpack.from_dlpack(out)
    return row(device, address(out), array, np.allclose(np.asarray(array), expected(x), rtol=1e-6))


def _import(device: str, consumer: Any, write: Callable[[], None] | None, x: np.ndarray) -> dict[str, Any]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", dlpack.CopyWarning)
        on_device = sd.asarray(consumer, device=device)
    copies = sum(issubclass(w.category, dlpack.CopyWarning) for w in caught)
    ok = np.allclose(np.asarray(affine(on_device, device=device)), expected(x), rtol=1e-6)
    aliased = None
    if write is not None:
        write()
        _synchronize()
        aliased = float(on_device.numpy()[0]) == -7.0
    return row(device, address(on_device), consumer, ok, copies, aliased)


def _import_torch(device: str, x: np.ndarray) -> dict[str, Any]:
    import torch
    tensor = torch.from_numpy(x.copy()).to(torch_device(device))
    return _import(device, tensor, lambda: tensor.__setitem__(0, -7.0), x)


def _import_jax(device: str, x: np.ndarray) -> dict[str, Any]:
    import jax
    platform = "gpu" if device == "cuda" else "cpu"
    return _import(device, jax.device_put(x, jax.devices(platform)[0]), None, x)


def _bridge(device: str, call: Callable[[], Any], x: np.ndarray) -> dict[str, Any]:
    with exported() as addresses, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", dlpack.CopyWarning)
        result = call()
        _synchronize()
    copies = sum(issubclass(w.category, dlpack.CopyWarning) for w in caught)
    ok = np.allclose(np.asarray(result.cpu() if hasattr(result, "cpu") else result), expected(x), rtol=1e-6)
    producer = address(result) if address(result) in addresses else (addresses[-1] if addresses else 0)
    return row(device, producer, result, ok, copies)


def _to_torch(device: str, x: np.ndarray) -> dict[str, Any]:
    import torch
    tensor = torch.from_numpy(x.copy()).to(torch_device(device))
    return _bridge(device, lambda: sd.to_torch(affine, device=device)(tensor), x)


def _to_jax(device: str, x: np.ndarray) -> dict[str, Any]:
    import jax
    array = jax.device_put(x, jax.devices("gpu" if device == "cuda" else "cpu")[0])
    return _bridge(device, lambda: sd.to_jax(affine, device=device)(array), x)


PATHS: dict[str, Callable[[str, np.ndarray], dict[str, Any]]] = {
    "export->torch": _export_torch, "export->jax": _export_jax, "import<-torch": _import_torch,
    "import<-jax": _import_jax, "to_torch": _to_torch, "to_jax": _to_jax}


def check(device: str) -> dict[str, Any]:
    """Every path on ``device``; a path that raises is reported with its error."""
    x = np.linspace(-1, 1, N, dtype=np.float32)
    rows = []
    for name, path in PATHS.items():
        try:
            rows.append({"path": name, **path(device, x)})
        except Exception as exc:  # reported: the other paths still run
            rows.append({"path": name, "zero_copy": None, "values_ok": False,
                         "detail": f"error: {type(exc).__name__}: {str(exc).strip()[:300]}"})
    return {"device": device, "rows": rows, "all_zero_copy": all(r["zero_copy"] for r in rows),
            "values_ok": all(r["values_ok"] for r in rows)}


def main(argv: list[str]) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m bench.zero_copy", description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", help="symdiff device (default cuda)")
    p.add_argument("--json", type=Path, help="write the result here")
    args = p.parse_args(argv)
    result = check(args.device)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    for r in result["rows"]:
        print(f"{r['path']:<14} {'zero-copy' if r['zero_copy'] else 'COPY' if r['zero_copy'] is False else 'ERROR':<9} "
              f"values {'ok' if r['values_ok'] else 'WRONG'}  {r['detail']}")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
