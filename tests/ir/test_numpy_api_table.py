"""The guide's table of the numpy API is generated from the tracer's registry
(symdiff.ir.tracer.api_table): it must match what the registry holds now."""
from pathlib import Path

import numpy as np

from symdiff.ir.tracer import api_table

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide.md"


def test_the_guide_s_table_is_up_to_date():
    section = api_table.current_section(GUIDE.read_text())
    assert section is not None, "docs/guide.md lacks the numpy API table's markers"
    assert section == api_table.render(), (
        "docs/guide.md's numpy API table is out of date: run "
        "`python -m symdiff.ir.tracer.api_table --write docs/guide.md`")


def test_every_registered_function_is_listed_and_refusals_are_unregistered():
    listed = " ".join(name for names in api_table.supported().values() for name in names)
    for name in ("np.argmax", "np.nanmean", "np.cov", "np.einsum", "np.roll", "np.ndarray", "np.linspace"):
        assert f"`{name}`" in listed
    refused = api_table.refused()
    assert "`np.nonzero`" in refused and "`np.argmax`" not in refused
    assert not any(f"`np.{getattr(f, '__name__', '')}`" in refused for f in (np.sum, np.where))
