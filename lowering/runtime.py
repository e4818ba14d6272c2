"""Running planned programs through slangpy: buffers, one command encoder per
call, readback, device-resident arrays.

An ``Executable`` keeps one instance per size binding (plan, kernels and every
buffer), so a repeated call with the same shapes compiles nothing and
allocates nothing: it uploads the inputs, records fills and dispatches into
one command encoder, submits once and reads the results back.

A call returning device arrays hands the caller the buffers its kernels wrote
the results into (no copy), and a spare buffer of the same size takes each
one's place for the next call: a result array the caller drops goes back to
the executable's spares (``DeviceArray.__del__``), so a loop that keeps only the
latest results allocates nothing after its first calls.

Those buffers are the executable's per-call state, so calls of one executable
are serialised by a lock (calls from several Python threads would otherwise
overwrite each other's inputs and read each other's results); different
executables still run side by side.
"""
from __future__ import annotations

import math
import threading
import time
import weakref
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

from symdiff import ir
from symdiff.ir.graph import DTYPES, DataflowGraph
from symdiff.ir import tasklet_notes as notes
from symdiff.ir.storage import computed_in_float32

from . import backends, cache, devices, disk_cache, dlpack, memory
from .backends.slangpy_base import SlangpyBackend
from .bounds_check import FLAG, FLAG_WORDS, raise_violation
from .buffer_plan import STORAGE, BufferPlan, buffer_bytes, plan_buffers
from .codegen import PROGRAM, KernelEntry, Module, generate, identifier
from .collector import fewer_collections
from .deterministic import check_atomic_free, owner_computes
from .direct_program import DirectProgram
from .host_products import HostProduct
from .plan import plan
from .plan_types import LoweringError, Plan
from .printer import is_exact_in_double
from .slang import spy
from .source_view import SlangSource
from .threads import cpu_workers






class UnsupportedOnDevice(LoweringError):
    """The program would compute wrong numbers on the requested device."""


class ArgumentError(ValueError):
    """An argument whose values would change on conversion to its dtype."""


def host_argument(name: str, value, dtype: str) -> np.ndarray:
    """``value`` as a numpy array of the graph dtype ``dtype``, refusing
    conversions that would change an index: floats for an int32 argument
    (truncated) and integers past int32's range (they would wrap, and then
    pass any bounds check)."""
    host = np.asarray(value)
    if dtype == "int32":
        if host.dtype.kind not in "biu":
            raise ArgumentError(f"argument {name!r} is an int32 (index) argument but holds {host.dtype} values; "
                                "converting would truncate them: pass integers (e.g. np.rint(x).astype(np.int32))")
        if host.size and not np.can_cast(host.dtype, np.int32) and \
                (host.min() < np.iinfo(np.int32).min or host.max() > np.iinfo(np.int32).max):
            bad = host.max() if host.max() > np.iinfo(np.int32).max else host.min()
            raise ArgumentError(f"argument {name!r} is an int32 (index) argument but holds {bad}, outside int32's "
                                f"range [-2**31, 2**31): it would wrap around")
    return host.astype(DTYPES[dtype], copy=False)


def _new_buffer(backend: SlangpyBackend, dtype: str, count: int, data: np.ndarray | None = None) -> spy.Buffer:
    buffer = backend.new_buffer(buffer_bytes(dtype, count))
    if data is not None and data.size:
        dlpack.upload(buffer, np.ascontiguousarray(data, dtype=STORAGE[dtype]))
    return buffer


def _readback(buffer: spy.Buffer, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    nbytes = buffer_bytes(dtype, math.prod(shape)) if math.prod(shape) else 0
    return _host_array(dlpack.download(buffer, nbytes) if nbytes else np.zeros(0, np.uint8), dtype, shape)


def _host_array(raw: np.ndarray, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """A result from its buffer's bytes (buffers may be longer than their arrays)."""
    count = math.prod(shape)
    if count == 0:
        return np.zeros(shape, dtype=DTYPES[dtype])
    values = raw.view(STORAGE[dtype])[:count].reshape(shape)
    return values.astype(np.bool_) if dtype == "bool" else values


READ_ALIGNMENT = 256  # bytes between results packed into one read-back buffer
READ_PACKED_BYTES = 1 << 20  # larger results are read from their own buffers (no second copy kept)
HOT_RECOMPILE = 2.0  # calls' seconds at g++ -O0 over their module's compile seconds before it is compiled at -O3
LATER_POLL = 0.01  # seconds between two looks for a module's -O3 library compiled in the background
RECORDED_BINDINGS = 64  # buffer sets an instance keeps bound launches for (_record): a loop's few alternating sets


class DeviceArray:
    """An array living in a slangpy buffer: executables take and return it so
    repeated calls move no data; ``np.asarray`` reads it back."""

    def __init__(self, buffer: spy.Buffer, shape: tuple[int, ...], dtype: str, device: str):
        self.buffer, self.shape, self.dtype, self.device = buffer, tuple(shape), dtype, device
        self._pool: list | None = None  # where its buffer goes when it is dropped (``pooled_in``)

    @classmethod
    def pooled_in(cls, pool: list, buffer: spy.Buffer, shape: tuple[int, ...], dtype: str,
                  device: str) -> "DeviceArray":
        """An array of ``buffer`` that puts it back in ``pool`` when dropped
        (an executable's spares, a loop's states): the buffer outlives it.
        ``__del__`` does it: a ``weakref.finalize`` per result cost 3.7 us
        against 0.3 (measured), a tenth of a small call's host side."""
        array = cls(buffer, shape, dtype, device)
        array._pool = pool
        return array

    @property
    def pooled(self) -> bool:
        """Whether its buffer goes back to a pool when it is dropped (``pooled_in``)."""
        return self._pool is not None

    def __del__(self) -> None:
        pool = getattr(self, "_pool", None)  # absent if __init__ did not finish
        if pool is not None:
            pool.append(self.buffer)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numpy(self) -> np.ndarray:
        return _readback(self.buffer, self.dtype, self.shape)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        out = self.numpy()
        return out.astype(dtype) if dtype is not None else out

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """DLPack export (``torch.from_dlpack``, ``np.from_dlpack``, JAX): a view
        of the buffer on slangpy's CPU device, a host copy elsewhere (``lowering.dlpack``)."""
        return dlpack.export(self, stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)

    def __dlpack_device__(self) -> tuple[int, int]:
        return dlpack.CPU

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype}, device={self.device!r})"


def _device_dtype(dtype: np.dtype) -> str:
    """The graph dtype an array of ``dtype`` becomes on a device: its own where
    the IR has it, int32 for other integers (numpy's and torch's default int64
    index arrays), float32 for other floats."""
    if dtype.name in DTYPES:
        return dtype.name
    return "int32" if dtype.kind in "iu" else "float32"


def asarray(array, device: str | None = None, dtype: str | None = None) -> DeviceArray:
    """Upload ``array`` once to a device (``None``: the default device).

    ``array`` may be any DLPack producer (torch, JAX, numpy): host memory is
    read in place by the upload; where a host copy must come first (another
    device, a non-contiguous layout, a dtype conversion) a
    ``lowering.dlpack.CopyWarning`` says so."""
    kind = backends.resolve(device)
    backend = backends.of(kind)
    if backend.interprets:
        raise ValueError(f"the {kind} device keeps arrays in host memory: pass numpy arrays instead")
    if isinstance(array, DeviceArray) and array.device == kind and (dtype is None or dtype == array.dtype):
        return array
    host = dlpack.host_array(array)  # a DLPack producer's host memory, read in place by the upload
    name = dtype or _device_dtype(host.dtype)
    if name == "int32":
        host = host_argument("array", host, "int32")  # int64 indices: range-checked, never wrapped
    host = dlpack.staged(array, host, STORAGE[name])
    buffer = _new_buffer(backend, name, host.size, host)
    return DeviceArray(buffer, host.shape, name, kind)


def unsafe_double_tasklets(graph: DataflowGraph) -> list[str]:
    """Tasklets computing a double transcendental (wrong on lavapipe)."""
    bad = []
    for t in graph.tasklets():
        touched = [m.container for _, m in graph.reads(t.name) + graph.writes(t.name)]
        if any(graph.containers[c].dtype == "float64" for c in touched) and \
                not all(is_exact_in_double(e) for e in t.body.values()):
            bad.append(t.name + (f" ({t.source})" if t.source else ""))
    return bad


@dataclass
class _Dispatch:
    """One kernel launch of a call, resolved once per size binding: only the
    parameters naming argument versions change from call to call."""

    kernel: spy.ComputeKernel
    thread_count: list[int]
    params: dict  # parameter -> buffer or uniform value
    per_call: dict[str, str]  # parameter -> argument access node, bound per call


@dataclass
class _Instance:
    """Everything one size binding needs, built once."""

    plan: Plan
    module: Module
    kernels: dict[str, spy.ComputeKernel]
    buffers: dict[str, spy.Buffer]
    shapes: dict[str, tuple[int, ...]]
    latest: dict[str, str]  # result -> its latest version's access node
    dispatches: dict[str, _Dispatch]  # kernel entry name (or PROGRAM) -> its launch (none for empty kernels)
    buffer_plan: BufferPlan  # which versions share allocations (lowering.buffer_plan)
    launches: list[list[KernelEntry]]  # kernels as dispatched (lowering.buffer_plan.launches_of)
    readback: spy.Buffer | None = None  # host-visible: small results of a call are copied here and read at once
    key: tuple = ()  # the size binding, as lowering.memory knows this instance
    handed: set[str] = field(default_factory=set)  # versions whose buffer a caller holds (_hand_over)
    level: str = "maximal"  # the kernels' optimisation level (lowering.cache)
    compile_seconds: float = 0.0  # what compiling them took (lowering.cache)
    run_seconds: float = 0.0  # calls' wall seconds at a level below maximal (Executable._recompile_if_hot)
    later: Path | None = None  # created once the module's -O3 library is on disk (cache.later_marker)
    later_checked: float = 0.0  # when a call last looked for it (perf_counter)
    # _record(): launch and buffers -> (its root shader object or host product run, the buffers, kept alive so
    # that their ids stay theirs)
    bound: dict[tuple, tuple] = field(default_factory=dict)
    watched: set[int] = field(default_factory=set)  # ids of callers' buffers bound above (Executable._watch)
    # made once and kept for the calls after (each cost microseconds a call): host views of upload buffers
    # by buffer id (Executable._upload, kept with their buffers), the zero fills' schedule (_fill_schedule),
    # the launch list per worker count (Executable._launches), the read-back layout per result set (_read)
    views: dict[int, tuple] = field(default_factory=dict)
    fills: tuple | None = None
    launch_list: tuple | None = None
    read_layout: tuple | None = None
    held: int | None = None  # held_bytes, None once buffers change
    arguments: list | None = None  # (name, access, dtype) of each argument stored in a buffer (_bind_arguments)
    result_plans: dict[tuple, tuple] = field(default_factory=dict)  # Executable._result_plan

    def held_buffers(self) -> dict[int, int]:
        """Size of each buffer this binding keeps between calls, by identity (a
        slot shared by several versions, or a result handed over, counts once)."""
        held = {id(b): b.size for b in self.buffers.values()}
        if self.readback:
            held[id(self.readback)] = self.readback.size
        return held

    @property
    def held_bytes(self) -> int:
        """Bytes of the buffers this binding keeps between calls: counted
        again only after its buffers changed (``held`` is reset then), not on
        every call (a size per buffer through slangpy, 40 of them for a
        small RNN)."""
        if self.held is None:
            self.held = sum(self.held_buffers().values())
        return self.held

    def release(self) -> None:
        """Give every buffer back; plan and module stay for inspection."""
        self.buffers, self.dispatches, self.readback, self.handed, self.bound = {}, {}, None, set(), {}
        self.watched, self.views, self.launch_list, self.read_layout, self.held = set(), {}, None, None, None
        self.result_plans = {}


class Executable:
    """A compiled program: ``exe(inputs) -> {result: array}``."""

    def __init__(self, graph: DataflowGraph, device: str, sizes: Mapping[str, int] | None = None,
                 deterministic: bool = False, source: DataflowGraph | None = None, repeated: bool = False):
        self.graph = graph
        self.repeated = repeated  # called many times per run (a loop body): compiled at full optimisation
        self.source_graph = source or graph  # the caller's graph, before rewrites: errors are told in its terms
        self.deterministic = deterministic
        self.device = device
        self.backend = backends.of(device)
        self.sizes = dict(sizes or {})
        self._instances: dict[tuple, _Instance] = {}
        self._arguments = tuple(graph.arguments)
        self._bound: dict[tuple, tuple[dict[str, int], tuple]] = {}  # argument shapes (and sizes) -> bound sizes, key
        self._last: _Instance | None = None
        self._spares: dict[int, list[spy.Buffer]] = {}  # bytes -> buffers of dropped result arrays
        self._stats = {"kernels": 0, "dispatches": 0, "bytes_moved": 0, "compile_time": 0.0,
                       "compiles": 0, "buffers_allocated": 0, "calls": 0,
                       "peak_bytes": 0, "saved_bytes": 0}
        # One call at a time: instances (their buffers) are reused by every call.
        self._lock = threading.RLock()
        self._results_in_host_memory = dlpack.in_host_memory(device)
        if not self.backend.interprets and not (graph.size_symbols() - {ir.size_symbol(k) for k in self.sizes}):
            self._instance(dict(self.sizes))

    @property
    def source(self) -> SlangSource | None:
        """Slang text of the latest size binding (None on the numpy device);
        a ``str`` that Jupyter shows highlighted."""
        return SlangSource(self._last.module.source) if self._last else None

    def stats(self) -> dict:
        """kernels (of the latest binding), dispatches and bytes_moved (of the
        latest call), compile_time (seconds, total), compiles, buffers_allocated;
        peak_bytes: the latest binding's buffers for intermediates and results
        (``lowering.buffer_plan``: all live at once during a call), and
        saved_bytes: what sharing buffers between versions with disjoint
        lifetimes saved against one buffer each.  Arguments' upload buffers
        and small results' read-back buffer come on top (a result written over
        an argument's upload, ``BufferPlan.upload_of``, adds nothing)."""
        return dict(self._stats)

    def kernels(self) -> dict[str, list[str]]:
        """``{kernel: [tasklet, ...]}`` of the latest size binding in dispatch
        order, kernels named as in ``source``: which tasklets were fused
        together, for tools that explain a program.  Tasklets carry their names
        in ``graph``, also where the plan split one over several kernels.
        Empty on the numpy device and before symbolic sizes are bound."""
        if self._last is None:
            return {}
        return {identifier(k.name): list(dict.fromkeys(o for s in k.all_steps
                                                       for o in (notes.origin(s.tasklet), *notes.folded(s.tasklet))))
                for k in self._last.plan.kernels}

    def _instance(self, sizes: dict[str, int], key: tuple | None = None) -> _Instance:
        """The instance of size binding ``sizes`` (``key``: its sorted items, where known)."""
        key = tuple(sorted(sizes.items())) if key is None else key
        inst = self._instances.get(key)
        if inst is not None and inst is self._last:
            return inst
        if inst is None:
            start = time.perf_counter()
            before = cache.stats["compiles"]
            target = self.backend.target()  # lavapipe: its own maths helpers
            def lower() -> tuple[Plan, Module]:
                p = plan(self.graph, sizes, target)
                if self.deterministic and not self.backend.orders_colliding_writes():
                    check_atomic_free(p)
                return p, generate(p, target)
            # another process may have planned this graph already (lowering.disk_cache)
            with fewer_collections():
                p, module = disk_cache.cached("lowered", (disk_cache.graph_key(self.graph),
                                                          repr(sorted(sizes.items())), repr(target),
                                                          repr(self.deterministic)), lower)
            dev = self.backend.device()
            entries = module.entry_points(target.sequential)
            # a loop body runs many times; a deterministic program must not switch code (-O0 and -O3
            # results differ in the last bits): both compile at -O3 at once
            work = None if self.repeated or self.deterministic else sum(max(k.work, k.threads) for k in module.kernels)
            level = cache.level_for(self.device, module.source, work)
            kernels = cache.kernels(self.device, dev, module.source, entries, at=level)
            g = p.graph
            shapes = {a: g.containers[g.node(a).container].shape for a in p.stored}
            latest = {r: p.buffer_of(g.latest(r)) for r in g.results}  # its buffer's version
            bplan, launches = plan_buffers(p, module, target.sequential)
            slots = [self.backend.new_buffer(n) for n in bplan.slot_bytes]
            buffers = {a: self.backend.new_buffer(n) for a, n in bplan.own_bytes.items()}
            buffers.update({a: slots[s] for a, s in bplan.slot_of.items()})
            for version, argument in bplan.upload_of.items():  # a version written over an upload
                c = g.containers[g.node(argument).container]
                buffers[version] = buffers[argument] = _new_buffer(self.backend, c.dtype, math.prod(c.shape))
            enc = dev.create_command_encoder()
            for buffer in {id(b): b for b in buffers.values()}.values():
                enc.clear_buffer(buffer)  # versions nobody writes read as zeros
            if module.checks:  # the kernels guard data-dependent indices (lowering.bounds_check)
                buffers[FLAG] = _new_buffer(self.backend, "int32", FLAG_WORDS)
            dev.submit_command_buffer(enc.finish())
            self._stats["buffers_allocated"] += (len(slots) + len(bplan.own_bytes) + len(bplan.upload_of)
                                                 + (FLAG in buffers))
            self._stats["compiles"] += cache.stats["compiles"] - before
            self._stats["compile_time"] += time.perf_counter() - start
            handed = {a for a in latest.values() if a in buffers}  # bound per call: handed over (_hand_over)
            per_call = handed | set(bplan.upload_of.values())  # and arguments: a caller's device array
            inst = self._instances[key] = _Instance(p, module, kernels, buffers, shapes, latest,
                                                    self._dispatches(module, kernels, buffers, per_call), bplan,
                                                    launches, key=key, level=level,
                                                    compile_seconds=cache.compile_seconds(self.device, module.source, level),
                                                    later=(cache.later_marker(self.device, module.source)
                                                           if level != "maximal" else None))
            memory.hold(self, key, inst.held_bytes, self.device)  # may release older bindings past the limit
        self._last = inst
        self._stats["kernels"] = len(inst.plan.kernels)
        self._stats["peak_bytes"] = inst.buffer_plan.peak_bytes
        self._stats["saved_bytes"] = inst.buffer_plan.saved_bytes
        return inst

    def release_instance(self, key: tuple) -> bool:
        """Give back the buffers of size binding ``key`` (``lowering.memory``),
        unless a call of this executable is running in another thread."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            inst = self._instances.pop(key, None)
            if inst is not None:
                inst.release()
            self._spares.clear()
            return True
        finally:
            self._lock.release()

    def __call__(self, inputs: Mapping[str, np.ndarray | DeviceArray], sizes: Mapping[str, int] | None = None,
                 return_device_arrays: bool = False, check_bounds: bool = True) -> dict[str, np.ndarray | DeviceArray]:
        """Run the program on ``inputs`` (numpy or ``DeviceArray``s of this device).

        Data-dependent indices (gathers, scatters) are checked in the kernels:
        out of range, a read gives 0 and a write is dropped, and the call
        raises ``ir.IndexOutOfRange`` naming the access, the tasklet and its
        line (and the index argument's element where one is at fault).
        ``check_bounds=False`` skips reading the check's flag after the call
        (no raise, no wait for device-array results); the guards stay, so no
        index touches memory outside its array.  The numpy device always raises.
        """
        with self._lock:
            start = time.perf_counter()
            results = self._call(inputs, sizes, return_device_arrays, check_bounds)
            if self._last is not None and self._last.level != "maximal":
                self._recompile_if_hot(self._last, time.perf_counter() - start)
            return results

    def _recompile_if_hot(self, inst: _Instance, seconds: float) -> None:
        """Compile ``inst``'s module again at full optimisation once its -O3
        library is on disk, or without one once its calls have run for
        ``HOT_RECOMPILE`` times what compiling it took.  A module of many
        kernels over few points compiles at g++ -O0 (``cache.optimization``):
        its first call comes sooner, and each call runs slower (trisolv 64, 195
        kernels: 1.9 s compile and 3.1 ms a call at -O0, 3.7 s and 0.58 ms at -O3).

        With the disk cache on, the g++ wrapper compiles the same C++ at -O3 in
        a detached process on the other core as soon as the -O0 library is
        built (``cache.later_marker``; Slang's C++ does not depend on its own
        level), and the switch loads that library (``lowering.direct_program``:
        no Slang code generation).  Without it, a program called long enough pays for
        the slower compile: switching once the calls at -O0 have cost twice that
        compile spends at most about twice the better of never and at once (the
        ski-rental rule)."""
        inst.run_seconds += seconds
        if inst.run_seconds < HOT_RECOMPILE * inst.compile_seconds and not self._compiled_later(inst):
            return
        start = time.perf_counter()
        before = cache.stats["compiles"]
        entries = inst.module.entry_points(self.backend.target().sequential)
        faster = cache.kernels(self.device, self.backend.device(), inst.module.source, entries, at="maximal")
        entry_of = {id(k): e for e, k in inst.kernels.items()}
        inst.kernels = faster
        inst.dispatches = {name: replace(d, kernel=faster[entry_of[id(d.kernel)]]) for name, d in inst.dispatches.items()}
        inst.bound.clear()  # root shader objects of the old kernels
        inst.level = "maximal"
        cache.mark_hot(self.device, inst.module.source)
        self._stats["compiles"] += cache.stats["compiles"] - before
        self._stats["compile_time"] += time.perf_counter() - start

    @staticmethod
    def _compiled_later(inst: _Instance) -> bool:
        """Whether ``inst``'s -O3 library is on disk, looked for at most every ``LATER_POLL`` seconds
        (its compile failing, the module stays where it is)."""
        now = time.perf_counter()
        if inst.later is None or now - inst.later_checked < LATER_POLL:
            return False
        inst.later_checked = now
        if not inst.later.exists():
            return False
        if cache.later_ready(inst.later):
            return True
        inst.later = None  # its compile failed
        return False

    def _call(self, inputs: Mapping[str, np.ndarray | DeviceArray], sizes: Mapping[str, int] | None,
              return_device_arrays: bool, check_bounds: bool) -> dict[str, np.ndarray | DeviceArray]:
        self._stats["calls"] += 1
        if self.backend.interprets:
            if return_device_arrays:
                raise ValueError(f"the {self.device} device has no device arrays")
            host = {k: host_argument(k, v, self.graph.containers[k].dtype) if k in self.graph.containers
                    else np.asarray(v) for k, v in inputs.items()}
            return self.backend.run(self.graph, host, {**self.sizes, **(sizes or {})})
        inst = self._instance(*self._bind_sizes(inputs, sizes))
        dev = self.backend.device()
        to_clear = self._replace_handed(inst)
        bindings, moved = self._bind_arguments(inst, inputs, self._upload(inst))
        enc = dev.create_command_encoder()
        for buffer in to_clear:
            enc.clear_buffer(buffer)
        dispatches, enc = self._record(enc, inst, bindings)
        results: dict[str, DeviceArray | np.ndarray] = {}
        flagged = check_bounds and FLAG in inst.buffers
        handed, read = self._result_plan(inst, return_device_arrays, flagged)
        for r, access, dtype in handed:
            if bindings[access] is inst.buffers.get(access):
                results[r] = self._hand_over(inst, access, dtype)
                continue
            # an argument returned as is: a copy of the caller's array (an earlier call's upload buffer is stale)
            copy = _new_buffer(self.backend, dtype, math.prod(inst.shapes[access]))
            enc.copy_buffer(copy, 0, bindings[access], 0, copy.size)
            results[r] = DeviceArray(copy, inst.shapes[access], dtype, self.device)
        host = self._read(dev, enc, inst, [bindings[access] for _, access, _, _ in read])
        if not return_device_arrays:
            for r, array in results.items():  # large results in host memory: their buffers, viewed
                results[r] = dlpack.host_view(array)  # waits for the call's kernels
                moved += results[r].nbytes
        for (r, _, dtype, shape), raw in zip(read, host):
            if r != FLAG:
                results[r] = _host_array(raw, dtype, shape)
                moved += results[r].nbytes
        if flagged:
            flag = host[-1].view(np.int32)
            if flag[0]:
                host = {a: np.asarray(v) for a, v in inputs.items()}
                raise_violation(inst.module.checks, flag, self.source_graph, host, {**self.sizes, **(sizes or {})})
        self._stats["dispatches"] = dispatches
        self._stats["bytes_moved"] = moved
        memory.hold(self, inst.key, inst.held_bytes, self.device)  # now with its uploads: most recently used
        return results

    def _result_plan(self, inst: _Instance, device_arrays: bool, flagged: bool) -> tuple[list, list]:
        """Which results a call hands over, ``(result, access, dtype)``, and
        which it reads back, ``(result, access, dtype, shape)`` (the bounds
        flag last where ``flagged``), made once per instance and mode: a call
        returning device arrays hands over every result; one returning host
        arrays on slangpy's CPU device hands over the buffers of results over
        ``READ_PACKED_BYTES`` too, as views of that host memory (no copy; the
        buffer goes back to the spares when the view is dropped)."""
        key = (device_arrays, flagged)
        if key not in inst.result_plans:
            g = inst.plan.graph
            handed, read = [], []
            for r, access in inst.latest.items():
                dtype = g.containers[r].dtype
                if device_arrays or (self._results_in_host_memory and access in inst.buffers and dlpack.viewable(dtype)
                                     and inst.buffers[access].size > READ_PACKED_BYTES):
                    handed.append((r, access, dtype))
                else:
                    read.append((r, access, dtype, inst.shapes[access]))
            if flagged:
                read.append((FLAG, FLAG, "int32", (FLAG_WORDS,)))
            inst.result_plans[key] = handed, read
        return inst.result_plans[key]

    def _read(self, dev: spy.Device, enc: spy.CommandEncoder, inst: _Instance,
              buffers: list[spy.Buffer]) -> list[np.ndarray]:
        """Submit the call and return the bytes of ``buffers`` after it: the
        small ones copied into the instance's one read-back buffer by the
        call's own encoder, then one wait and one read.  Reading result by
        result cost a submission and a wait each: 0.8 ms a result on the H100's
        Vulkan driver (measured; 2.4 ms for a 256-element value_and_grad with
        two gradients).  Results over ``READ_PACKED_BYTES`` are read from their
        own buffers after the wait: there the copy dominates, and a read-back
        buffer that size would be kept between calls, and the host copy of all
        of it would be kept alive by each result's view."""
        ids = tuple(id(buf) for buf in buffers)
        if inst.read_layout is None or inst.read_layout[0] != ids:  # the same buffers as the last call's
            packed = [buf for buf in buffers if buf.size <= READ_PACKED_BYTES]
            offsets, total = {}, 0
            for buf in packed:
                offsets[id(buf)] = total
                total += -(-buf.size // READ_ALIGNMENT) * READ_ALIGNMENT
            inst.read_layout = ids, packed, offsets, total
        _, packed, offsets, total = inst.read_layout
        if packed and (inst.readback is None or inst.readback.size < total):
            inst.readback = self.backend.new_readback_buffer(total)
            inst.held = None
            self._stats["buffers_allocated"] += 1
        for buf in packed:
            enc.copy_buffer(inst.readback, offsets[id(buf)], buf, 0, buf.size)
        submission = dev.submit_command_buffer(enc.finish())
        if not buffers:
            return []  # device arrays only: nothing to wait for here (reading one waits)
        dev.wait_for_submit(submission)
        raw = inst.readback.to_numpy() if packed else None
        return [raw[offsets[id(buf)]:offsets[id(buf)] + buf.size] if id(buf) in offsets
                else dlpack.download(buf, buf.size) for buf in buffers]

    def _hand_over(self, inst: _Instance, access: str, dtype: str) -> DeviceArray:
        """The buffer this call's kernels wrote result version ``access`` into,
        as the caller's array; the next call binds a spare in its place
        (``_replace_handed``), so a result the caller drops before then costs
        no second buffer (on the CPU device a first call's 200M-element
        gradient allocated and cleared its spare at once: +1x the result's
        bytes at the call's peak)."""
        buffer = inst.buffers[access]
        inst.handed.add(access)
        return DeviceArray.pooled_in(self._spares.setdefault(buffer.size, []), buffer, inst.shapes[access], dtype,
                                     self.device)

    def _replace_handed(self, inst: _Instance) -> list[spy.Buffer]:
        """Bind a spare buffer (one a caller has dropped, else a new one) to
        every version handed over by an earlier call, and to the argument whose
        upload buffer it was written into (``BufferPlan.upload_of``); returns
        those this call must clear first (versions that not every call fills
        or overwrites)."""
        to_clear = []
        for access in inst.handed:
            spare = self._spare(inst.buffers[access].size)
            if access not in inst.plan.overwritten and access not in inst.plan.fills:
                to_clear.append(spare)
            inst.buffers[access] = spare
            inst.held = None
            if access in inst.buffer_plan.upload_of:
                inst.buffers[inst.buffer_plan.upload_of[access]] = spare
        inst.handed.clear()
        return to_clear

    def _bind_sizes(self, inputs: Mapping, sizes: Mapping[str, int] | None) -> tuple[dict[str, int], tuple]:
        """``ir.bind_sizes`` and its instance key, remembered per argument
        shapes: it runs sympy per dimension, which costs more than a small
        kernel.  Checks that every argument is there."""
        try:
            key = tuple(np.shape(inputs[a]) for a in self._arguments)
        except KeyError:
            missing = [a for a in self._arguments if a not in inputs]
            raise ir.GraphError(f"missing arguments {missing} (graph {self.graph.name!r} takes "
                                f"{list(self._arguments)})") from None
        key = (key, tuple(sorted(sizes.items())) if sizes else ())
        bound = self._bound.get(key)
        if bound is None:
            sizes = ir.bind_sizes(self.graph, inputs, {**self.sizes, **(sizes or {})})
            bound = self._bound[key] = sizes, tuple(sorted(sizes.items()))
        return bound

    def _dispatches(self, module: Module, kernels: dict[str, spy.ComputeKernel],
                    buffers: dict[str, spy.Buffer], per_call: set[str]) -> dict[str, _Dispatch]:
        """Each kernel's launch, its buffers bound once, but for arguments and
        the ``per_call`` versions (results handed over, arguments' upload
        buffers a version shares), which are bound per call."""
        if self.backend.target().sequential:  # one entry point runs the whole program there
            launches = {PROGRAM: (kernels[PROGRAM], [1, 1, 1], module.buffers, {})}
        else:
            launches = {e.name: (kernels[f"{e.function}_main"], e.thread_count, e.buffers, e.constants)
                        for e in module.kernels if e.threads}
        fixed = set(buffers) - per_call
        return {name: _Dispatch(kernel, thread_count,
                                {**{n: buffers[a] for n, a in names.items() if a in fixed}, **constants},
                                {n: a for n, a in names.items() if a not in fixed})
                for name, (kernel, thread_count, names, constants) in launches.items()}

    def _launches(self, inst: _Instance) -> list[tuple[_Dispatch | HostProduct, dict, tuple[str, ...], tuple]]:
        """The dispatches of ``inst.launches`` with their uniforms: on the CPU
        device one per run of consecutive kernels (a whole call is one run),
        with the worker threads its kernels may use (``lowering.threads``),
        elsewhere one per kernel; host products in between.  With each, the
        versions bound per call and the key ``_record`` keeps its binding
        under (a host product's by the product too: a cut launch list,
        bench.profile, puts others at its position).  bench.profile times
        kernels alone by cutting that list."""
        sequential = self.backend.target().sequential
        workers = cpu_workers() if sequential else 0  # read per call: $SYMDIFF_CPU_THREADS may change
        kept = inst.launch_list  # for these lists (replaced, never changed in place) and workers
        if kept is not None and kept[0] is inst.launches and kept[1] is inst.dispatches and kept[2] == workers:
            return kept[3]
        if not sequential:
            runs = [(run[0].host or inst.dispatches[run[0].name], {}) for run in inst.launches]
        else:
            runs = [(run[0].host, {}) if run[0].host else
                    (inst.dispatches[PROGRAM], {"first": run[0].index, "last": run[-1].index + 1, "workers": workers})
                    for run in inst.launches]
        made = [(d, uniforms, d.accesses, (position, id(d))) if isinstance(d, HostProduct) else
                (d, uniforms, tuple(d.per_call.values()), (position, *uniforms.values()))
                for position, (d, uniforms) in enumerate(runs)]
        inst.launch_list = inst.launches, inst.dispatches, workers, made
        return made

    def recordable(self, sizes: Mapping[str, int] | None = None, check_bounds: bool = True) -> bool:
        """Whether ``record`` runs this executable's calls for ``sizes``: not on the numpy
        device, and not where the kernels check data-dependent indices and ``check_bounds``
        wants the check read after each call (``record`` reads nothing) or a product runs
        on the host."""
        if self.backend.interprets:
            return False
        with self._lock:
            module = self._instance({**self.sizes, **(sizes or {})}).module
            return not (check_bounds and module.checks) and not any(e.host for e in module.kernels)

    def _spare(self, size: int) -> spy.Buffer:
        """A buffer of ``size`` bytes from this executable's spares, or a new one."""
        spares = self._spares.setdefault(size, [])
        if spares:
            return spares.pop()
        self._stats["buffers_allocated"] += 1
        return self.backend.new_buffer(size)

    def _bind_arguments(self, inst: _Instance, inputs: Mapping[str, np.ndarray | DeviceArray],
                        upload: Callable[[spy.Buffer, np.ndarray], object]) -> tuple[dict[str, spy.Buffer], int]:
        """The buffers of one call's launches (the instance's own, and each stored
        argument's) and the bytes uploaded: a ``DeviceArray`` argument binds its own
        buffer (checked: this device, the argument's dtype), a host array is put by
        ``upload`` into the instance's buffer for it (a direct copy for a call, a
        command in the encoder for ``record``)."""
        if inst.arguments is None:
            g = inst.plan.graph
            inst.arguments = [(name, f"{name}#0", g.containers[name].dtype) for name in g.arguments
                              if f"{name}#0" in inst.plan.stored]
        bindings, moved = dict(inst.buffers), 0
        for name, access, dtype in inst.arguments:
            value = inputs[name]
            if isinstance(value, DeviceArray):
                if value.device != self.device or value.dtype != dtype:
                    raise ValueError(f"argument {name!r}: a {value.dtype} array on {value.device!r}, "
                                     f"the program needs {dtype} on {self.device!r}")
                bindings[access] = value.buffer
                self._watch(inst, value)
                continue
            host = np.ascontiguousarray(host_argument(name, value, dtype), dtype=STORAGE[dtype])
            if access not in inst.buffers:
                inst.buffers[access] = _new_buffer(self.backend, dtype, host.size)
                inst.held = None
                self._stats["buffers_allocated"] += 1
            bindings[access] = inst.buffers[access]
            if host.size:
                upload(inst.buffers[access], host)
                moved += host.nbytes
        return bindings, moved

    def _upload(self, inst: _Instance) -> Callable[[spy.Buffer, np.ndarray], object]:
        """How a call puts host arguments into their buffers: where buffers
        are host memory, straight into it through a view kept per buffer
        (``_Instance.views``: making the view and asking the device each time
        cost ~3 us an argument), after one wait for the device; elsewhere
        ``dlpack.upload``."""
        if not self._results_in_host_memory:
            return dlpack.upload
        self.backend.device().wait()  # nothing recorded earlier still uses the buffers
        views = inst.views

        def upload(buffer: spy.Buffer, host: np.ndarray) -> None:
            kept = views.get(id(buffer))
            if kept is None:
                if len(views) >= RECORDED_BINDINGS:  # spares bound in turn: forget old ones
                    views.clear()
                kept = views[id(buffer)] = buffer, dlpack.host_bytes(buffer)
            kept[1][:host.nbytes] = host.reshape(-1).view(np.uint8)
        return upload

    @staticmethod
    def _watch(inst: _Instance, array: DeviceArray) -> None:
        """Drop the kept root shader objects binding ``array``'s buffer when the
        caller drops ``array``, so that they do not keep its memory (a pooled
        array's buffer stays in its pool anyway: a loop's states keep their roots)."""
        key = id(array.buffer)
        if array.pooled or key in inst.watched:
            return
        inst.watched.add(key)
        weakref.finalize(array, _forget, weakref.ref(inst), key)

    def record(self, enc: spy.CommandEncoder, inputs: Mapping[str, np.ndarray | DeviceArray],
               sizes: Mapping[str, int] | None = None) -> tuple[dict[str, DeviceArray], spy.CommandEncoder]:
        """Record one call into the caller's command encoder ``enc`` without submitting it
        or waiting: the loops of ``symdiff.loop_runtime`` record many iterations and submit
        them at once.  ``inputs``: ``DeviceArray``s of this device, or small numpy arrays
        (a loop's iteration index), uploaded through ``enc`` in order with the commands
        around them.  Results come back as ``DeviceArray``s in buffers of this executable's
        spares (back to them when dropped, as in ``_hand_over``); a result that is an
        argument returned unchanged is that argument's array.  With them, the encoder the
        caller goes on with: ``enc``, or a new one where the program is called from its
        stored library (``direct_program``), which submits what ``enc`` holds and runs at
        once.  The caller submits the encoder before calling this executable otherwise.

        Launches are bound as a call's are (``_record``)."""
        with self._lock:
            self._stats["calls"] += 1
            inst = self._instance({**self.sizes, **(sizes or {})})
            g = inst.plan.graph
            for buffer in self._replace_handed(inst):  # a call's result may hold an upload buffer
                enc.clear_buffer(buffer)
            bindings, _ = self._bind_arguments(
                inst, inputs, lambda buffer, host: enc.upload_buffer_data(buffer, 0, host.reshape(-1)))
            results = {}
            for r, access in inst.latest.items():
                if access not in inst.buffers:  # an argument returned as is
                    results[r] = inputs[g.node(access).container]
                    continue
                size = inst.buffers[access].size
                buffer = self._spare(size)
                spares = self._spares[size]
                if access not in inst.plan.overwritten and access not in inst.plan.fills:
                    enc.clear_buffer(buffer)
                bindings[access] = buffer
                dtype = g.containers[r].dtype
                results[r] = DeviceArray.pooled_in(spares, buffer, inst.shapes[access], dtype, self.device)
            self._stats["dispatches"], enc = self._record(enc, inst, bindings)  # recordable(): no host product
            return results, enc

    def _record(self, enc: spy.CommandEncoder, inst: _Instance,
                bindings: dict[str, spy.Buffer]) -> tuple[int, spy.CommandEncoder]:
        """Record the fills and kernel dispatches of one call; returns their count
        and the encoder the caller goes on with.  A product the host computes
        (``lowering.host_products``), and a program called from its stored library
        (``direct_program``), submits what is recorded so far, waits, runs on the
        buffers' memory and starts a new encoder (consecutive ones submit and wait once).
        A zero fill comes before every launch, or, for a version sharing its
        buffer (``lowering.buffer_plan``), just before the launch that first
        binds it, once the slot's earlier tenants are done: a filled version is
        written only by the kernels accumulating into it and read only after
        them, never by a kernel before.

        Each launch is bound through a root shader object made once per set of
        buffers and kept (``_Instance.bound``, up to ``RECORDED_BINDINGS`` sets
        for each launch: an unrolled RNN's 254 launches had thrown them all
        away on every call, 128 ms a call against 22 ms kept), as is each host
        product's run over its buffers' memory (``HostProduct.bound``): a
        loop's states and a call's results alternate between a few buffers,
        and slangpy's ``kernel.dispatch`` binds every parameter again on every
        call (recording a launch: ~1 us on the CPU device and ~13 us on
        lavapipe against 60-140 us, measured; trisolv's CPU program over 64
        rows binds 267 buffers: 3.6 ms a call, its kernels run in 0.3).  A
        root changed after encoding does not change the encoded launch (its
        bindings are copied: measured on the CPU device and lavapipe), but a
        changed root is encoded again from scratch, so roots are kept per set
        rather than rebound.  A caller's device array bound in one is let go
        when the caller drops it (``_watch``)."""
        if FLAG in bindings:
            enc.clear_buffer(bindings[FLAG])
        early, late = self._fill_schedule(inst)
        for access in early:
            enc.clear_buffer(bindings[access])
        launches = self._launches(inst)
        pending = True  # enc holds commands not yet run (the caller's uploads and fills, at first)
        for position, (d, uniforms, accesses, key) in enumerate(launches):
            if position in late:
                for access in late[position]:
                    enc.clear_buffer(bindings[access])
                pending = True
            buffers = [bindings[a] for a in accesses]
            if isinstance(d, HostProduct):
                if pending:  # consecutive host products wait for the launches before them once
                    enc, pending = self._finished(enc), False
                self._kept(inst, len(launches), key, buffers, lambda: self._host_run(d, bindings))()
                continue
            params = lambda: {**uniforms, **d.params, **{n: bindings[a] for n, a in d.per_call.items()}}  # noqa: E731
            if isinstance(d.kernel, DirectProgram):  # a call on the host, as a host product's
                if pending:
                    enc, pending = self._finished(enc), False
                self._kept(inst, len(launches), key, buffers, lambda: d.kernel.bind(params()))()
                continue
            pending = True
            root = self._kept(inst, len(launches), key, buffers, lambda: self._root(d, params()))
            compute = enc.begin_compute_pass()
            compute.bind_pipeline(d.kernel.pipeline, root)
            compute.dispatch(d.thread_count)
            compute.end()
        return len(launches), enc

    @staticmethod
    def _fill_schedule(inst: _Instance) -> tuple[list[str], dict[int, list[str]]]:
        """The versions ``_record`` zero-fills before every launch, and those
        it fills just before the launch position first binding them."""
        if inst.fills is None:
            first = inst.buffer_plan.first_launch
            early, late = [], {}
            for access, identity in inst.plan.fills.items():
                if identity == 0 and access in first:
                    late.setdefault(first[access], []).append(access)
                elif identity == 0:
                    early.append(access)
            inst.fills = early, late
        return inst.fills

    @staticmethod
    def _kept(inst: _Instance, launches: int, key: tuple, buffers: list[spy.Buffer], make: Callable[[], object]):
        """What ``make`` builds for a launch over ``buffers``, kept in
        ``inst.bound`` (``RECORDED_BINDINGS`` sets of buffers for each of the
        call's ``launches``) with the buffers, so that their ids stay theirs."""
        key = key + tuple(map(id, buffers))
        if key not in inst.bound:
            if len(inst.bound) >= RECORDED_BINDINGS * launches:
                inst.bound.clear()
            inst.bound[key] = (make(), tuple(buffers))
        return inst.bound[key][0]

    def _root(self, d: _Dispatch, params: dict) -> spy.ShaderObject:
        """A root shader object binding ``params`` to ``d``'s entry point."""
        root = self.backend.device().create_root_shader_object(d.kernel.program)
        entry = spy.ShaderCursor(root).find_entry_point(0)
        for name, value in params.items():
            entry[name] = value
        return root

    @staticmethod
    def _host_run(product: HostProduct, bindings: dict[str, spy.Buffer]) -> Callable[[], None]:
        """``product`` over the host memory of ``bindings``, its views made once
        (``HostProduct.bound``)."""
        dtype = np.dtype(DTYPES[product.dtype])
        return product.bound(lambda o: dlpack.memory_view(bindings[o.access], (o.size,), dtype))

    def _finished(self, enc: spy.CommandEncoder) -> spy.CommandEncoder:
        """Submit what ``enc`` holds and wait for it (a host product reads its
        results next); a new encoder for what follows."""
        dev = self.backend.device()
        dev.wait_for_submit(dev.submit_command_buffer(enc.finish()))
        return dev.create_command_encoder()


def _forget(instance: "weakref.ref[_Instance]", buffer_id: int) -> None:
    """``Executable._watch``'s callback: a caller dropped the array of buffer ``buffer_id``."""
    inst = instance()
    if inst is None:
        return
    inst.watched.discard(buffer_id)
    for key, (_, buffers) in list(inst.bound.items()):
        if any(id(b) == buffer_id for b in buffers):
            inst.bound.pop(key, None)


def planned_buffers(graph: DataflowGraph, device: str | None, sizes: Mapping[str, int]) -> BufferPlan:
    """The buffers a call binding ``sizes`` would allocate on ``device``
    (``lowering.buffer_plan``), planned without compiling or allocating:
    what ``symdiff.memory_budget`` weighs its choices by."""
    backend = backends.of(backends.resolve(device))
    if backend.interprets:
        raise ValueError(f"the {backend.name} device runs the IR interpreter: it plans no buffers")
    target = backend.target()
    p = plan(computed_in_float32(graph), dict(sizes), target)
    return plan_buffers(p, generate(p, target), target.sequential)[0]


def validate(graph: DataflowGraph) -> None:
    """Refuse a graph that breaks the IR's rules (a hand-built one may: colliding plain
    writes) before lowering it (``DataflowGraph.validate``), once per cache key
    (``disk_cache.checked``: a graph an earlier process validated is not validated again)."""
    disk_cache.checked("validated", graph, DataflowGraph.validate)


def compile(graph: DataflowGraph, device: str | None = None, sizes: Mapping[str, int] | None = None,
            deterministic: bool = False, repeated: bool = False) -> Executable:
    """Lower ``graph`` for a device (``None``: ``$SYMDIFF_DEVICE`` or ``"auto"``).

    Sizes left symbolic are bound at call time; each distinct binding gets its
    own module, compiled once.  A float64 program using a transcendental is
    refused on lavapipe (its double ``exp``/``sin``/``log``/... are wrong) or,
    under ``"auto"``, routed to the best-ranked backend computing them right
    (the CPU device).

    The graph is validated first (``DataflowGraph.validate``), so a hand-built
    graph that breaks the IR's rules is refused with the node named instead of
    running with undefined results.

    ``deterministic=True``: repeated runs give bitwise identical results.  On a
    device whose colliding updates sum in a fixed order anyway (the CPU device,
    the interpreter: ``Backend.orders_colliding_writes``) nothing changes;
    elsewhere no float atomics remain (``lowering.deterministic``), and a
    LoweringError names a tasklet that cannot be made atomic-free.

    ``repeated=True``: the program runs many times per use (a loop body,
    ``symdiff.loop_runtime``), so its modules compile at full optimisation
    whatever the work of one call (``cache.optimization`` would pick g++ -O0
    for a small body: the 1000-step 64x64 jacobi-2d ran 5x slower).
    """
    validate(graph)
    requested = devices.requested(device)
    kind = backends.resolve(device)
    if not backends.of(kind).computes_float64_transcendentals() and (bad := unsafe_double_tasklets(graph)):
        exact = backends.auto(lambda backend: backend.computes_float64_transcendentals())
        if requested != "auto":
            software = " (a software rasteriser here)" if backends.of(kind).is_software() else ""
            raise UnsupportedOnDevice(
                f"the {kind} device{software} computes double-precision exp/sin/log/pow/tanh wrongly; "
                f"tasklets {', '.join(bad)} use them on float64 data. Use device={exact!r}, or float32.")
        kind = exact
    computed = computed_in_float32(graph)  # 16-bit arrays: float32 arithmetic between 16-bit loads and stores
    if deterministic and not backends.of(kind).orders_colliding_writes():
        computed = owner_computes(computed)
    return Executable(computed, kind, sizes, deterministic, source=graph, repeated=repeated)
