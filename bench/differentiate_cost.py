"""Cost of add_backward_pass on chains of elementwise tasklets.

    python bench/differentiate_cost.py [sizes...]

Prints seconds for 100, 1,000 and 10,000 tasklets (default) in two
flavours: "repeated" cycles through five bodies, as a traced program repeats
a few ops (derivative caches hit), and "distinct" gives every tasklet its own
constant, so each body is differentiated afresh (the worst case).  Caches are
cleared before every measurement.  Time per tasklet should stay flat
(linear growth).
"""
from __future__ import annotations

import sys
import time

import sympy

from symdiff.ir.graph import DataflowGraph, index_symbol
from symdiff import derivatives
from symdiff.backward import add_backward_pass
from symdiff.derived import use_stored

i = index_symbol("i")
a = sympy.Symbol("a", real=True)
BODIES = [sympy.sin(a), a * a, sympy.exp(-a), a + 1, sympy.tanh(a)]


def chain(n: int, distinct: bool) -> DataflowGraph:
    g = DataflowGraph(f"chain{n}")
    g.add_container("x", (64,), "float32", "argument")
    prev = g.access("x", 0)
    for k in range(n):
        name = g.add_container(f"v{k}", (64,), "float32", "result" if k == n - 1 else "transient").name
        body = sympy.sin(a) * sympy.Float(1 + k / n) + a if distinct else BODIES[k % len(BODIES)]
        g.add_tasklet(f"t{k}", [(i, 0, 64)], {"o": body}, {"a": (prev, (i,))},
                      {"o": (g.access(name, 0), (i,))})
        prev = g.access(name, 0)
    return g


def clear_caches() -> None:
    for fn in (derivatives._partials, derivatives.may_be_nonfinite, use_stored):
        fn.cache_clear()


def measure(n: int, distinct: bool) -> float:
    g = chain(n, distinct)
    clear_caches()
    start = time.perf_counter()
    add_backward_pass(g, ["x"], [f"v{n - 1}"])
    return time.perf_counter() - start


def main(sizes: list[int]) -> None:
    print(f"{'tasklets':>9} {'flavour':>9} {'seconds':>9} {'ms/tasklet':>11}")
    for distinct in (False, True):
        for n in sizes:
            t = measure(n, distinct)
            print(f"{n:>9} {'distinct' if distinct else 'repeated':>9} {t:>9.3f} {1000 * t / n:>11.3f}")


if __name__ == "__main__":
    main([int(s) for s in sys.argv[1:]] or [100, 1000, 10000])
