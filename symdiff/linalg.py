"""``sd.linalg``: the linear algebra of traced programs, as library nodes.

``np.linalg.solve``, ``inv``, ``det``, ``slogdet``, ``cholesky``, ``qr``,
``eigh``, ``eigvalsh``, ``svd``, ``svdvals``, ``pinv``, ``lstsq``,
``matrix_power``, ``cond`` and ``norm(ord=2/-2/'nuc')`` work on traced arrays
directly; this module has the same functions plus ``solve_triangular``
(scipy's form, which numpy lacks).  Each works on plain numpy arrays too.
See the guide's linear-algebra section for the rules, the conventions
(symmetric inputs of cholesky/eigh), undefined derivatives and errors.
"""
from symdiff.ir.library.linalg.api import (cholesky, cond, det, eigh, eigvalsh, inv, lstsq, matrix_power, pinv,
                                           qr, slogdet, solve, solve_triangular, svd, svdvals)

__all__ = ["cholesky", "cond", "det", "eigh", "eigvalsh", "inv", "lstsq", "matrix_power", "pinv", "qr", "slogdet",
           "solve", "solve_triangular", "svd", "svdvals"]
