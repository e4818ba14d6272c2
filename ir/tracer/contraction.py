"""The one contraction tasklet every product reaches: ``@``, einsum,
tensordot, inner, vdot.

Two operands whose axes are named by letters make one tasklet: its domain is
the output's letters then the summed letters, its body the product of the two
reads, its write the output element with ``"sum"`` when a letter is summed.
With one summed letter and every index a lone domain symbol this is the
matmul shape ``lowering.matmul`` tiles (``(batch..., i, j, k)`` writing
``c[batch..., i, j]``); several summed letters are first packed into one
(``pack``), so an einsum or tensordot over two axes gets the tiled kernel too.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import sympy

from .elementwise import result_dtype
from .emit import as_arith, domain_symbols, new_array, read, same, shape_str, write
from .errors import ShapeMismatchError
from .traced_array import TracedArray

Operand = tuple[TracedArray, Sequence[str]]   # an array and a letter per axis


def letter_sizes(op: str, operands: Sequence[Operand]) -> dict[str, sympy.Expr]:
    """Each letter's extent; size-1 axes broadcast, other mismatches are errors."""
    sizes: dict[str, sympy.Expr] = {}
    for arr, letters in operands:
        if len(letters) != arr.ndim:
            raise ShapeMismatchError(op, f"{len(letters)} subscripts for an operand of shape "
                                     f"{shape_str(arr.sym_shape)}")
        for letter, d in zip(letters, arr.sym_shape):
            old = sizes.get(letter)
            if old is None or same(old, 1):
                sizes[letter] = d
            elif not same(d, 1) and not same(d, old):
                raise ShapeMismatchError(op, f"subscript {letter!r} has sizes {old} and {d} in different operands")
    return sizes


def contract(op: str, a: Operand, b: Operand, out: Sequence[str],
             symbols: Mapping[str, sympy.Symbol] | None = None) -> TracedArray:
    """``out[out letters] = sum over the other letters of a * b`` as one
    tasklet (see the module docstring); ``symbols`` names the domain symbols
    (``@`` keeps the names it always had)."""
    sizes = letter_sizes(op, [a, b])
    summed = [c for c in dict.fromkeys(list(a[1]) + list(b[1])) if c not in out]
    order = list(out) + summed
    if symbols is None:
        symbols = dict(zip(order, domain_symbols(len(order))))
    trace = a[0].trace
    result = new_array(trace, tuple(sizes[c] for c in out), result_dtype(trace, [a[0], b[0]], "arith"), op)
    reads: dict = {}
    factors = []
    for conn, (arr, letters) in zip("ab", (a, b)):
        index = tuple(0 if same(d, 1) and not same(sizes[c], 1) else symbols[c]
                      for c, d in zip(letters, arr.sym_shape))
        factors.append(as_arith(read(arr, index, conn, reads), arr.dtype_name))
    domain = tuple((symbols[c], 0, sizes[c]) for c in order)
    write(op, result, tuple(symbols[c] for c in out), domain, factors[0] * factors[1], reads,
          "sum" if summed else None)
    return result


def pack(op: str, arr: TracedArray, letters: Sequence[str], merged: Sequence[str], into: str) -> Operand:
    """A copy of ``arr`` with the axes ``merged`` (in that order) made one last
    axis named ``into``, the others kept in their order: one tasklet whose
    write index is affine (``k = k0 * n1 + k1``), so the copy is a plain
    strided write."""
    kept = [c for c in letters if c not in merged]
    dims = dict(zip(letters, arr.sym_shape))
    flat_size = sympy.Mul(*(dims[c] for c in merged))
    out = new_array(arr.trace, tuple(dims[c] for c in kept) + (flat_size,), arr.dtype_name, f"{op}_packed")
    syms = dict(zip(letters, domain_symbols(len(letters), "p")))
    ones = {c for c in letters if same(dims[c], 1)}   # index 0, outside the domain: a symbol of extent 1 in the
    at = {c: sympy.Integer(0) if c in ones else syms[c] for c in letters}   # packed index hides its distinctness
    flat = sympy.Integer(0)
    for c in merged:
        flat = flat * dims[c] + at[c]
    reads: dict = {}
    value = read(arr, tuple(at[c] for c in letters), "x", reads)
    write(op, out, tuple(at[c] for c in kept) + (flat,),
          tuple((syms[c], 0, dims[c]) for c in letters if c not in ones), value, reads)
    return out, kept + [into]


def pair(op: str, a: Operand, b: Operand, keep: set[str], spare: str) -> Operand:
    """Contract two operands over their shared letters not in ``keep``; the
    result's letters are the shared kept ones (batch), then ``a``'s, then
    ``b``'s (the ``@`` layout).  ``spare`` is a letter free for a packed axis."""
    la, lb = list(a[1]), list(b[1])
    shared = [c for c in la if c in lb]
    summed = [c for c in shared if c not in keep]
    out = [c for c in shared if c in keep] + [c for c in la if c not in lb] + [c for c in lb if c not in la]
    if len(summed) > 1:
        a = pack(op, a[0], la, summed, spare)
        b = pack(op, b[0], lb, summed, spare)
    return contract(op, a, b, out), out
