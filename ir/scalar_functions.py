"""numpy's scalar functions that sympy has no exact counterpart for.

``np.fmax``/``np.fmin`` drop a NaN argument (``np.fmax(nan, 0) == 0``) where
``sympy.Max`` (numpy's ``maximum``) propagates it, and ``np.cbrt`` is the real
cube root (``np.cbrt(-8) == -2``) where ``sympy.cbrt`` is the principal root
``x**(1/3)``, NaN for a negative float.  Each is a sympy function of its own
that evaluates numbers, prints for numpy (``_numpycode``, so the interpreter's
``lambdify`` calls numpy's own function) and carries its derivative
(``fdiff``: JAX's conventions, see each class).  Other printers dispatch on the
class name (``_print_fmax``...).
"""
from __future__ import annotations

import sympy


def _all_integer(args) -> bool:
    return all(a.is_integer for a in args)


class fmax(sympy.Function):  # noqa: N801 (numpy's name; printers dispatch on it)
    """``np.fmax(a, b)``: the larger argument, the other one where one is NaN.

    Gradient as JAX's ``jnp.fmax = where((a > b) | isnan(b), a, b)``: all to
    ``a`` where it wins or ``b`` is NaN, all to ``b`` otherwise (ties
    included).  That mask is exactly ``b != fmax(a, b)`` under IEEE
    comparisons (``nan != nan``), which every printer can evaluate; sympy
    cannot state ``isnan`` (it folds ``Ne(b, b)`` to False)."""

    nargs = 2
    _extremum = sympy.Max
    _numpy = "numpy.fmax"

    @classmethod
    def eval(cls, a, b):
        if _all_integer((a, b)) or a == b:  # integers have no NaN; fmax(x, x) is x, NaN or not
            return cls._extremum(a, b)
        if a.is_Number and b.is_Number:
            return b if a is sympy.nan else a if b is sympy.nan else cls._extremum(a, b)
        return None

    def fdiff(self, argindex: int = 1):
        a_wins = sympy.Ne(self.args[1], self)
        return sympy.Piecewise((1, a_wins), (0, True)) if argindex == 1 else \
            sympy.Piecewise((0, a_wins), (1, True))

    def _numpycode(self, printer) -> str:
        return f"{printer._module_format(self._numpy)}({', '.join(printer._print(a) for a in self.args)})"


class fmin(fmax):  # noqa: N801
    """``np.fmin(a, b)``: as ``fmax`` with the smaller argument; JAX's mask is
    ``(a < b) | isnan(b)``, again exactly ``b != fmin(a, b)``."""

    _extremum = sympy.Min
    _numpy = "numpy.fmin"


class cbrt(sympy.Function):  # noqa: N801
    """``np.cbrt(x)``: the real cube root, negative for a negative ``x``.

    Derivative as JAX's: ``1 / (3 cbrt(x)**2)``, which is ``|x|**(-2/3) / 3``,
    ``inf`` at 0 and NaN at NaN."""

    nargs = 1

    @classmethod
    def eval(cls, x):
        if x.is_Number:
            return sympy.nan if x is sympy.nan else sympy.real_root(x, 3)
        return None

    def fdiff(self, argindex: int = 1):
        return 1 / (3 * self ** 2)

    def _numpycode(self, printer) -> str:
        return f"{printer._module_format('numpy.cbrt')}({printer._print(self.args[0])})"
