"""Generated Slang displays highlighted in Jupyter and stays a plain string elsewhere."""
import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import symdiff as sd
from symdiff.lowering import SlangSource, highlight_html

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
