"""docs/tutorial.ipynb runs top to bottom in a real Jupyter kernel.

The kernel is this interpreter (``sys.executable -m ipykernel_launcher``), not
whatever a ``python3`` kernelspec on the machine points to: CI installs the
package into one environment and must test that one, with no
``ipykernel install`` step."""
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
from ipykernel.kernelspec import get_kernel_dict  # noqa: E402
from jupyter_client.kernelspec import KernelSpec, KernelSpecManager  # noqa: E402
from jupyter_client.manager import KernelManager  # noqa: E402

TUTORIAL = Path(__file__).resolve().parents[2] / "docs" / "tutorial.ipynb"


class _ThisInterpreter(KernelSpecManager):
    """Every kernel name resolves to an ipykernel on ``sys.executable``."""

    def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
        return KernelSpec(resource_dir="", **get_kernel_dict())


def test_tutorial_executes_without_errors(tmp_path):
    nb = nbformat.read(TUTORIAL, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("import sys; print(sys.executable, end='')"))
    km = KernelManager(kernel_name="python3", kernel_spec_manager=_ThisInterpreter())
    client = nbclient.NotebookClient(nb, km=km, timeout=120, allow_errors=False,
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError naming the cell and its traceback
    nbformat.write(nb, tmp_path / "tutorial.ipynb")  # kept by pytest for a look after a failure
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    html = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert any("symdiff-explain" in h for h in html), "explain() did not display as HTML"
    assert any("highlight" in h for h in html), "slang_source() did not display highlighted"
    assert any("image/svg+xml" in o.get("data", {}) for o in outputs), "no graph was rendered"
    assert nb.cells[-1].outputs[0]["text"] == sys.executable, "the kernel ran on another interpreter"


def test_committed_tutorial_has_no_stale_outputs():
    nb = nbformat.read(TUTORIAL, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)
