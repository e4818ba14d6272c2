"""Gradient checking: analytic gradients against central finite differences.

A failing check says *where* the derivative goes wrong, not only that it does:
besides the input, element and the two values, it re-checks every tasklet's
symbolic partials against finite differences of that tasklet's body alone, at
the connector values the failing forward run produced, and names the tasklet
(and connector pair) that disagrees.
"""
from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np
import sympy

from symdiff import ir
from symdiff.ir.graph import FLOAT_DTYPES, DataflowGraph
from symdiff.ir.graph_notes import GraphNotes

from .backward import add_backward_pass
from .derivatives import is_float_symbol, tasklet_partials
from .rule_blame import custom_vjp_blame, registered_rule_note


class GradientCheckError(AssertionError):
    """Analytic and numeric gradients disagree; the message says where."""


def check_graph_gradients(graph: DataflowGraph, inputs: Mapping[str, np.ndarray],
                          wrt: Sequence[str] | None = None, outputs: Sequence[str] | None = None, *,
                          eps: float = 1e-6, atol: float = 1e-5, rtol: float = 1e-4,
                          sizes: Mapping[str, int] | None = None, seed: int = 0,
                          cotangents: Mapping[str, np.ndarray] | None = None,
                          fast: bool = False) -> dict[str, np.ndarray]:
    """Check ``add_backward_pass`` on ``graph`` at ``inputs`` in float64.

    ``wrt`` defaults to the float arguments, ``outputs`` to the results.  Each
    output gets ``cotangents[output]`` or else a fixed random cotangent (a
    vector-Jacobian check covers every output element at once).  ``fast=True``
    first compares three random directional derivatives per input (twelve runs
    instead of two per element; ``directions_agree``) and only falls back to the element-by-element
    check, which names the element, when a direction disagrees.  Returns the analytic gradients; raises
    ``GradientCheckError`` naming the input, element, both values and the
    tasklet whose partial derivative disagrees with finite differences.
    """
    wrt = list(wrt if wrt is not None else
               [a for a in graph.arguments if graph.containers[a].dtype in FLOAT_DTYPES])
    outputs = list(outputs if outputs is not None else graph.results)
    values = {k: np.asarray(v, dtype=np.float64) if graph.containers[k].dtype in FLOAT_DTYPES else np.asarray(v)
              for k, v in inputs.items()}
    bound = ir.bind_sizes(graph, values, sizes)
    rng = np.random.default_rng(seed)
    if cotangents is None:
        cotangents = {o: rng.normal(size=graph.containers[o].concrete_shape(bound)) for o in outputs}
    cotangents = {o: np.broadcast_to(np.asarray(cotangents[o], np.float64), graph.containers[o].concrete_shape(bound))
                  for o in outputs}

    backward = graph.copy()
    grads = add_backward_pass(backward, wrt, outputs)
    feed = dict(values)
    feed.update({GraphNotes(backward).seeds[o]: ct for o, ct in cotangents.items()})
    result = ir.run(backward, feed, sizes=bound, float_dtype="float64")
    analytic = {x: result[grads[x]] for x in wrt}

    def objective(point: Mapping[str, np.ndarray]) -> tuple[float, float]:
        out = ir.run(graph, point, sizes=bound, float_dtype="float64")
        terms = [cotangents[o] * out[o] for o in outputs]
        return float(sum(np.sum(t) for t in terms)), float(sum(np.sum(np.abs(t)) for t in terms))

    for x in wrt:
        if fast and directions_agree(objective, values, x, analytic[x], rng, eps):
            continue
        numeric = np.zeros_like(values[x])
        for element in np.ndindex(values[x].shape):
            point = dict(values)
            shifted = values[x].copy()
            h = eps * max(1.0, abs(shifted[element]))
            shifted[element] += h
            point[x] = shifted
            up = objective(point)[0]
            shifted[element] -= 2 * h
            down = objective(point)[0]
            numeric[element] = (up - down) / (2 * h)
        error = np.abs(analytic[x] - numeric) - (atol + rtol * np.abs(numeric))
        error = np.where(np.isnan(error) & ~(np.isnan(analytic[x]) & np.isnan(numeric)), np.inf, error)
        if np.any(error > 0):
            element = np.unravel_index(int(np.nanargmax(error)), error.shape) if error.ndim else ()
            raise GradientCheckError(
                f"gradient of {sum(error.ravel() > 0)} element(s) of input {x!r} is wrong; worst at "
                f"element {tuple(int(e) for e in element)}: analytic {float(analytic[x][element])!r} vs "
                f"numeric (central differences, eps={eps}) {float(numeric[element])!r}.\n"
                + diagnose(graph, values, bound, eps=eps, atol=atol, rtol=rtol)
                + custom_vjp_blame(graph, x, values, cotangents, bound, lambda grad, expected=numeric: bool(
                    np.all(np.abs(grad - expected) <= atol + rtol * np.abs(expected)))))
    return analytic


# roundings of its terms' magnitude allowed in one evaluation of the objective (a float64
# interpreter run of a few dozen operations), and in the analytic dot product
ROUNDINGS = 64


def _slope(objective: Callable, values: Mapping[str, np.ndarray], x: str, v: np.ndarray,
           h: float) -> tuple[float, float]:
    """Central difference of the objective along ``v`` with step ``h``, and the magnitude
    of the objective's terms (what the rounding of its evaluations scales with)."""
    up, up_size = objective({**values, x: values[x] + h * v})
    down, down_size = objective({**values, x: values[x] - h * v})
    return (up - down) / (2 * h), max(up_size, down_size)


def directions_agree(objective: Callable, values: Mapping[str, np.ndarray], x: str, analytic: np.ndarray,
                     rng: np.random.Generator, eps: float = 1e-6, directions: int = 3) -> bool:
    """Whether ``analytic`` (the gradient for input ``x``) agrees with central differences of
    ``objective`` (point -> (value, magnitude of its terms)) along random directions.

    The fast path of ``check_graph_gradients``: a direction agrees only within the error of
    the difference quotient itself: rounding of the two evaluations (``ROUNDINGS`` units of
    the terms' magnitude, over ``2h``), truncation (the slope's change from step ``h`` to
    ``2h`` is three times the truncation error at ``h``), and rounding of the dot product.
    None of this is the user's per-element ``atol``/``rtol`` summed over the elements, which
    grew with the input's size and let a wrong element through; a direction that does not
    agree sends the input to the element-by-element check, which applies ``atol``/``rtol``.
    """
    u = float(np.finfo(np.float64).eps)
    h = eps * max(1.0, float(np.abs(values[x]).max(initial=0.0)))
    for _ in range(directions):
        v = rng.normal(size=values[x].shape)
        slope, size = _slope(objective, values, x, v, h)
        slope2, size2 = _slope(objective, values, x, v, 2 * h)
        expected = float(np.sum(analytic * v))
        explained = (ROUNDINGS * u * max(size, size2) / h + abs(slope2 - slope)
                     + ROUNDINGS * u * float(np.abs(analytic * v).sum()))
        if not abs(expected - slope) <= explained:
            return False
    return True


def diagnose(graph: DataflowGraph, values: Mapping[str, np.ndarray], sizes: Mapping[str, int], *,
             eps: float = 1e-6, atol: float = 1e-5, rtol: float = 1e-4) -> str:
    """Which tasklets' symbolic partials disagree with finite differences of
    their own bodies at the connector values of a forward run, worst first."""
    state = ir.run(graph, values, sizes=sizes, float_dtype="float64", keep=True)
    found = []
    for node in graph.topological_order():
        t = graph.node(node)
        if not hasattr(t, "body"):
            continue
        worst = _tasklet_disagreement(graph, node, state, sizes, eps, atol, rtol)
        if worst is not None:
            found.append(worst)
    if not found:
        return "Every tasklet's partials agree with finite differences of its body at this point."
    found.sort(key=lambda f: -f[0])
    lines = [f"tasklet {name!r}{' (' + src + ')' if src else ''}: d {o}/d {conn} is {an!r} but finite "
             f"differences of the tasklet alone give {num!r} (at {point}){registered_rule_note(graph, name)}"
             for _, name, src, o, conn, an, num, point in found]
    return "Partial derivatives that disagree with finite differences:\n  " + "\n  ".join(lines)


def _connector_values(graph: DataflowGraph, tasklet: str, state: Mapping[str, np.ndarray],
                      sizes: Mapping[str, int]) -> tuple[dict[sympy.Symbol, np.ndarray], np.ndarray]:
    """Every connector's (and index symbol's) value at every domain point, and
    the condition mask, by running a probe tasklet on the interpreter."""
    t = graph.node(tasklet)
    probe = DataflowGraph("probe")
    feed = {}
    for access, m in graph.reads(tasklet):
        if m.container not in probe.containers:
            c = graph.containers[m.container]
            probe.add_container(c.name, c.shape, c.dtype, "argument")
        feed[m.container] = state[access]
    extents = [e - b for _, b, e in t.domain]
    origin = tuple(s - b for s, b, _ in t.domain)
    mask_name = probe.add_container(probe.unique_name("mask"), extents, "float64", "result").name
    body, writes = {"mask": sympy.S.One}, {"mask": (probe.access(mask_name, 0), origin)}
    columns = {}
    for conn, sym in list(t.inputs.items()) + [(f"_index_{s}", s) for s in t.index_symbols]:
        dtype = graph.containers[graph.node(next(a for a, m in graph.reads(tasklet) if m.connector == conn))
                                 .container].dtype if conn in t.inputs else "int32"
        name = probe.add_container(probe.unique_name(f"value_{conn}"), extents, dtype, "result").name
        out = f"out_{len(columns)}"
        body[out] = sym
        writes[out] = (probe.access(name, 0), origin)
        columns[sym] = name
    reads = {m.connector: (probe.access(m.container, 0), m.index) for _, m in graph.reads(tasklet)}
    probe.add_tasklet("probe", t.domain, body, reads, writes, condition=t.condition)
    out = ir.run(probe, feed, sizes=sizes, float_dtype="float64")
    mask = out[mask_name].astype(bool)
    return {sym: out[name][mask] for sym, name in columns.items()}, mask


def _tasklet_disagreement(graph, tasklet, state, sizes, eps, atol, rtol):
    t = graph.node(tasklet)
    partials = tasklet_partials(t.body, t.inputs)
    if not partials:
        return None
    columns, _ = _connector_values(graph, tasklet, state, sizes)
    args = tuple(columns)
    worst = None
    for (o, conn), partial in partials.items():
        sym = t.inputs[conn]
        if not is_float_symbol(sym):
            continue
        f = sympy.lambdify(args, t.body[o], modules="numpy")
        df = sympy.lambdify(args, partial, modules="numpy")
        base = [columns[s] for s in args]
        pos = args.index(sym)
        with np.errstate(all="ignore"):
            analytic = np.broadcast_to(df(*base), base[pos].shape).astype(float)
            h = eps * np.maximum(1.0, np.abs(base[pos]))
            up = list(base)
            up[pos] = base[pos] + h
            down = list(base)
            down[pos] = base[pos] - h
            numeric = (np.asarray(f(*up), dtype=float) - np.asarray(f(*down), dtype=float)) / (2 * h)
            numeric = np.broadcast_to(numeric, analytic.shape)
            excess = np.abs(analytic - numeric) - (atol + rtol * np.abs(numeric))
        excess = np.where(np.isfinite(numeric), np.nan_to_num(excess, nan=np.inf), -np.inf)
        if excess.size and excess.max() > 0:
            at = int(np.argmax(excess))
            point = {str(s): float(columns[s][at]) for s in args}
            candidate = (float(excess[at]), tasklet, t.source, o, conn, float(analytic[at]),
                         float(numeric[at]), point)
            if worst is None or candidate[0] > worst[0]:
                worst = candidate
    return worst

