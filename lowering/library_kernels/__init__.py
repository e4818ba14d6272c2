"""Device kernels for library nodes (``lowering.host_steps`` runs them): the
contract is ``registry``'s docstring; importing the package registers every
op family's builders (one module or package each)."""
from .registry import Dispatch, Kernel, Spec, build, has_kernel, register

from . import linalg, scans  # noqa: E402,F401  (register np.linalg's and the scans' kernels)

__all__ = ["Dispatch", "Kernel", "Spec", "build", "has_kernel", "register"]
