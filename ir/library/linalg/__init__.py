"""``np.linalg`` as library nodes: one module per operation family, each
registering its ``LibraryOp`` (shape rule, numpy implementation, VJP and JVP
rules), plus ``api`` (numpy's entry points and the functions composed from
the ops).  Importing this package registers them all; ``ir.tracer.linalg``
imports it so that tracing sees ``np.linalg``.  Device kernels for
cholesky, solve_triangular, solve, inv, det and slogdet on the Slang devices:
``lowering.library_kernels.linalg``."""
from . import api, cholesky, determinant, inverse, qr, solve, spectral  # noqa: F401 (register the ops)
