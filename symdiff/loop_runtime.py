"""Running a program whose graph keeps loops out (``symdiff.loops``), forward and reverse.

A program graph with loops is an ordinary graph in which each loop's state
going in is a container (``Loop.inputs``) and its state coming out is an
argument (``Loop.outputs``).  ``LoopProgram`` compiles that graph once (the
*stage*, with the loop inputs made results) and each loop body once, and runs:

* forward: the stage with the loop outputs still zero gives the first loop's
  inputs (they cannot depend on any loop's outputs); the loop runs on the host
  as a sequence of calls of its compiled body; the stage runs again with that
  loop's outputs bound, giving the next loop's inputs, and so on; the last run
  gives the results.  Loops run in trace order, so K loops cost K + 1 stage runs.
* reverse (a graph from ``add_backward_pass`` here): the stage's reverse pass
  with the user's cotangents gives the gradients through the code between
  loops and the cotangents of every loop's outputs; loops are then reversed
  last to first: the body's vector-Jacobian product runs backwards over the
  iterations from checkpoints (``Loop.checkpoint_interval``: the state is
  stored every k iterations and the k states in between recomputed from it,
  O(N/k + k) states held), and the cotangent reaching the loop's inputs is
  sent back through the stage's reverse pass, which is linear in its
  cotangents, so the contributions add.

Every run is an ordinary compiled executable (``lowering.compile``), so loops
run on every device, the numpy interpreter included, and the compile time does
not depend on the trip count.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from symdiff import ir
from symdiff import lowering

from . import backward
from .errors import DifferentiationError
from .loops import Loop, LoopError, loops_of, size_names


def _only(sizes: Mapping[str, int], names: frozenset[str]) -> dict[str, int]:
    """The sizes an executable needs: passing others would plan it again for each of their values."""
    return {k: v for k, v in sizes.items() if k in names}


def add_backward_pass(graph: ir.DataflowGraph, inputs: Sequence[str], outputs: Sequence[str],
                      **options: Any) -> dict[str, str]:
    """``symdiff.add_backward_pass`` for a graph that may keep loops out: the loops' float
    outputs are differentiated as inputs and their float inputs as outputs, so that
    ``LoopProgram`` can chain the stage's reverse pass with the loops'
    (``meta["loop_gradients"]``, ``meta["loop_seeds"]``).  Returns the gradients of ``inputs``."""
    loops = loops_of(graph)
    if not loops:
        return backward.add_backward_pass(graph, inputs=inputs, outputs=outputs, **options)
    if "loop_seeds" in graph.meta:
        raise DifferentiationError("second-order gradients through sd.fori_loop / sd.while_loop are not "
                                   "supported yet (the first reverse pass of a loop runs outside the graph)")
    extra_in = [o for loop in loops for o, d in zip(loop.outputs, loop.dtypes) if d in ir.FLOAT_DTYPES]
    extra_out = [c for loop in loops for c, d in zip(loop.inputs, loop.dtypes) if d in ir.FLOAT_DTYPES]
    for loop in loops:
        for c in loop.inputs:
            graph.containers[c].role = "result"
    grads = backward.add_backward_pass(graph, inputs=[*inputs, *extra_in], outputs=[*outputs, *extra_out],
                                       **options)
    graph.meta["loop_gradients"] = {o: grads.pop(o) for o in extra_in}
    graph.meta["loop_seeds"] = {c: graph.meta["seeds"][c] for c in extra_out}
    return grads


def compile(graph: ir.DataflowGraph, device: str | None = None, deterministic: bool = False):  # noqa: A001
    """``lowering.compile``, or a ``LoopProgram`` where the graph keeps loops out."""
    if not loops_of(graph):
        return lowering.compile(graph, device=device, deterministic=deterministic)
    meta = graph.meta
    if "tangent_inputs" in meta or ("loop_seeds" in meta and not {"seeds", "gradients"} <= meta.keys()):
        # a loop's derivative runs outside the graph: a jvp or a sealed gradient program would miss it
        raise DifferentiationError("forward mode (jvp) and gradient programs (grad_program) through "
                                   "sd.fori_loop / sd.while_loop are not supported yet; use value_and_grad or vjp")
    return LoopProgram(graph, device, deterministic)


@dataclass
class _Tape:
    """What the reverse pass of one loop needs from its forward run."""
    lo: int                      # the first iteration's ``i``
    sizes: dict[str, int]        # the sizes the call bound (shapes, trip counts)
    trips: int
    interval: int
    checkpoints: list[tuple[int, list[np.ndarray]]] = field(default_factory=list)


def _kept(value: Any) -> Any:
    """A checkpointed state element: a ``DeviceArray`` result is the caller's own buffer (the
    executable allocates another for its next call); a numpy one is copied to be sure."""
    return value if isinstance(value, lowering.DeviceArray) else np.array(value)


class _LoopRunner:
    """One loop: its compiled body (and condition), run forward and reversed."""

    def __init__(self, loop: Loop, device: str | None, deterministic: bool):
        self.loop = loop
        self.device, self.deterministic = device, deterministic
        self.body = compile(loop.body, device=device, deterministic=deterministic)  # may hold loops itself
        self.cond = compile(loop.cond, device=device, deterministic=deterministic) if loop.cond else None
        self.results = list(loop.body.meta["result_names"])
        self.body_sizes = size_names(loop.body)
        self.cond_sizes = size_names(loop.cond) if loop.cond else frozenset()
        self.floats = [k for k, d in enumerate(loop.dtypes) if d in ir.FLOAT_DTYPES]
        # the state stays on the device between iterations (not for a body holding loops itself)
        self.on_device = device != "numpy" and isinstance(self.body, lowering.Executable)
        self._vjp = None

    @staticmethod
    def _args(tape: _Tape, n: int, state: Sequence[np.ndarray]) -> dict[str, Any]:
        return {"i": np.asarray(tape.lo + n, dtype=np.int32), **{f"s{k}": v for k, v in enumerate(state)}}

    def step(self, tape: _Tape, n: int, state: list, check_bounds: bool) -> list:
        """Iteration ``n`` (counted from 0); the state stays on the device between iterations
        (``DeviceArray``s, numpy arrays on the numpy device)."""
        out = self.body(self._args(tape, n, state), _only(tape.sizes, self.body_sizes), check_bounds=check_bounds,
                        return_device_arrays=self.on_device)
        return [out[r] for r in self.results]

    def running(self, tape: _Tape, n: int, state: list[np.ndarray], check_bounds: bool, planned: int) -> bool:
        if self.cond is None:
            return n < planned
        (result,) = self.loop.cond.meta["result_names"]
        go = bool(np.asarray(self.cond({f"s{k}": v for k, v in enumerate(state)}, _only(tape.sizes, self.cond_sizes),
                                       check_bounds=check_bounds)[result]))
        if go and n >= planned:
            raise LoopError(f"while_loop ({self.loop.where}) still running after max_iters={planned} "
                            "iterations; raise max_iters if the loop converges more slowly (no truncated result "
                            "is returned)")
        return go

    def forward(self, state: list[np.ndarray], keep: bool, check_bounds: bool,
                sizes: Mapping[str, int]) -> tuple[list[np.ndarray], _Tape]:
        lo, end = self.loop.bounds(sizes)
        planned = max(end - lo, 0)
        tape = _Tape(lo, dict(sizes), 0, self.loop.checkpoint_interval(planned, sizes))
        n = 0
        while self.running(tape, n, state, check_bounds, planned):
            if keep and n % tape.interval == 0:
                tape.checkpoints.append((n, [_kept(v) for v in state]))
            state = self.step(tape, n, state, check_bounds)
            n += 1
        tape.trips = n
        return state, tape

    def _reverse_step(self):
        """The body's vector-Jacobian product, compiled on first use."""
        if self._vjp is None:
            graph = self.loop.body.copy()
            grads = add_backward_pass(graph, inputs=[f"s{k}" for k in self.floats],
                                      outputs=[self.results[k] for k in self.floats])
            graph.meta["gradients"] = grads
            seeds = [graph.meta["seeds"][self.results[k]] for k in self.floats]
            exe = compile(graph, device=self.device, deterministic=self.deterministic)
            self._vjp = exe, seeds, [grads[f"s{k}"] for k in self.floats], size_names(graph)
        return self._vjp

    def reverse(self, tape: _Tape, cotangent: list[np.ndarray], check_bounds: bool) -> list[np.ndarray]:
        """Cotangents of the float state going in, from those of the state coming out."""
        if not self.floats:
            return []  # integer state only: nothing to differentiate
        exe, seeds, grads, names = self._reverse_step()
        sizes = _only(tape.sizes, names)
        for start, saved in reversed(tape.checkpoints):
            end = min(start + tape.interval, tape.trips)
            states = [saved]
            for n in range(start, end - 1):
                states.append(self.step(tape, n, states[-1], check_bounds))
            for n in range(end - 1, start - 1, -1):
                out = exe({**self._args(tape, n, states[n - start]), **dict(zip(seeds, cotangent))}, sizes,
                          check_bounds=check_bounds, return_device_arrays=self.on_device)
                cotangent = [out[g] for g in grads]
        return [np.asarray(c) for c in cotangent]


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
        self.loop_seeds: dict[str, str] = graph.meta.get("loop_seeds", {})
        self.loop_gradients: dict[str, str] = graph.meta.get("loop_gradients", {})
        self.stage_sizes = frozenset(str(s) for s in stage.size_symbols())
        self._bound: dict[tuple, dict[str, int]] = {}  # argument shapes and sizes -> bound sizes

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
        """The stage's counts, with each loop's body executable's under ``loops``."""
        return {**self.stage.stats(), "loops": {r.loop.name: r.body.stats() for r in self.runners}}

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
        bound = self._sizes(values, sizes)
        stage_sizes = _only(bound, self.stage_sizes)
        for loop in self.loops:
            values.update({o: self._zeros(o, bound) for o in loop.outputs})
        values.update({s: self._zeros(s, bound) for s in self.loop_seeds.values()})
        user_seeds = {s: values[s] for s in self.graph.meta.get("seeds", {}).values() if s not in
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
        gradients = [g for g in self.graph.meta["gradients"].values()]
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
