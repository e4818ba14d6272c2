"""Hand-built graphs for the lowering tests, one per memlet shape the planner
must handle, each with inputs; the oracle is ``ir.run`` on the same graph."""
from __future__ import annotations

from typing import Callable

import numpy as np
import sympy

from symdiff import ir
from symdiff.ir.graph import DataflowGraph, connector_symbol, index_symbol

i, j, k = (index_symbol(n) for n in "ijk")


class G:
    """Terse construction: every tasklet writes a fresh version (or, with
    ``same_version``, the latest one, for several writers of one version)."""

    def __init__(self, name: str, dtype: str = "float32"):
        self.g = DataflowGraph(name)
        self.dtype = dtype

    def c(self, name: str, shape, role: str = "transient", dtype: str | None = None) -> "G":
        self.g.add_container(name, shape, dtype or self.dtype, role)
        return self

    def s(self, conn: str, container: str):
        """The body symbol of a connector reading ``container``."""
        return connector_symbol(conn, self.g.containers[container].dtype)

    def t(self, name: str, domain, expr, reads: dict, out, acc: str | None = None, condition=sympy.true,
          same_version: bool = False, source: str | None = None) -> "G":
        target = self.g.latest(out[0]) if same_version else self.g.new_version(out[0])
        self.g.add_tasklet(name, domain, {"o": expr}, {n: (self.g.latest(cn), ix) for n, (cn, ix) in reads.items()},
                           {"o": (target, tuple(out[1]), acc)}, condition=condition, source=source)
        return self


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def chain(n: int = 1000, ops: int = 10, dtype: str = "float32") -> tuple[DataflowGraph, dict]:
    """``ops`` elementwise tasklets in a row (mixing exp, tanh, sqrt, powers)."""
    b = G("chain", dtype).c("x", (n,), "argument")
    src = "x"
    fns = [lambda a: a * a + 1, lambda a: sympy.tanh(a), lambda a: sympy.exp(-a), lambda a: sympy.sqrt(a + 2),
           lambda a: 3 * a - a ** 3 / 7, lambda a: sympy.sin(a) * 2, lambda a: 1 / (1 + a * a),
           lambda a: sympy.Max(a, 0.1), lambda a: sympy.log(a + 3), lambda a: a ** -0.5]
    for step in range(ops):
        dst = "y" if step == ops - 1 else f"h{step}"
        b.c(dst, (n,), "result" if dst == "y" else "transient")
        a = b.s("a", src)
        b.t(f"op{step}", [(i, 0, n)], fns[step % len(fns)](a), {"a": (src, (i,))}, (dst, (i,)),
            source=f"chain.py:{step + 1}")
        src = dst
    return b.g, {"x": rng().uniform(0.1, 1.0, n).astype(dtype)}


def broadcast(m: int = 37, n: int = 53) -> tuple[DataflowGraph, dict]:
    b = G("broadcast").c("x", (m, n), "argument").c("r", (n,), "argument").c("col", (m,), "argument")
    b.c("z", (m, n), "result")
    x, r, c = b.s("x", "x"), b.s("r", "r"), b.s("c", "col")
    b.t("bcast", [(i, 0, m), (j, 0, n)], x * r + c, {"x": ("x", (i, j)), "r": ("r", (j,)), "c": ("col", (i,))},
        ("z", (i, j)))
    g = rng(1)
    return b.g, {"x": g.normal(size=(m, n)).astype(np.float32), "r": g.normal(size=n).astype(np.float32),
                 "col": g.normal(size=m).astype(np.float32)}


def reduction(op: str, shape: tuple[int, ...], axis: int | None) -> tuple[DataflowGraph, dict]:
    """``op``-reduce a 2-D argument along ``axis`` (None: everything)."""
    b = G(f"reduce_{op}").c("x", shape, "argument")
    out_shape = () if axis is None else tuple(s for d, s in enumerate(shape) if d != axis)
    out_index = () if axis is None else tuple(s for d, s in enumerate((i, j)) if d != axis)
    b.c("out", out_shape, "result")
    x = b.s("x", "x")
    body = x if op == "prod" else x * x - x
    b.t(f"reduce_{op}", [(i, 0, shape[0]), (j, 0, shape[1])], body, {"x": ("x", (i, j))}, ("out", out_index), op)
    if op == "prod":  # powers of two: every order of multiplication gives the exact product
        return b.g, {"x": rng(2).choice(np.float32([1, -1, 2, 0.5]), shape, p=[0.499, 0.499, 0.001, 0.001])}
    return b.g, {"x": rng(2).uniform(-1, 1, shape).astype(np.float32)}


def matmul(m: int = 33, kk: int = 17, n: int = 9) -> tuple[DataflowGraph, dict]:
    b = G("matmul").c("a", (m, kk), "argument").c("w", (kk, n), "argument").c("c", (m, n), "result")
    b.t("matmul", [(i, 0, m), (j, 0, n), (k, 0, kk)], b.s("a", "a") * b.s("w", "w"),
        {"a": ("a", (i, k)), "w": ("w", (k, j))}, ("c", (i, j)), "sum")
    g = rng(3)
    return b.g, {"a": g.normal(size=(m, kk)).astype(np.float32), "w": g.normal(size=(kk, n)).astype(np.float32)}


def partial_update(n: int = 300) -> tuple[DataflowGraph, dict]:
    """``u = a.copy(); u[1:-1] = (a[:-2] + a[2:]) / 2; out = 2 * u``: a guarded
    copy and an update writing one version, then a reader of it."""
    b = G("partial").c("a", (n,), "argument").c("u", (n,), "transient").c("out", (n,), "result")
    a, l, r = b.s("a", "a"), b.s("l", "a"), b.s("r", "a")
    b.t("keep_edges", [(i, 0, n)], a, {"a": ("a", (i,))}, ("u", (i,)),
        condition=sympy.Or(sympy.Eq(i, 0), sympy.Eq(i, n - 1)))
    b.t("update", [(i, 1, n - 1)], (l + r) / 2, {"l": ("a", (i - 1,)), "r": ("a", (i + 1,))}, ("u", (i,)),
        same_version=True)
    b.t("double", [(i, 0, n)], 2 * b.s("u", "u"), {"u": ("u", (i,))}, ("out", (i,)))
    return b.g, {"a": rng(4).normal(size=n).astype(np.float32)}


def histogram(op: str = "sum", n: int = 50000, bins: int = 4) -> tuple[DataflowGraph, dict]:
    """Scatter with heavy collisions: ``h[idx[i]] op= w[i]``."""
    b = G(f"histogram_{op}").c("idx", (n,), "argument", "int32").c("w", (n,), "argument").c("h", (bins,), "result")
    b.t("scatter", [(i, 0, n)], b.s("w", "w"), {"w": ("w", (i,)), "q": ("idx", (i,))},
        ("h", (b.s("q", "idx"),)), op)
    g = rng(5)
    w = np.ones(n, np.float32) if op == "sum" else g.uniform(-3, 3, n).astype(np.float32)
    return b.g, {"idx": g.integers(0, bins, n).astype(np.int32), "w": w}


def strided_sum(n: int = 3000) -> tuple[DataflowGraph, dict]:
    """``s[i // 3] += x[i]`` : non-injective affine writes, colliding threads."""
    b = G("strided").c("x", (n,), "argument").c("s", (n // 3,), "result")
    b.t("fold", [(i, 0, n)], b.s("x", "x"), {"x": ("x", (i,))}, ("s", (sympy.floor(i / 3),)), "sum")
    return b.g, {"x": np.arange(n, dtype=np.float32) % 7}


def gather(n: int = 500, m: int = 40) -> tuple[DataflowGraph, dict]:
    b = G("gather").c("table", (m,), "argument").c("idx", (n,), "argument", "int32").c("y", (n,), "result")
    b.t("gather", [(i, 0, n)], 2 * b.s("v", "table"), {"q": ("idx", (i,)), "v": ("table", (b.s("q", "idx"),))},
        ("y", (i,)))
    g = rng(6)
    return b.g, {"table": g.normal(size=m).astype(np.float32), "idx": g.integers(0, m, n).astype(np.int32)}


def scalars() -> tuple[DataflowGraph, dict]:
    """0-d containers all the way, plus a 0-d reduction result read by a later tasklet."""
    b = G("scalars").c("a", (), "argument").c("v", (4,), "argument").c("s", (), "transient").c("out", (), "result")
    b.t("dot", [(i, 0, 4)], b.s("v", "v") * b.s("a", "a"), {"v": ("v", (i,)), "a": ("a", ())}, ("s", ()), "sum")
    b.t("finish", [], sympy.exp(b.s("s", "s")) + b.s("a", "a"), {"s": ("s", ()), "a": ("a", ())}, ("out", ()))
    return b.g, {"a": np.array(0.5, np.float32), "v": np.array([1, 2, 3, 4], np.float32)}


def masks(n: int = 200) -> tuple[DataflowGraph, dict]:
    """bool and int32 intermediates: ``relu`` through a stored mask, and an index as a value."""
    b = G("masks").c("x", (n,), "argument").c("m", (n,), "transient", "bool").c("y", (n,), "result")
    b.c("pos", (n,), "result", "int32")
    x = b.s("x", "x")
    b.t("mask", [(i, 0, n)], x > 0, {"x": ("x", (i,))}, ("m", (i,)))
    b.t("relu", [(i, 0, n)], sympy.Piecewise((b.s("x", "x"), b.s("m", "m")), (0, True)) + i * 1e-3,
        {"x": ("x", (i,)), "m": ("m", (i,))}, ("y", (i,)))
    b.t("count", [(i, 0, n)], sympy.Piecewise((i, b.s("m", "m")), (-1, True)), {"m": ("m", (i,))}, ("pos", (i,)))
    return b.g, {"x": rng(7).normal(size=n).astype(np.float32)}


def symbolic_scale() -> tuple[DataflowGraph, dict]:
    """A size symbol bound at call time."""
    N = ir.size_symbol("N")
    b = G("symbolic").c("x", (N,), "argument").c("y", (N,), "result")
    b.t("scale", [(i, 0, N)], 3 * b.s("x", "x"), {"x": ("x", (i,))}, ("y", (i,)))
    return b.g, {"x": np.arange(10, dtype=np.float32)}


CORPUS: dict[str, Callable[[], tuple[DataflowGraph, dict]]] = {
    "chain": chain,
    "broadcast": broadcast,
    "sum_rows": lambda: reduction("sum", (64, 100), 1),
    "max_cols": lambda: reduction("max", (64, 100), 0),
    "min_rows": lambda: reduction("min", (64, 100), 1),
    "prod_rows": lambda: reduction("prod", (64, 100), 1),
    "sum_all_large": lambda: reduction("sum", (300, 1000), None),
    "max_all_large": lambda: reduction("max", (300, 1000), None),
    "min_all_large": lambda: reduction("min", (1000, 300), None),
    "prod_all_large": lambda: reduction("prod", (100, 1000), None),
    "sum_rows_long": lambda: reduction("sum", (3, 100000), 1),
    "matmul": matmul,
    "partial_update": partial_update,
    "histogram_sum": lambda: histogram("sum"),
    "histogram_max": lambda: histogram("max"),
    "histogram_min": lambda: histogram("min"),
    "strided_sum": strided_sum,
    "gather": gather,
    "scalars": scalars,
    "masks": masks,
    "symbolic": symbolic_scale,
}
