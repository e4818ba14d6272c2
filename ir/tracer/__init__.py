"""The Python tracer: ``trace(fn, *specs)`` turns a numpy-style function into a
``DataflowGraph``; ``map[lo:hi, ...]`` writes explicit index-level loops.

Modules, one job each: ``traced_array`` (the array/view model), ``emit``
(containers, reads, SSA writes), ``elementwise``, ``numeric`` (rounding, fmod, logaddexp, isnan...), ``reductions``, ``linalg``,
``indexing`` (views and stores), ``indirect`` (index arrays: gathers, np.add.at), ``creation`` (np.zeros & co. while tracing),
``reshuffle`` (roll, flip, pad, tile... as index maps), ``stacking`` (the *stacks),
``contraction`` (the one product tasklet), ``einsum`` (and tensordot, inner, vdot, multi_dot), ``products``
(kron, cross), ``norms`` (np.linalg norms without decompositions),
``masks`` (x[mask] as where), ``nanreductions``, ``statistics`` (average, cov, corrcoef), ``argextrema``
(argmax/argmin), ``scans`` (cumsum, cumprod, diff, trapezoid), ``sorting`` (sort, argsort, median,
quantiles), ``histogram``, ``maps`` (sd.map), ``trace`` (entry point, results, cache), ``errors``.
"""
from . import (creation, elementwise, indexing, indirect, linalg, reductions, reshuffle,  # noqa: F401 (register the ops)
               einsum, grids, norms, numeric, products, stacking, argextrema, nanreductions, statistics, sorting,
               histogram, scans)
from .errors import (MissingSpecError, ScalarConversionError, ShapeMismatchError, TracedBranchError, TraceError,
                     TraceIndexError, UnsupportedAttributeError, UnsupportedOperationError, UntracedWriteError)
from .maps import map  # noqa: A004
from .strict import ImplicitBroadcastError
from .trace import trace
from .traced_array import TracedArray

__all__ = ["trace", "map", "TracedArray", "TraceError", "MissingSpecError", "ScalarConversionError",
           "ShapeMismatchError", "TracedBranchError", "TraceIndexError", "UnsupportedAttributeError",
           "UnsupportedOperationError", "UntracedWriteError", "ImplicitBroadcastError"]
