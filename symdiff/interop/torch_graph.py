"""A PyTorch module as a ``torch.fx`` graph that numpy code can run.

``ModuleGraph`` traces a module with ``torch.fx`` once per combination of
its layers' training modes (a mode is read at trace time:
``F.dropout(x, training=self.training)``), keeping batch norm and dropout
layers whole (``torch_layers``), and checks every node against the operator
tables (``torch_ops``) at once, so an unsupported operator is refused when
the module is compiled, naming the module path it sits in.

``ModuleGraph.run`` interprets the graph with numpy operations on whatever
arrays it is given: symdiff's traced arrays when the program is traced, plain
numpy arrays for ``noise_shapes`` (the shapes of the dropout masks the
compiled module draws before each call).  The program's arguments are the
module's inputs, then the parameters and buffers it reads (and the momentum
factor of each batch norm that updates running statistics, a 0-d tensor:
``momentum=None`` makes it change every batch), then one noise per dropout;
its results are the module's outputs (flattened), then the new
running mean and variance of each such batch norm.
"""
from __future__ import annotations

import operator
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

import numpy as np

from symdiff.ir import tasklet_notes as notes
from symdiff.ir.tracer import context

from ..program import ProgramError
from . import torch_layers, torch_ops
from .torch_bridge import host_array

if TYPE_CHECKING:
    import torch
    import torch.fx

Array = Any


class ModuleCompileError(ProgramError):
    """A module ``sd.compile_module`` cannot compile; the message names the
    module path, the operator and what works instead."""


@dataclass
class Noise:
    """One dropout in training: where, its probability, and whether it drops
    whole channels (``Dropout2d``: noise shaped ``(N, C, 1, ...)``)."""
    path: str
    p: float
    feature: bool


@dataclass
class _Run:
    """The state of one interpretation of the graph (``torch_layers.Step``)."""
    arrays: dict[str, Array]
    noises: list[Array] | None  # None: record the shapes instead (``shapes``)
    shapes: list[tuple[tuple[int, ...], str]] = field(default_factory=list)
    updates: dict[str, tuple[Array, Array]] = field(default_factory=dict)
    taken: int = 0

    def state(self, name: str) -> Array:
        return self.arrays[name]

    def noise(self, x: Array, p: float, feature: bool) -> Array:
        shape = tuple(x.shape[:2]) + (1,) * (x.ndim - 2) if feature else tuple(x.shape)
        if self.noises is None:
            self.shapes.append((shape, str(x.dtype)))
            return np.ones(shape, dtype=x.dtype)
        self.taken += 1
        return self.noises[self.taken - 1]

    def running_update(self, path: str, mean: Array, var: Array) -> None:
        self.updates[path] = (mean, var)

    def factor(self, path: str) -> Array:
        return self.arrays[_join(path, "@momentum")]

    @contextmanager
    def within(self, path: str, module: "torch.nn.Module") -> Iterator[None]:
        """Label the tasklets made inside as ``module``'s (at ``path``), so
        that a layer kept whole shows its submodules in the graph view."""
        trace = context.active()
        before = {t.name for t in trace.graph.tasklets()} if trace is not None else set()
        yield
        if trace is not None:
            label(trace.graph, before, where(path, type(module).__name__), type(module).__name__)


def where(path: str, kind: str) -> str:
    """``model.layer.0.attn (MultiheadAttention)``: how errors and the graph name a module."""
    return f"{_join('model', path) if path else 'model'} ({kind})"


def label(graph: Any, before: set[str], source: str, op: str) -> None:
    """Tasklets made since ``before`` (their names) and not labelled yet (by
    a submodule run inside) take ``source`` as their source, so graph views
    and ``explain`` group and name them by the model's structure; the
    operator goes in its ``torch_op`` note (``ir.tasklet_notes``)."""
    for t in graph.tasklets():
        if t.name not in before and notes.torch_op(t) is None:
            t.source = source
            notes.annotate(t, torch_op=op)


def _argument_name(name: str, taken: set[str]) -> str:
    base = re.sub(r"\W", "_", name).strip("_") or "arg"
    base = base if base[0].isalpha() else f"a_{base}"
    out, k = base, 1
    while out in taken:
        out, k = f"{base}_{k}", k + 1
    taken.add(out)
    return out


def _tracer_class() -> type:
    import torch.fx

    class Tracer(torch.fx.Tracer):
        """Keeps the layers of ``torch_layers`` whole."""

        def is_leaf_module(self, m: "torch.nn.Module", qualified_name: str) -> bool:
            return type(m) in torch_layers.layers()

    return Tracer


def modes(module: "torch.nn.Module") -> tuple[bool, ...]:
    """The training flag of every submodule: a new combination traces again."""
    return tuple(m.training for m in module.modules())


class ModuleGraph:
    """``module`` traced by ``torch.fx`` in its current modes, checked against
    the operator tables."""

    def __init__(self, module: "torch.nn.Module", given: int | None = None):
        """``given``: how many leading ``forward`` parameters the calls pass;
        the others keep their defaults, as constants (``mask=None``)."""
        self.module = module
        self.modes = modes(module)
        self.root = type(module).__name__
        self.defaults = _defaults(module, given)
        tracer = _tracer_class()()
        try:
            self.graph = _whole(module) if type(module) in torch_layers.layers() else \
                tracer.trace(module, concrete_args=self.defaults or None)
        except Exception as err:  # control flow on a traced value and the like
            inner = list(getattr(tracer, "module_stack", {}) or {})[-1:]
            path = ".".join(["model", *inner])
            kind = type(module.get_submodule(inner[0])).__name__ if inner and inner[0] else self.root
            raise ModuleCompileError(f"sd.compile_module: torch.fx cannot trace {path} ({kind}): {err}. "
                                     "Write the branch with torch.where, or make the value a constant") from err
        self.nodes = [n for n in self.graph.nodes if n.target not in _specialisation_checks()]
        placeholders = [n for n in self.nodes if n.op == "placeholder"]
        self.constants = dict(zip(placeholders[len(placeholders) - len(self.defaults):], self.defaults.values()))
        self.inputs = [n for n in placeholders if n not in self.constants]
        self.layers = torch_layers.layers()
        self.state_names: list[str] = []   # qualified names of the tensors the graph reads
        self.noises: list[Noise] = []
        self.batchnorms: list[str] = []    # paths of layers that update running statistics
        self.cast_back: dict[int, str] = {}  # output index -> torch dtype name (see _as_float)
        for node in self.nodes:
            self._check(node)
        names: set[str] = set()
        self.arg_names = ([_argument_name(n.name, names) for n in self.inputs]
                          + [_argument_name(s, names) for s in self.state_names]
                          + [_argument_name(f"dropout_noise_{k}", names) for k in range(len(self.noises))])
        import torch.utils._pytree as pytree
        (output,) = [n for n in self.nodes if n.op == "output"]
        self.output_leaves, self.output_spec = pytree.tree_flatten(output.args[0])

    # -- checking ----------------------------------------------------------------------
    def where(self, node: "torch.fx.Node") -> str:
        """``model.layer.0.attn (MultiheadAttention)``: the innermost module a node belongs to."""
        if node.op == "call_module":
            path, kind = node.target, type(self.module.get_submodule(node.target)).__name__
        else:
            stack = node.meta.get("nn_module_stack") or {}
            path, cls = list(stack.values())[-1] if stack else ("", type(self.module))
            kind = getattr(cls, "__name__", str(cls)) if path else self.root
        return where(path, kind)

    def _refuse(self, node: "torch.fx.Node", what: str, why: str) -> ModuleCompileError:
        return ModuleCompileError(f"sd.compile_module: {self.where(node)}: {what} {why}")

    def _use_state(self, name: str) -> None:
        if name not in self.state_names:
            self.state_names.append(name)

    def _check(self, node: "torch.fx.Node") -> None:
        import torch
        if node.op == "get_attr":
            value = self._attribute(node.target)
            if isinstance(value, torch.Tensor):
                self._use_state(node.target)
            return
        if node.op == "call_module":
            module = self.module.get_submodule(node.target)
            layer = self.layers[type(module)]
            reason = layer.check(module)
            if reason:
                raise self._refuse(node, f"{type(module).__name__}:", reason)
            for name in layer.state(module):
                self._use_state(_join(node.target, name))
            if layer.run is torch_layers.dropout and module.training and 0 < module.p < 1:
                self.noises.append(Noise(node.target, module.p, torch_layers._is_feature_dropout(module)))
            if layer.run is torch_layers.batch_norm and torch_layers.updates_running_stats(module):
                self.batchnorms.append(node.target)
                self._use_state(_join(node.target, "@momentum"))
            return
        if node.op == "call_function":
            if node.target in _dropouts():
                self._check_dropout(node)
                return
            op = torch_ops.function_op(node.target)
            name = torch_ops.display_name(node.target)
            if op is None:
                raise self._refuse(node, f"calls {name}, which sd.compile_module does not run.",
                                   f"Supported torch functions: {', '.join(torch_ops.supported_functions())}; "
                                   f"tensor methods: {', '.join(sorted(torch_ops.METHODS))}; layers kept whole: "
                                   f"{', '.join(sorted(t.__name__ for t in self.layers))}")
        elif node.op == "call_method":
            name = node.target
            op = torch_ops.METHODS.get(name.removesuffix("_")) if name != "_" else None
            if op is None:
                raise self._refuse(node, f"calls the tensor method .{name}(), which sd.compile_module does not run.",
                                   f"Supported methods: {', '.join(sorted(torch_ops.METHODS))}")
            if name.endswith("_") and self._is_state(node.args[0]):
                raise self._refuse(node, f"updates {node.args[0].target} in place (.{name}()),",
                                   "which a compiled module cannot do: compute a new tensor instead")
            name = f".{name}()"
        else:
            return
        if node.kwargs.get("inplace") is True and node.args and self._is_state(node.args[0]):
            raise self._refuse(node, f"updates {node.args[0].target} in place ({name}, inplace=True),",
                               "which a compiled module cannot do: compute a new tensor instead")
        if op.check is not None:
            reason = op.check(*node.args, **node.kwargs)
            if reason:
                raise self._refuse(node, f"{name}:", reason)

    def _check_dropout(self, node: "torch.fx.Node") -> None:
        p, training, feature = _dropout_arguments(node.target, node.args, node.kwargs)
        if not isinstance(p, (int, float)) or not isinstance(training, bool):
            raise self._refuse(node, f"{torch_ops.display_name(node.target)}:",
                               "p and training must be constants (numbers, self.training)")
        if training and 0 < p < 1:
            self.noises.append(Noise(self.where(node), float(p), feature))

    def _is_state(self, arg: Any) -> bool:
        import torch.fx
        return isinstance(arg, torch.fx.Node) and arg.op == "get_attr"

    def _attribute(self, target: str) -> Any:
        value = self.module
        for part in target.split("."):
            value = getattr(value, part)
        return value

    # -- running -----------------------------------------------------------------------
    def state_tensors(self) -> list["torch.Tensor"]:
        """The module's parameters and buffers the graph reads, as they are now
        (the very Parameter objects), and each batch norm's momentum factor."""
        import torch
        out = []
        for name in self.state_names:
            if name.endswith("@momentum"):
                layer = self.module.get_submodule(name.removesuffix("@momentum").removesuffix("."))
                batches = int(layer.num_batches_tracked) if layer.num_batches_tracked is not None else 1
                factor = layer.momentum if layer.momentum is not None else 1.0 / max(batches, 1)
                out.append(torch.tensor(factor, dtype=layer.running_mean.dtype))
            elif any(name == _join(path, stat) for path in self.batchnorms for stat in ("running_mean", "running_var")):
                out.append(self._attribute(name).detach().clone())  # updated after the call; the VJP keeps this
            else:
                out.append(self._attribute(name))
        return out

    def run(self, arrays: Sequence[Array], record_noise: bool = False) -> tuple[list[Array], _Run]:
        """The module's flat outputs for the program's arguments ``arrays``
        (``record_noise``: no noise arguments; their shapes are recorded)."""
        import torch.fx
        count = len(self.inputs) + len(self.state_names)
        named = dict(zip(self.state_names, arrays[len(self.inputs):count]))
        noises = None if record_noise else list(arrays[count:count + len(self.noises)])
        step = _Run(named, noises)
        env: dict[Any, Any] = dict(zip(self.inputs, arrays[:len(self.inputs)]))
        env.update(self.constants)
        trace = context.active()
        for node in self.nodes:
            if node.op in ("placeholder", "output"):
                continue
            args = torch.fx.node.map_arg(node.args, lambda n: env[n])
            kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: env[n])
            before = {t.name for t in trace.graph.tasklets()} if trace is not None else set()
            try:
                env[node] = self._evaluate(node, step, args, kwargs)
                if trace is not None:
                    label(trace.graph, before, self.where(node), torch_ops.display_name(node.target)
                          if node.op == "call_function" else str(node.target))
            except ModuleCompileError:
                raise
            except Exception as err:
                raise ModuleCompileError(f"sd.compile_module: {self.where(node)}: {node.format_node()} "
                                         f"failed: {type(err).__name__}: {err}") from err
            if self._in_place(node) and isinstance(node.args[0], torch.fx.Node):
                env[node.args[0]] = env[node]  # later uses see the updated tensor, as in torch
        leaves = [env[x] if isinstance(x, torch.fx.Node) else x for x in self.output_leaves]
        return leaves, step

    @staticmethod
    def _in_place(node: "torch.fx.Node") -> bool:
        return node.kwargs.get("inplace") is True or (node.op == "call_method" and node.target.endswith("_"))

    def _evaluate(self, node: "torch.fx.Node", step: _Run, args: tuple, kwargs: dict) -> Any:
        if node.op == "get_attr":
            return step.state(node.target) if node.target in step.arrays else self._attribute(node.target)
        if node.op == "call_module":
            layer = self.layers[type(self.module.get_submodule(node.target))]
            return layer.run(step, node.target, self.module.get_submodule(node.target), *args, **kwargs)
        if node.op == "call_function":
            if node.target in _dropouts():
                p, training, feature = _dropout_arguments(node.target, args, kwargs)
                return torch_layers.dropout_values(step, args[0], p, training, feature)
            return torch_ops.function_op(node.target).fn(*args, **kwargs)
        return torch_ops.METHODS[node.target.removesuffix("_")].fn(*args, **kwargs)

    def noise_shapes(self, inputs: Sequence[np.ndarray]) -> list[tuple[tuple[int, ...], str]]:
        """Shape and dtype of each dropout noise for inputs of these shapes: the
        graph run once on numpy arrays (zeros for the inputs)."""
        state = [host_array(t) for t in self.state_tensors()]
        with np.errstate(all="ignore"):
            _, step = self.run(list(inputs) + state, record_noise=True)
        return step.shapes

    def _as_float(self, k: int, out: Any) -> Any:
        """Integer and bool outputs (``argmax`` predictions, masks) leave the
        program as float32, exact below 2**24, and are cast back after the
        call: every output of a differentiated program must be a float."""
        kind = np.dtype(str(getattr(out, "dtype", "float32")))
        if kind.kind in "iub":
            self.cast_back[k] = "bool" if kind.kind == "b" else "int64"
            return out.astype("float32")
        return out

    def program_function(self) -> Callable:
        """The graph as a numpy function of the program's arguments (one
        positional parameter each, as symdiff traces them)."""
        import inspect
        graph = self

        def module_program(*arrays: Array) -> tuple:
            outputs, step = graph.run(arrays)
            outputs = [graph._as_float(k, out) for k, out in enumerate(outputs)]
            updates = [a for path in graph.batchnorms for a in step.updates[path]]
            return tuple(outputs) + tuple(updates)

        module_program.__signature__ = inspect.Signature(
            [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in self.arg_names])
        module_program.__name__ = re.sub(r"\W", "_", self.root)
        return module_program


def _defaults(module: "torch.nn.Module", given: int | None) -> dict[str, Any]:
    """The defaults of ``forward``'s parameters after the first ``given``."""
    import inspect
    if given is None:
        return {}
    params = [p for p in inspect.signature(module.forward).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return {p.name: p.default for p in params[given:] if p.default is not p.empty}


def _specialisation_checks() -> set:
    """The asserts ``torch.fx`` adds for parameters traced as constants."""
    import torch
    import torch.fx._symbolic_trace as symbolic
    return {torch._assert, getattr(symbolic, "_assert_is_none", None)} - {None}


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _whole(layer: "torch.nn.Module") -> "torch.fx.Graph":
    """The graph of a module that is itself a layer kept whole: one call of
    it, with a placeholder per positional ``forward`` parameter, so that the
    ones a call leaves out keep their defaults (``_defaults``), as in a traced
    module.  A layer returning a tuple (``nn.MultiheadAttention``: output and
    weights) has each element as an output, as ``getitem`` nodes would give
    them in a traced parent."""
    import inspect
    import typing

    import torch.fx
    graph = torch.fx.Graph()
    signature = inspect.signature(layer.forward)
    params = [p.name for p in signature.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    call = graph.call_module("", tuple(graph.placeholder(name) for name in params))
    returns = signature.return_annotation
    count = len(typing.get_args(returns)) if typing.get_origin(returns) is tuple else 0
    graph.output(tuple(graph.call_function(operator.getitem, (call, k)) for k in range(count)) if count else call)
    return graph


def _dropouts() -> set:
    import torch.nn.functional as F
    return {F.dropout, F.dropout1d, F.dropout2d, F.dropout3d}


def _dropout_arguments(target: Callable, args: tuple, kwargs: dict) -> tuple[Any, Any, bool]:
    """``(p, training, drops channels)`` of an ``F.dropout*`` call."""
    import torch.nn.functional as F
    given = dict(zip(["input", "p", "training", "inplace"], args))
    given.update(kwargs)
    return given.get("p", 0.5), given.get("training", True), target is not F.dropout
