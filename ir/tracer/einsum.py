"""np.einsum and the products defined by it (tensordot, inner, vdot, N-d dot,
multi_dot), all reaching ``contraction.pair``: the ``@`` tasklet.

An einsum runs in four steps: subscripts parsed (``...`` named by spare
letters, implicit output sorted), a letter repeated within one operand taken
as a diagonal view, a letter only one operand has and the output lacks
summed on its own, then operands contracted two at a time, always the pair
whose result is smallest (a greedy order, as opt_einsum's 'greedy'), and
the last one transposed to the output's order (a view).
"""
from __future__ import annotations

import string
from typing import Sequence

import numpy as np
import sympy

from .contraction import letter_sizes, pair
from .dispatch import implements
from .elementwise import constant_operand
from .errors import ShapeMismatchError, UnsupportedOperationError
from .indexing import reshape, transpose
from .reductions import reduce
from .reshuffle import remap
from .traced_array import TracedArray

_OP = "numpy.einsum"
Term = tuple[TracedArray, list[str]]


def _parse(subscripts: str, ndims: Sequence[int]) -> tuple[list[list[str]], list[str]]:
    """Letters per operand and of the output, ``...`` expanded into spare
    (upper-case, unused) letters right-aligned as numpy broadcasts them."""
    subscripts = subscripts.replace(" ", "")
    inputs, arrow, output = subscripts.partition("->")
    parts = inputs.split(",")
    if len(parts) != len(ndims):
        raise ShapeMismatchError(_OP, f"{len(parts)} operand subscripts for {len(ndims)} operands")
    used = set(subscripts)
    spare = [c for c in string.ascii_uppercase + string.ascii_lowercase if c not in used]
    ell_count = max((n - len(p.replace("...", "")) for p, n in zip(parts, ndims) if "..." in p), default=0)
    ellipsis = spare[:ell_count]
    letters = []
    for p, n in zip(parts, ndims):
        plain = p.replace("...", "")
        if not all(c.isalpha() for c in plain) or p.count("...") > 1:
            raise UnsupportedOperationError(_OP, f"subscripts {p!r}: letters and at most one '...'")
        if "..." in p:
            head, _, tail = p.partition("...")
            letters.append(list(head) + ellipsis[len(ellipsis) - (n - len(plain)):] + list(tail))
        else:
            letters.append(list(p))
    if arrow:
        if "..." in output:
            head, _, tail = output.partition("...")
            out = list(head) + ellipsis + list(tail)
        else:
            out = list(output)
    else:
        counts = {}
        for ls in letters:
            for c in ls:
                counts[c] = counts.get(c, 0) + 1
        out = ellipsis + sorted(c for c, k in counts.items() if k == 1 and c not in ellipsis)
    everywhere = {c for ls in letters for c in ls}
    if len(set(out)) != len(out) or any(c not in everywhere for c in out):
        raise ShapeMismatchError(_OP, f"output subscripts {''.join(out)!r}: each must appear once, and in an input")
    return letters, out


def _interleaved(args: Sequence) -> tuple[str, list]:
    """``einsum(a, [0, 1], b, [1, 2], [0, 2])`` as subscripts."""
    def name(axes) -> str:
        return "".join("..." if ax is Ellipsis else string.ascii_letters[ax] for ax in axes)
    pairs = len(args) // 2
    operands, subs = list(args[0:2 * pairs:2]), [name(s) for s in args[1:2 * pairs:2]]
    output = "->" + name(args[-1]) if len(args) % 2 else ""
    return ",".join(subs) + output, operands


def _diagonals(arr: TracedArray, letters: list[str]) -> Term:
    """A letter repeated in one operand reads the diagonal: one placeholder
    for all its axes (a view)."""
    unique = list(dict.fromkeys(letters))
    if len(unique) == len(letters):
        return arr, letters
    sizes = letter_sizes(_OP, [(arr, letters)])
    return remap(arr, [sizes[c] for c in unique],
                 lambda v: tuple(v[unique.index(c)] for c in letters), None), unique


def _sum_private(term: Term, needed: set[str]) -> Term:
    """Sum the axes whose letters no other operand and not the output has."""
    arr, letters = term
    private = [k for k, c in enumerate(letters) if c not in needed]
    if not private:
        return term
    return reduce("sum", arr, tuple(private), False, "sum"), [c for c in letters if c in needed]


def _size(term_letters, sizes) -> sympy.Expr:
    return sympy.Mul(*(sizes[c] for c in term_letters))


def _cheapest_pair(terms: list[Term], out: list[str], sizes: dict) -> tuple[int, int]:
    """The two operands whose contraction gives the smallest result (ties:
    the first); sizes with symbols compare by their letter count."""
    best, choice = None, (0, 1)
    for x in range(len(terms)):
        for y in range(x + 1, len(terms)):
            keep = _needed(terms, out, (x, y))
            letters = [c for c in dict.fromkeys(terms[x][1] + terms[y][1]) if c in keep]
            size = _size(letters, sizes)
            key = (0, int(size)) if size.is_Integer else (1, len(letters))
            if best is None or key < best:
                best, choice = key, (x, y)
    return choice


def _needed(terms: list[Term], out: list[str], skip: Sequence[int]) -> set[str]:
    """Letters the output or an operand not in ``skip`` still has."""
    return set(out).union(*(set(t[1]) for k, t in enumerate(terms) if k not in skip))


def contract_terms(terms: list[Term], out: list[str]) -> TracedArray:
    """The einsum of ``terms`` (arrays with their letters) into ``out``."""
    sizes = letter_sizes(_OP, terms)
    spare = next(c for c in string.ascii_letters if c not in sizes)
    terms = [_diagonals(*t) for t in terms]
    terms = [_sum_private(t, _needed(terms, out, (k,))) for k, t in enumerate(terms)]
    while len(terms) > 1:
        x, y = _cheapest_pair(terms, out, sizes)
        keep = _needed(terms, out, (x, y))
        merged = pair("einsum", terms[x], terms[y], keep, spare)
        terms = [t for k, t in enumerate(terms) if k not in (x, y)] + [merged]
    arr, letters = _sum_private(terms[0], set(out))
    if letters == out:
        return arr
    return transpose(arr, [letters.index(c) for c in out])


@implements(np.einsum)
def einsum(*operands, out=None, optimize=False, dtype=None, order="K", casting="safe"):
    if out is not None or dtype is not None:
        raise UnsupportedOperationError(_OP, "out= and dtype= are not supported")
    if isinstance(operands[0], str):
        subscripts, arrays = operands[0], list(operands[1:])
    else:
        subscripts, arrays = _interleaved(operands)
    trace = next(x.trace for x in arrays if isinstance(x, TracedArray))
    arrays = [constant_operand(trace, np.asarray(x)) if not isinstance(x, TracedArray) else x for x in arrays]
    if any(not isinstance(x, TracedArray) for x in arrays):
        raise UnsupportedOperationError(_OP, "operands must be arrays (a 0-d number: multiply instead)")
    letters, out = _parse(subscripts, [x.ndim for x in arrays])
    return contract_terms(list(zip(arrays, letters)), out)


@implements(np.tensordot)
def tensordot(a, b, axes=2):
    op = "numpy.tensordot"
    if isinstance(axes, (int, np.integer)):
        n = int(axes)
        ax_a, ax_b = list(range(a.ndim - n, a.ndim)), list(range(n))
    else:
        ax_a, ax_b = ([x] if isinstance(x, (int, np.integer)) else list(x) for x in axes)
    if len(ax_a) != len(ax_b):
        raise ShapeMismatchError(op, f"axes {axes}: as many axes of a as of b")
    ax_a = [x % a.ndim for x in ax_a]
    ax_b = [x % b.ndim for x in ax_b]
    la = [string.ascii_lowercase[k] for k in range(a.ndim)]
    lb = [string.ascii_uppercase[k] for k in range(b.ndim)]
    for x, y in zip(ax_a, ax_b):
        if not a.sym_shape[x] == b.sym_shape[y]:
            raise ShapeMismatchError(op, f"shape-mismatch for sum: axis {x} of a ({a.sym_shape[x]}) and axis {y} "
                                     f"of b ({b.sym_shape[y]})")
        lb[y] = la[x]
    out = [c for k, c in enumerate(la) if k not in ax_a] + [c for k, c in enumerate(lb) if k not in ax_b]
    return contract_terms([(a, la), (b, lb)], out)


@implements(np.inner)
def inner(a, b):
    if np.ndim(a) == 0 or np.ndim(b) == 0:
        return np.multiply(a, b)
    return tensordot(a, b, ([-1], [-1]))


@implements(np.vdot)
def vdot(a, b):
    return tensordot(reshape(a, -1), reshape(b, -1), 1)


def dot_nd(a: TracedArray, b: TracedArray) -> TracedArray:
    """numpy's dot of N-d arrays: a's last axis against b's second-to-last."""
    return tensordot(a, b, ([-1], [-2]))


@implements(np.linalg.multi_dot)
def multi_dot(arrays, *, out=None):
    """Products in the order that needs the fewest multiply-adds (the matrix
    chain's dynamic programme); a 1-d first or last array is a row or a column
    whose axis leaves the result, as in numpy."""
    op = "numpy.linalg.multi_dot"
    arrays = list(arrays)
    if out is not None or len(arrays) < 2 or not all(isinstance(x, TracedArray) for x in arrays):
        raise UnsupportedOperationError(op, "needs two or more traced arrays (and no out=)")
    first_vector, last_vector = arrays[0].ndim == 1, arrays[-1].ndim == 1
    mats = list(arrays)
    if first_vector:
        mats[0] = reshape(mats[0], (1, -1))
    if last_vector:
        mats[-1] = reshape(mats[-1], (-1, 1))
    if any(m.ndim != 2 for m in mats):
        raise ShapeMismatchError(op, "the inner arrays must be 2-d")
    dims = [m.sym_shape[0] for m in mats] + [mats[-1].sym_shape[1]]
    result = _chain(mats, dims, *_chain_order(dims))
    shape = result.sym_shape
    keep = tuple(d for k, d in enumerate(shape) if not ((k == 0 and first_vector) or (k == 1 and last_vector)))
    return reshape(result, keep) if keep != shape else result


def _chain_order(dims: list) -> tuple[dict, int, int]:
    """The split table of the matrix-chain dynamic programme over ``dims``."""
    n = len(dims) - 1
    value = [int(d) if d.is_Integer else 1 << 20 for d in dims]
    cost = {(i, i): 0 for i in range(n)}
    split = {}
    for length in range(2, n + 1):
        for i in range(n - length + 1):
            j = i + length - 1
            cost[i, j], split[i, j] = min((cost[i, k] + cost[k + 1, j] + value[i] * value[k + 1] * value[j + 1], k)
                                          for k in range(i, j))
    return split, 0, n - 1


def _chain(mats: list, dims: list, split: dict, i: int, j: int) -> TracedArray:
    if i == j:
        return mats[i]
    k = split[i, j]
    return np.matmul(_chain(mats, dims, split, i, k), _chain(mats, dims, split, k + 1, j))
