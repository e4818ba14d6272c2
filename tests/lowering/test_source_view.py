"""Generated Slang displays highlighted in Jupyter and stays a plain string elsewhere."""
import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import symdiff as sd
from symdiff.lowering import SlangSource, highlight_html
from symdiff.lowering.source_view import HELPERS_FOLLOW, kernels_first

def _text_of(html: str) -> str:
    """The characters a reader sees: tags dropped, entities decoded."""
    return "".join(ET.fromstring(html).itertext())


@pytest.fixture(scope="module")
def source() -> SlangSource:
    @sd.differentiable_program
    def loss(x: sd.f32[8, 3], w: sd.f32[3, 2]):
        return np.sum(np.tanh(x @ w) ** 2)

    return loss.slang_source(device="cpu")


def test_slang_source_is_a_plain_str_with_html(source):
    assert isinstance(source, str) and isinstance(source, SlangSource)
    assert str(source) == source and "[shader(\"compute\")]" in source
    assert "<span" not in str(source)
    assert source._repr_html_() == highlight_html(source)


@pytest.mark.parametrize("engine", ["builtin", "pygments"])
def test_html_keeps_every_kernel_name_and_the_text(source, engine):
    if engine == "pygments":
        pytest.importorskip("pygments")
    html = highlight_html(source, engine)
    assert _text_of(html).strip() == source.strip()
    for name in re.findall(r"^void (k\d+_\w+)\(", source, re.M):
        assert name in html


@pytest.mark.parametrize("engine", ["builtin", "pygments"])
def test_html_escapes_markup(engine):
    if engine == "pygments":
        pytest.importorskip("pygments")
    code = "// a < b && c > d\nint k0_x = 1 < 2 & 3;\n"
    html = highlight_html(code, engine)
    assert "&lt;" in html and "&amp;" in html
    assert _text_of(html).strip() == code.strip()  # parses as XML: no raw < or & left


def test_unknown_engine_is_refused():
    with pytest.raises(ValueError, match="engine"):
        highlight_html("int a;", "vim")


def test_kernels_come_first_and_helpers_after(source):
    """A reader meets the program's kernels first, then the helpers; every
    line of the module is still there, and ``helpers=False`` leaves them out."""
    lines = source.splitlines()
    assert lines[0].startswith("// symdiff: program")
    first_kernel = next(k for k, line in enumerate(lines) if line.startswith("// kernel "))
    helpers = lines.index(HELPERS_FOLLOW)
    assert first_kernel < 5 < helpers
    assert all(not line.startswith("// kernel ") for line in lines[helpers:])
    assert any("floordiv" in line for line in lines[helpers:])


def test_kernels_first_keeps_every_line_and_drops_repeated_helpers():
    module = "// symdiff: program 'p', 1 kernel(s)\nint helper() { return 1; }\n\n// kernel k0: x\nvoid k0() {}\n"
    joined = module + "\n// ---- loop0 body ----\n" + module.replace("k0", "k1")
    view = kernels_first(joined)
    assert view.count("int helper()") == 1
    assert view.index("void k1()") < view.index(HELPERS_FOLLOW) < view.index("int helper()")
    shown = [line for line in view.splitlines() if line and line != HELPERS_FOLLOW]
    assert sorted(filter(None, joined.splitlines())) == sorted(shown + ["int helper() { return 1; }"])
    assert "int helper()" not in kernels_first(joined, helpers=False)


def test_slang_source_without_helpers_is_shorter(source):
    @sd.differentiable_program
    def loss(x: sd.f32[8, 3], w: sd.f32[3, 2]):
        return np.sum(np.tanh(x @ w) ** 2)

    short = loss.slang_source(device="cpu", helpers=False)
    assert "floordiv(int a" not in short and "[shader(\"compute\")]" in short
    assert len(short) < len(source)
