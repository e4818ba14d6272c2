"""Every Python example in README.md and docs/*.md runs as written.

A new user pastes an example into a fresh interpreter, so each ```python
block is complete (its imports and data) and runs in a namespace of its own,
unless its first line says it continues an earlier example on the page
(``# continues "A first program" above``): such a block runs with the names
the page's earlier blocks made.  Blocks run on the numpy device (the IR
interpreter: seconds, no compiles), except a block that names a device
(``device="cpu"``), which runs there where that device is present and is
skipped where it is not; so is one importing a framework that is not
installed (torch, JAX).  A failure names the page and line
(``docs/guide.md:123``) of the example's code."""
from __future__ import annotations

import importlib.util
import re
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

from symdiff import lowering

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^(?P<indent>[ \t]*)```python[ \t]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S)
CONTINUES = re.compile(r"#\s*continues\b", re.I)
IMPORTS = re.compile(r"^(?:import|from)\s+(\w+)", re.M)
NAMED_DEVICE = re.compile(r"""device\s*=\s*["'](cpu|vulkan|cuda)["']""")


@dataclass(frozen=True)
class Example:
    page: Path
    line: int       # of the example's first line of code
    code: str       # dedented out of a list item

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def continues(self) -> bool:
        return bool(CONTINUES.match(self.code.lstrip()))

    def missing_module(self) -> str | None:
        """A module the example imports that is not installed (torch, JAX)."""
        return next((m for m in IMPORTS.findall(self.code) if importlib.util.find_spec(m) is None), None)

    def missing_device(self) -> str | None:
        """A device the example names that this machine lacks."""
        present = lowering.available_devices()
        return next((d for d in NAMED_DEVICE.findall(self.code) if d not in present), None)


def examples(page: Path) -> list[Example]:
    """The page's ```python blocks, in order."""
    text = page.read_text(encoding="utf-8")
    found = []
    for m in FENCE.finditer(text):
        indent = len(m.group("indent"))
        code = "".join(line[indent:] for line in m.group("body").splitlines(keepends=True))
        found.append(Example(page, text.count("\n", 0, m.start("body")) + 1, code))
    return found


def run_page(page: Path) -> int:
    """Run the page's examples in order; the number run."""
    made: dict = {}          # every name the page's examples made so far, for continuing ones
    ran = 0
    for example in examples(page):
        if example.missing_device() or example.missing_module():
            continue          # an example for a device or a framework this machine lacks
        namespace = dict(made) if example.continues else {}
        namespace["__name__"] = "__doc_example__"
        source = "\n" * (example.line - 1) + example.code   # tracebacks and messages name the page's lines
        try:
            exec(compile(source, str(example.page), "exec"), namespace)
        except Exception as err:
            raise AssertionError(f"the example at {example.where} fails: {type(err).__name__}: {err}") from err
        made.update(namespace)
        ran += 1
    return ran


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_examples_on_the_page_run_as_written(page, monkeypatch, tmp_path):
    monkeypatch.setenv("SYMDIFF_DEVICE", "numpy")
    monkeypatch.chdir(tmp_path)             # examples that write files (export_slang) write here
    start = time.perf_counter()
    with warnings.catch_warnings():         # an example's warning filters stay inside it
        ran = run_page(page)
    print(f"{page.name}: {ran} examples in {time.perf_counter() - start:.1f} s")


def test_examples_are_found_and_continuations_follow_an_example():
    """The extraction sees the pages' examples (fences inside list items
    too), and a continuing example is never a page's first."""
    every = [e for page in PAGES for e in examples(page)]
    assert len(every) >= 19, [e.where for e in every]
    assert not [e.where for page in PAGES for e in examples(page)[:1] if e.continues]
