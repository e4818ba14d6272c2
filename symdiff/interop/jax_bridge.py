"""``sd.to_jax``: a program as a JAX function that ``jax.jit``, ``jax.grad``
and ``jax.vjp`` accept.

A ``jax.custom_vjp`` whose forward and backward are ``jax.pure_callback``s:
the forward runs the program, the backward its VJP program
(``interop.programs.vjp_program``) wrapped by this bridge again, so JAX can
differentiate the backward too (``jax.grad`` of ``jax.grad``).  Output shapes
and dtypes come from the traced graph, so tracing under ``jit`` runs nothing.

Every call crosses to the host: JAX hands the callback host copies of its
arrays and takes the results back (no shared device memory, measured in
``bench/interop.py``).  Under ``jax.vmap`` the callback runs once per batch
element (``vmap_method="sequential"``).  Programs with float64 outputs need
``jax.config.update("jax_enable_x64", True)``, as any float64 JAX code.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from ..program import DifferentiableProgram, ProgramError, differentiable_program
from .programs import float_arguments, output_specs, vjp_program


class JaxFunction:
    """A program as a JAX function (made by ``sd.to_jax``): call it with JAX or
    numpy arrays, positionally or by argument name; it returns an array, or a
    tuple for several outputs.  Arguments outside ``wrt`` (and integer ones)
    get zero cotangents."""

    def __init__(self, program: DifferentiableProgram, wrt: Sequence[str] | None, device: str | None):
        self.program = program
        self.wrt = None if wrt is None else tuple(wrt)
        for w in self.wrt or ():
            if w not in program.arg_names:
                raise ProgramError(f"to_jax: wrt={w!r} is not an argument of {program.name}; its arguments are "
                                   f"{program.arg_names}")
        self.device = device
        self._backward: dict[tuple, JaxFunction] = {}  # (argument shapes, wrt) -> VJP bridge
        self._fn = self._define()

    def __repr__(self) -> str:
        return f"<to_jax {self.program.name}({', '.join(self.program.arg_names)})>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        values = self.program._bind(args, kwargs)
        outs = self._fn(*(values[n] for n in self.program.arg_names))
        return outs[0] if len(outs) == 1 else outs

    def _define(self) -> Callable:
        import jax

        @jax.custom_vjp
        def fn(*args):
            return self._call(args)

        def forward(*args):  # fn itself, not its callback: differentiable again (grad of grad)
            return fn(*args), args

        def backward(args, cotangents):
            shapes = [(tuple(a.shape), np.dtype(a.dtype)) for a in args]
            names = tuple(n for n in float_arguments(self.program, shapes) if self.wrt is None or n in self.wrt)
            if not names:
                return (None,) * len(args)
            grads = self._vjp_bridge(shapes, names)(*args, *cotangents)
            by_name = dict(zip(names, grads if isinstance(grads, tuple) else (grads,)))
            return tuple(by_name[n].astype(a.dtype) if n in by_name else None
                         for n, a in zip(self.program.arg_names, args))

        fn.defvjp(forward, backward)
        return fn

    def _call(self, args: Sequence[Any]) -> tuple:
        """The program as a host callback with outputs of known shapes."""
        import jax
        specs = output_specs(self.program, [(tuple(np.shape(a)), np.dtype(a.dtype)) for a in args])
        return tuple(jax.pure_callback(self._run, [jax.ShapeDtypeStruct(s, d) for s, d in specs], *args,
                                       vmap_method="sequential"))

    def _run(self, *arrays: np.ndarray) -> list[np.ndarray]:
        outs = self.program(*arrays, device=self.device)
        return [np.asarray(o) for o in (outs if isinstance(outs, tuple) else (outs,))]

    def _vjp_bridge(self, shapes: list, names: tuple[str, ...]) -> "JaxFunction":
        key = (tuple(shapes), names)
        if key not in self._backward:
            self._backward[key] = JaxFunction(vjp_program(self.program, shapes, names), None, self.device)
        return self._backward[key]


def to_jax(program: DifferentiableProgram | Callable, wrt: Sequence[str] | str | None = None,
           device: str | None = None) -> JaxFunction:
    """``program`` as a function JAX can ``jit`` and differentiate: forward and
    backward run the program's generated passes as host callbacks; higher
    derivatives differentiate the backward pass again.

    ``wrt``: the arguments JAX may differentiate (default: every float
    argument); others get zero cotangents.  ``device``: as for a program call.
    A plain function is decorated with ``sd.differentiable_program`` first.
    JAX is imported here, not at ``import symdiff``."""
    if not isinstance(program, DifferentiableProgram):
        program = differentiable_program(program)
    return JaxFunction(program, (wrt,) if isinstance(wrt, str) else wrt, device)
