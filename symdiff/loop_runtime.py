"""Running a program whose graph keeps loops out (``symdiff.loops``), forward and reverse.

A program graph with loops is an ordinary graph in which each loop's state
going in is a container (``Loop.inputs``) and its state coming out is an
argument (``Loop.outputs``).  ``LoopProgram`` compiles that graph once (the
*stage*, with the loop inputs made results) and each loop body once, and runs:

* forward: the stage with the loop outputs still zero gives the first loop's
  inputs (they cannot depend on any loop's outputs); the loop runs on the host
  as a sequence of calls of its compiled body (on a device recorded into one
  command buffer, the state alternating between device buffers: ``_Calls``);
  the stage runs again with that
  loop's outputs bound, giving the next loop's inputs, and so on; the last run
  gives the results.  Loops run in trace order, so K loops cost K + 1 stage runs.
* reverse (a graph from ``add_backward_pass`` here): the stage's reverse pass
  with the user's cotangents gives the gradients through the code between
  loops and the cotangents of every loop's outputs; loops are then reversed
  last to first: the body's vector-Jacobian product runs backwards over the
  iterations from the states the forward run stored (``Loop.schedule``: all of
  them while they fit in the memory left to the loop, ``memory_budget`` less
  the stage's and the body's buffers, else binomial checkpointing,
  ``symdiff.checkpoint_schedule``), and the cotangent reaching the loop's inputs is
  sent back through the stage's reverse pass, which is linear in its
  cotangents, so the contributions add.

Every run is an ordinary compiled executable (``lowering.compile``, bodies with
``repeated=True``: full optimisation), so loops run on every device, the numpy
interpreter included, and the compile time does not depend on the trip count.
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

import networkx as nx
import numpy as np

from symdiff import ir
from symdiff.ir.graph_notes import GraphNotes
from symdiff import lowering
from symdiff.lowering import backends, dlpack, runtime
from symdiff.lowering.buffer_plan import STORAGE, buffer_bytes

from . import backward, forward
from .errors import DifferentiationError
from . import checkpoint_schedule
from . import loops as loop_api
from .checkpoint_schedule import Online, Schedule
from .loops import Loop, LoopError, loops_of, size_names
from .memory_budget import MemoryBudgetError


def _only(sizes: Mapping[str, int], names: frozenset[str]) -> dict[str, int]:
    """The sizes an executable needs: passing others would plan it again for each of their values."""
    return {k: v for k, v in sizes.items() if k in names}


def add_backward_pass(graph: ir.DataflowGraph, inputs: Sequence[str], outputs: Sequence[str],
                      **options: Any) -> dict[str, str]:
    """``symdiff.add_backward_pass`` for a graph that may keep loops out: the loops' float
    outputs are differentiated as inputs and their float inputs as outputs, so that
    ``LoopProgram`` can chain the stage's reverse pass with the loops'
    (``GraphNotes.loop_gradients``, ``loop_seeds``).  Returns the gradients of ``inputs``."""
    loops = loops_of(graph)
    if not loops:
        return backward.add_backward_pass(graph, inputs=inputs, outputs=outputs, **options)
    notes = GraphNotes(graph)
    if notes.loop_seeds is not None:
        raise DifferentiationError(_second_order(loops, "a second reverse pass (grad of grad)"))
    extra_in = [o for loop in loops for o, d in zip(loop.outputs, loop.dtypes) if d in ir.FLOAT_DTYPES]
    extra_out = [c for loop in loops for c, d in zip(loop.inputs, loop.dtypes) if d in ir.FLOAT_DTYPES]
    for loop in loops:
        for c in loop.inputs:
            graph.containers[c].role = "result"
    grads = backward.add_backward_pass(graph, inputs=[*inputs, *extra_in], outputs=[*outputs, *extra_out],
                                       **options)
    notes.loop_gradients = {o: grads.pop(o) for o in extra_in}
    notes.loop_seeds = {c: notes.seeds[c] for c in extra_out}
    return grads


def add_tangent_pass(graph: ir.DataflowGraph, inputs: Sequence[str], outputs: Sequence[str],
                     tangent_names: Mapping[str, str] | None = None) -> dict[str, str]:
    """``symdiff.add_tangent_pass`` for a graph that may keep loops out.  A loop's tangent is a
    loop too: the tangent pass runs with the loops' float outputs as inputs (their tangents
    become arguments) and their float inputs as outputs (their tangents results), and each
    loop becomes one over the state and its tangent, whose body is the body's own tangent graph
    (``_tangent_body``).  The result is an ordinary graph with loops: ``LoopProgram`` runs it,
    and it can be differentiated in reverse (reverse-over-forward Hessian-vector products)."""
    loops = loops_of(graph)
    if not loops:
        return forward.add_tangent_pass(graph, inputs, outputs, tangent_names)
    extra_in = [o for loop in loops for o, d in zip(loop.outputs, loop.dtypes) if d in ir.FLOAT_DTYPES]
    extra_out = [c for loop in loops for c, d in zip(loop.inputs, loop.dtypes) if d in ir.FLOAT_DTYPES]
    notes = GraphNotes(graph)
    del notes.loops  # handled here: forward.add_tangent_pass refuses loops it is not told about
    try:
        tangents = forward.add_tangent_pass(graph, [*inputs, *extra_in], [*outputs, *extra_out], tangent_names)
    finally:
        notes.loops = loops
    tangent_in = notes.tangent_inputs
    new_loops = []
    for loop in loops:
        floats = [k for k, d in enumerate(loop.dtypes) if d in ir.FLOAT_DTYPES]
        new_loops.append(replace(
            loop, body=_tangent_body(loop.body, floats, len(loop.dtypes)),
            inputs=loop.inputs + tuple(tangents[loop.inputs[k]] for k in floats),
            outputs=loop.outputs + tuple(tangent_in[loop.outputs[k]] for k in floats),
            dtypes=loop.dtypes + tuple(loop.dtypes[k] for k in floats)))
    # internal: the loops' runs bind them, not the caller
    notes.tangent_inputs = {x: t for x, t in tangent_in.items() if x not in extra_in}
    for c in extra_out:
        graph.containers[tangents.pop(c)].role = "transient"
    notes.tangents = {o: t for o, t in notes.tangents.items() if o not in extra_out}
    notes.loops = new_loops
    return tangents


def _tangent_body(body: ir.DataflowGraph, floats: list[int], count: int) -> ir.DataflowGraph:
    """A loop body over the state ``s0 .. s{count-1}`` and the tangents of its float elements
    (``s{count} ...``, in order), returning the new state then the new tangents."""
    graph = body.copy()
    results = list(GraphNotes(body).result_names)
    names = {f"s{k}": f"s{count + j}" for j, k in enumerate(floats)}
    tangents = add_tangent_pass(graph, list(names), [results[k] for k in floats], names)
    notes = GraphNotes(graph)
    notes.result_names = results + [tangents[results[k]] for k in floats]
    notes.arg_names = [*GraphNotes(body).arg_names, *names.values()]
    del notes.tangent_inputs, notes.tangents
    return graph


def compile(graph: ir.DataflowGraph, device: str | None = None, deterministic: bool = False,  # noqa: A001
            repeated: bool = False):
    """``lowering.compile``, or a ``LoopProgram`` where the graph keeps loops out; ``repeated``:
    a loop body, run once per iteration (``lowering.compile``)."""
    loops = loops_of(graph)
    if not loops:
        return lowering.compile(graph, device=device, deterministic=deterministic, repeated=repeated)
    notes = GraphNotes(graph)
    if notes.loop_seeds is not None and (notes.seeds is None or notes.gradients is None):
        raise DifferentiationError(_second_order(loops, "a gradient program (grad_program) or "
                                                        "forward-over-reverse"))
    return LoopProgram(graph, device, deterministic)


def _second_order(loops: Sequence[Loop], what: str) -> str:
    lines = ", ".join(f"{loop.name} at {loop.where}" for loop in loops)
    return (f"{what} through sd.fori_loop / sd.while_loop ({lines}) is not supported: a loop's reverse pass "
            "runs outside the graph (a host loop of the body's vector-Jacobian product over stored states), "
            "so there is no graph of it to differentiate again. Second order through a loop: "
            "program.jvp_program().grad(...) (reverse over forward, supported), or write the loop as a Python "
            "for loop (unrolled)")


@dataclass
class _Tape:
    """What the reverse pass of one loop needs from its forward run."""
    lo: int                      # the first iteration's ``i``
    sizes: dict[str, int]        # the sizes the call bound (shapes, trip counts)
    schedule: Schedule | None    # None: forward only, nothing stored
    trips: int = 0
    checkpoints: dict[int, list[np.ndarray]] = field(default_factory=dict)  # iteration -> state going in


def _kept(value: Any) -> Any:
    """A checkpointed state element: a ``DeviceArray`` result is the caller's own buffer (the
    executable allocates another for its next call); a numpy one is copied to be sure."""
    return value if isinstance(value, lowering.DeviceArray) else np.array(value)


RECORDED_CALLS = 256  # calls recorded into one command buffer before it is submitted (_Calls)


class _Calls:
    """How one run of a loop calls its compiled body and reverse step.

    On a device, where each executable can (``Executable.recordable``), calls are
    recorded (``Executable.record``) into one command encoder and submitted every
    ``RECORDED_CALLS`` calls and before anything is read on the host: the state stays in
    device buffers that alternate between iterations, and nothing waits.  A call made
    and submitted one at a time cost ~170 us on the CPU device for the 64x64
    jacobi-2d, ~125 us of it Python, keyword binding and submission around ~45 us of
    kernels (profiled).
    Elsewhere (the numpy device, a body holding loops, index checks read after each
    call) each call runs at once.

    ``record`` keeps one binding per set of buffers, so a recorded run keeps the
    buffers its calls bind few: a stored state is a copy (``keep``) into a buffer of
    the runner's ``pool``, and a call reading a state stored at some iteration reads it
    from the run's one fixed buffer per state element (``fixed``).  Binding each
    stored state's own buffer made a binding per iteration (lavapipe: ~85 us each)."""

    def __init__(self, device: str | None, check_bounds: bool, on_device: bool,
                 pool: dict[int, list], dtypes: Sequence[str]):
        self.check_bounds, self.on_device = check_bounds, on_device
        self.kind = device
        self.backend = backends.of(device) if device else None
        self.device = self.backend.device() if device else None
        self.pool, self.dtypes = pool, dtypes
        self.enc, self.recorded = None, 0
        self._fixed: dict[int, lowering.DeviceArray] = {}  # state element -> its fixed buffer (fixed)

    def __call__(self, exe: Any, args: Mapping[str, Any], sizes: Mapping[str, int]) -> dict[str, Any]:
        if self.device is None:
            return exe(args, sizes, check_bounds=self.check_bounds, return_device_arrays=self.on_device)
        out, self.enc = exe.record(self._encoder(), args, sizes)
        self.recorded += 1
        if self.recorded >= RECORDED_CALLS:
            self.submit()
        return out

    def _encoder(self):
        if self.enc is None:
            self.enc = self.device.create_command_encoder()
        return self.enc

    def _copy(self, k: int, value: Any, into: lowering.DeviceArray | None = None) -> lowering.DeviceArray:
        """State element ``k`` copied into ``into``, or into a buffer of the pool (back to it
        when dropped).  A numpy element (the state going in) is uploaded once here, after the
        calls recorded so far have been submitted (a pool buffer may be one they read), not
        through the encoder at every call reading it: slangpy keeps an encoder's uploads in its
        upload heap until the submission."""
        dtype, shape = self.dtypes[k], tuple(np.shape(value))
        nbytes = buffer_bytes(dtype, math.prod(shape))
        if into is None:
            free = self.pool.setdefault(nbytes, [])
            buffer = free.pop() if free else self.backend.new_buffer(nbytes)
            into = lowering.DeviceArray.pooled_in(free, buffer, shape, dtype, self.kind)
        if isinstance(value, lowering.DeviceArray):
            self._encoder().copy_buffer(into.buffer, 0, value.buffer, 0, nbytes)
        else:
            self.submit()
            dlpack.upload(into.buffer, np.ascontiguousarray(runtime.host_argument(f"s{k}", value, dtype),
                                                            dtype=STORAGE[dtype]))
        return into

    def keep(self, state: list) -> list:
        """A state to store for the reverse pass."""
        if self.device is None:
            return [_kept(v) for v in state]
        return [self._copy(k, v) for k, v in enumerate(state)]

    def fixed(self, state: list) -> list:
        """``state`` in the run's fixed buffers (recorded runs; others as it is).  A call's
        results are containers of their own (``ir.tracer``), never its arguments' buffers, so a
        fixed buffer never becomes a state that the schedule holds."""
        if self.device is None:
            return state
        for k, v in enumerate(state):
            if k not in self._fixed:
                self._fixed[k] = self._copy(k, v)
            elif not (isinstance(v, lowering.DeviceArray) and v.buffer is self._fixed[k].buffer):
                self._copy(k, v, self._fixed[k])
        return [self._fixed[k] for k in range(len(state))]

    def submit(self) -> None:
        """Submit the calls recorded so far (a later read of their results waits for them)."""
        if self.enc is not None:
            self.device.submit_command_buffer(self.enc.finish())
            self.enc, self.recorded = None, 0


class _LoopRunner:
    """One loop: its compiled body (and condition), run forward and reversed."""

    def __init__(self, loop: Loop, device: str | None, deterministic: bool):
        self.loop = loop
        self.device, self.deterministic = device, deterministic
        self.body = compile(loop.body, device, deterministic, repeated=True)  # may hold loops itself
        self.cond = compile(loop.cond, device, deterministic, repeated=True) if loop.cond else None
        self.results = list(GraphNotes(loop.body).result_names)
        self.body_sizes = size_names(loop.body)
        self.cond_sizes = size_names(loop.cond) if loop.cond else frozenset()
        self.floats = [k for k, d in enumerate(loop.dtypes) if d in ir.FLOAT_DTYPES]
        # the state stays on the device between iterations (not for a body holding loops itself)
        self.on_device = not backends.of(device).interprets and isinstance(self.body, lowering.Executable)
        self._vjp = None
        self.state_memory: int | None = None  # bytes for stored states (LoopProgram sets it under a memory_budget)
        self.last: Schedule | None = None     # the latest reversed run's schedule (explain)
        self.held_bytes = 0                   # states it held at most (stats)
        self.reads_state = True               # whether the reverse step's gradients depend on the state (_reverse_step)
        # one run at a time: recorded runs share the executables' buffers until they are submitted (_Calls)
        self._lock = threading.Lock()
        self._pool: dict[int, list] = {}  # bytes -> device buffers of dropped stored states (_Calls.keep)

    @staticmethod
    def _args(tape: _Tape, n: int, state: Sequence[np.ndarray]) -> dict[str, Any]:
        return {"i": np.asarray(tape.lo + n, dtype=np.int32), **{f"s{k}": v for k, v in enumerate(state)}}

    def calls(self, tape: _Tape, check_bounds: bool, reverse: bool = False) -> "_Calls":
        """How this run calls the body (and the reverse step): recorded where they can be."""
        exes = [(self.body, self.body_sizes)]
        if reverse:
            exes.append((self._reverse_step()[0], self._reverse_step()[3]))
        record = self.on_device and all(isinstance(e, lowering.Executable) and
                                        e.recordable(_only(tape.sizes, names), check_bounds) for e, names in exes)
        return _Calls(self.device if record else None, check_bounds, self.on_device, self._pool, self.loop.dtypes)

    def step(self, calls: "_Calls", tape: _Tape, n: int, state: list) -> list:
        """Iteration ``n`` (counted from 0); the state stays on the device between iterations
        (``DeviceArray``s, numpy arrays on the numpy device)."""
        out = calls(self.body, self._args(tape, n, state), _only(tape.sizes, self.body_sizes))
        return [out[r] for r in self.results]

    def running(self, calls: "_Calls", tape: _Tape, n: int, state: list, planned: int) -> bool:
        if self.cond is None:
            return n < planned
        (result,) = GraphNotes(self.loop.cond).result_names
        calls.submit()  # the condition is read on the host: the iterations recorded so far run first
        go = bool(np.asarray(self.cond({a: state[int(a[1:])] for a in self.loop.cond.arguments},
                                       _only(tape.sizes, self.cond_sizes),
                                       check_bounds=calls.check_bounds)[result]))
        if go and n >= planned:
            raise LoopError(f"while_loop ({self.loop.where}) still running after max_iters={planned} "
                            "iterations; raise max_iters if the loop converges more slowly (no truncated result "
                            "is returned)")
        return go

    def schedule(self, trips: int, sizes: Mapping[str, int]) -> Schedule:
        """The loop's schedule (``Loop.schedule``) in the bytes left to its stored states: under a
        memory budget, what the budget leaves the loop less its body's and reverse step's buffers.
        A body whose vector-Jacobian product does not read the state (a linear step: jacobi,
        heat) stores none and recomputes none."""
        if self.floats:
            self._reverse_step()  # finds out whether it reads the state
            if not self.reads_state:
                return checkpoint_schedule.unread(trips)
        if self.state_memory is None:
            return self.loop.schedule(trips, sizes)
        left = self.memory_left()
        need = self.loop.state_bytes(sizes)
        if left < need and not (self.loop.checkpoint_every or self.loop.checkpoints):
            raise MemoryBudgetError(f"{self.loop.where}: the reverse pass of {self.loop.name} holds at least the "
                                    f"{need:,}-byte state going in; memory_budget leaves it {max(left, 0):,} bytes "
                                    "after the program's other buffers. Raise the budget.")
        return self.loop.schedule(trips, sizes, left)

    def memory_left(self) -> int:
        """Bytes for stored states under a memory budget: the loop's share less the buffers of its
        body and reverse step, which are live while it runs."""
        return self.state_memory - _peak(self.body) - (_peak(self._reverse_step()[0]) if self.floats else 0)

    def forward(self, state: list[np.ndarray], keep: bool, check_bounds: bool,
                sizes: Mapping[str, int]) -> tuple[list[np.ndarray], _Tape]:
        """Run the loop; with ``keep``, store the states its schedule's reverse pass starts from."""
        lo, end = self.loop.bounds(sizes)
        planned = max(end - lo, 0)
        plan = self.schedule(planned, sizes) if keep and self.floats else None
        tape = _Tape(lo, dict(sizes), plan)
        stored = set(plan.stored) if plan else set()
        online = Online(plan.slots) if plan and self.cond is not None and plan.kind == "binomial" else None
        n = 0
        with self._lock:
            calls = self.calls(tape, check_bounds)
            while self.running(calls, tape, n, state, planned):
                if online is not None and online.wants(n):
                    tape.checkpoints[n] = calls.keep(state)
                    for dropped in online.add(n):
                        del tape.checkpoints[dropped]
                elif online is None and n in stored:
                    tape.checkpoints[n] = calls.keep(state)
                state = self.step(calls, tape, n, state)
                n += 1
            calls.submit()
        tape.trips = n
        if online is not None:
            tape.schedule = online.schedule(n)
        return state, tape

    def _reverse_step(self):
        """The body's vector-Jacobian product, compiled on first use."""
        if self._vjp is None:
            graph = self.loop.body.copy()
            grads = add_backward_pass(graph, inputs=[f"s{k}" for k in self.floats],
                                      outputs=[self.results[k] for k in self.floats])
            GraphNotes(graph).gradients = grads
            seeds = [GraphNotes(graph).seeds[self.results[k]] for k in self.floats]
            exe = compile(graph, self.device, self.deterministic, repeated=True)
            self._vjp = exe, seeds, [grads[f"s{k}"] for k in self.floats], size_names(graph)
            self.reads_state = _reads_state(graph, len(self.loop.dtypes), set(grads.values()))
        return self._vjp

    def reverse(self, tape: _Tape, cotangent: list[np.ndarray], check_bounds: bool) -> list[np.ndarray]:
        """Cotangents of the float state going in, from those of the state coming out: the body's
        vector-Jacobian product from the last iteration to the first, each segment between stored
        states reversed by ``checkpoint_schedule.reverse`` in the slots the schedule leaves it."""
        if not self.floats or not tape.trips:
            return [np.asarray(c) for c in cotangent]  # nothing to differentiate, or no iteration ran
        exe, seeds, grads, names = self._reverse_step()
        sizes = _only(tape.sizes, names)
        ct = [cotangent]
        calls = self.calls(tape, check_bounds, reverse=True)

        def advance(state: list, a: int, b: int) -> list:
            if a < b:
                state = self.step(calls, tape, a, calls.fixed(state))
            for n in range(a + 1, b):
                state = self.step(calls, tape, n, state)
            return state

        def adjoint(n: int, state: list) -> None:
            out = calls(exe, {**self._args(tape, n, calls.fixed(state)), **dict(zip(seeds, ct[0]))}, sizes)
            ct[0] = [out[g] for g in grads]

        with self._lock:
            if tape.schedule.kind == "state not read":  # any state will do: the one going in
                state = calls.fixed(tape.checkpoints[0])  # copied once, not per adjoint
                for n in range(tape.trips - 1, -1, -1):
                    adjoint(n, state)
            else:
                for start, end, free in reversed(tape.schedule.segments(tape.trips)):
                    checkpoint_schedule.reverse(tape.checkpoints.pop(start), start, end, free, advance, adjoint)
            calls.submit()
        self.last = tape.schedule
        self.held_bytes = min(tape.schedule.slots, tape.trips) * self.loop.state_bytes(tape.sizes)
        return [np.asarray(c) for c in ct[0]]


def _reads_state(vjp: ir.DataflowGraph, count: int, gradients: set[str]) -> bool:
    """Whether the gradients of a body's vector-Jacobian product graph depend on the state
    going in (``s0 .. s{count-1}``): a path from one to a gradient.  A loop nested in the body
    hides its paths (its state comes back through arguments): assumed to."""
    if loops_of(vjp):
        return True
    state = {f"s{k}" for k in range(count)}
    accesses = [n for n in vjp.nx if isinstance(vjp.node(n), ir.AccessNode)]
    reached = set().union(*(nx.descendants(vjp.nx, n) for n in accesses if vjp.node(n).container in state))
    return any(vjp.node(n).container in gradients for n in reached if isinstance(vjp.node(n), ir.AccessNode))


def _peak(exe: Any) -> int:
    """Bytes an executable's buffers take (0 on the numpy device)."""
    return int(exe.stats().get("peak_bytes", 0))


class LoopProgram:
    """An executable (``lowering.Executable``'s call) for a graph that keeps loops out."""

    def __init__(self, graph: ir.DataflowGraph, device: str | None, deterministic: bool):
        self.graph = graph
        self.loops = loops_of(graph)
        stage = graph.copy()
        for loop in self.loops:
            for c in loop.inputs:
                stage.containers[c].role = "result"
        self.stage = lowering.compile(stage, device=device, deterministic=deterministic)
        self.device = self.stage.device
        self.runners = [_LoopRunner(loop, self.device, deterministic) for loop in self.loops]
        notes = GraphNotes(graph)
        self.loop_seeds: dict[str, str] = notes.loop_seeds or {}
        self.loop_gradients: dict[str, str] = notes.loop_gradients or {}
        self.stage_sizes = frozenset(str(s) for s in stage.size_symbols())
        self._bound: dict[tuple, dict[str, int]] = {}  # argument shapes and sizes -> bound sizes
        self._last_sizes: dict[str, int] = {}
        left = notes.loop_state_bytes  # under a memory budget: what the stage's buffers leave
        differentiated = [r for r in self.runners if r.floats]
        for runner in differentiated if left is not None else ():
            runner.state_memory = left // len(differentiated)  # shared equally: all loops' states are held at once

    def checkpointing(self, sizes: Mapping[str, int] | None = None) -> str:
        """Each loop's choice of states to store for its reverse pass, as text (``explain``), for
        ``sizes`` (default: the latest call's)."""
        sizes = self._last_sizes if sizes is None else sizes
        lines = []
        for runner in self.runners:
            loop = runner.loop
            head = f"{loop.name} ({loop.where})"
            if not runner.floats:
                lines.append(f"{head}: no float state, nothing stored for the reverse pass")
                continue
            try:
                lo, end = loop.bounds(sizes)
                state = loop.state_bytes(sizes)
                plan = runner.last if runner.cond is not None and runner.last else runner.schedule(end - lo, sizes)
            except ir.GraphError:
                lines.append(f"{head}: trip count or state size bound at the call: call the program, then ask again")
                continue
            memory = (f"memory_budget leaves {runner.state_memory:,} bytes to the loop, {runner.memory_left():,} "
                      "after its body's and reverse step's buffers" if runner.state_memory is not None
                      else f"sd.loops.CHECKPOINT_BYTES = {loop_api.CHECKPOINT_BYTES:,}")
            how = ("checkpoints=" if loop.checkpoints else "checkpoint_every=" if loop.checkpoint_every
                   else memory)
            lines.append(f"{head}: {state:,}-byte state, {how}: {plan}")
        return "\n".join(lines)

    # -- what the program's inspection methods ask of an executable ------------------------------
    @property
    def source(self) -> "lowering.SlangSource | None":
        """The stage's Slang, then each loop body's (each its own module, run once per iteration)."""
        parts = [self.stage.source]
        for runner in self.runners:
            for what, exe in (("body", runner.body), ("condition", runner.cond),
                              ("reverse step", runner._vjp[0] if runner._vjp else None)):
                if exe is not None and exe.source is not None:
                    parts.append(f"// ---- {runner.loop.name} {what} ({runner.loop.where}), a module of its own ----\n"
                                 + exe.source)
        return None if parts[0] is None else lowering.SlangSource("\n\n".join(parts))

    def kernels(self) -> dict[str, list[str]]:
        """The stage's kernels (loop bodies are graphs of their own: see ``source``)."""
        return self.stage.kernels()

    def stats(self) -> dict:
        """The stage's counts, with each loop's under ``loops``: its body executable's, plus
        ``reverse_step_peak_bytes`` (the buffers of the body's vector-Jacobian product) and
        ``held_state_bytes`` (the most bytes of states its latest reverse pass held: the schedule's
        slots; the state being advanced and the cotangent come on top)."""
        return {**self.stage.stats(),
                "loops": {r.loop.name: {**r.body.stats(), "held_state_bytes": r.held_bytes,
                                        "reverse_step_peak_bytes": _peak(r._vjp[0]) if r._vjp else 0}
                          for r in self.runners}}

    def _zeros(self, name: str, sizes: Mapping[str, int]) -> np.ndarray:
        c = self.graph.containers[name]
        return np.zeros(c.concrete_shape(sizes), dtype=ir.DTYPES[c.dtype])

    def _sizes(self, values: Mapping[str, Any], sizes: Mapping[str, int] | None) -> dict[str, int]:
        """The sizes the arguments (and ``sizes``) bind, remembered per argument shapes (sympy is slow)."""
        key = (tuple((k, np.shape(v)) for k, v in values.items()), tuple(sorted((sizes or {}).items())))
        if key not in self._bound:
            self._bound[key] = ir.bind_sizes(self.graph, values, sizes)
        return self._bound[key]

    def __call__(self, inputs: Mapping[str, Any], sizes: Mapping[str, int] | None = None,
                 return_device_arrays: bool = False, check_bounds: bool = True) -> dict[str, Any]:
        """Results (and gradients) as numpy arrays; ``return_device_arrays`` is not supported
        across loops and gives numpy arrays too.  ``sizes``: size symbols no argument binds
        (a loop nested in a loop's body gets the enclosing program's)."""
        values = {k: (v.numpy() if isinstance(v, lowering.DeviceArray) else v) for k, v in inputs.items()}
        bound = self._last_sizes = self._sizes(values, sizes)
        stage_sizes = _only(bound, self.stage_sizes)
        for loop in self.loops:
            values.update({o: self._zeros(o, bound) for o in loop.outputs})
        values.update({s: self._zeros(s, bound) for s in self.loop_seeds.values()})
        user_seeds = {s: values[s] for s in (GraphNotes(self.graph).seeds or {}).values() if s not in
                      self.loop_seeds.values()}
        if user_seeds:  # forward runs with zero cotangents: the gradients are not wanted yet
            values.update({s: self._zeros(s, bound) for s in user_seeds})
        tapes = []
        for runner in self.runners:
            res = self.stage(values, stage_sizes, check_bounds=check_bounds)
            state, tape = runner.forward([np.asarray(res[c]) for c in runner.loop.inputs], bool(self.loop_seeds),
                                         check_bounds, bound)
            state = [np.asarray(v) for v in state]
            tapes.append(tape)
            values.update(zip(runner.loop.outputs, state))
        values.update(user_seeds)
        results = {k: np.asarray(v) for k, v in self.stage(values, stage_sizes, check_bounds=check_bounds).items()}
        if not self.loop_seeds:
            return results
        self._reverse(values, user_seeds, tapes, results, check_bounds, bound)
        return results

    def _reverse(self, values: dict, user_seeds: dict, tapes: list[_Tape], results: dict, check_bounds: bool,
                 bound: Mapping[str, int]) -> None:
        """Add the gradients through the loops to ``results`` (which has those through the stage)."""
        gradients = [g for g in GraphNotes(self.graph).gradients.values()]
        outs = {o: np.array(results[g]) for o, g in self.loop_gradients.items()}
        quiet = {s: np.zeros_like(np.asarray(v)) for s, v in user_seeds.items()}
        for j in range(len(self.runners) - 1, -1, -1):
            runner = self.runners[j]
            floats = runner.floats
            loop = runner.loop
            cotangent = runner.reverse(tapes[j], [outs[loop.outputs[k]] for k in floats], check_bounds)
            seeds = {s: self._zeros(s, bound) for s in self.loop_seeds.values()}
            seeds.update({self.loop_seeds[loop.inputs[k]]: ct for k, ct in zip(floats, cotangent)})
            back = self.stage({**values, **quiet, **seeds}, _only(bound, self.stage_sizes), check_bounds=check_bounds)
            for g in gradients:
                results[g] = results[g] + np.asarray(back[g])
            for earlier in self.runners[:j]:
                for k in earlier.floats:
                    o = earlier.loop.outputs[k]
                    outs[o] = outs[o] + np.asarray(back[self.loop_gradients[o]])
