"""Generated Slang that reads as code in Jupyter.

``SlangSource`` is a ``str``: printing, comparing, writing it to a file or
hashing it behaves exactly like the plain text.  Only Jupyter's rich display
(``_repr_html_``) differs, showing it highlighted.  pygments has no Slang
lexer; its HLSL lexer covers Slang's C-like syntax (Slang is an HLSL
superset).  pygments is optional (it ships with IPython, so it is present
wherever HTML is displayed); without it a small built-in tokenizer colours
comments, keywords, attributes and numbers.
"""
from __future__ import annotations

import html
import re

from .shared_code import SHARED_BY

# Keyword and type names the built-in highlighter colours: what generated
# modules actually use, not the whole language.
_KEYWORDS = ("void", "return", "if", "else", "for", "switch", "case", "default", "break", "uniform",
             "import", "static", "const", "__target_switch", "true", "false")
_TYPES = ("float", "double", "int", "uint", "uint3", "bool", "RWStructuredBuffer")
_TOKEN = re.compile(r"""
    (?P<comment>//[^\n]*|/\*.*?\*/)
  | (?P<string>"[^"\n]*")
  | (?P<attribute>\[(?:shader|numthreads)\b)
  | (?P<number>\b\d+(?:\.\d*)?(?:[eE][-+]?\d+)?[fFlL]?\b)
  | (?P<word>\b[A-Za-z_]\w*\b)
""", re.X | re.S)
_STYLE = {"comment": "color:#408080;font-style:italic", "string": "color:#BA2121",
          "attribute": "color:#AA22FF", "number": "color:#666666", "keyword": "color:#008000;font-weight:bold",
          "type": "color:#B00040"}
_PRE = "margin:0;line-height:125%;font-family:monospace"


class SlangSource(str):
    """Slang module text that Jupyter displays highlighted; otherwise a plain ``str``."""

    def _repr_html_(self) -> str:
        return highlight_html(self)


_MODULE_HEADER = "// symdiff: program "
_KERNEL_HEADER = "// kernel "
HELPERS_FOLLOW = "// ---- helper functions the kernels above call (the module defines them first) ----"
HELPERS_LEFT_OUT = "// (helper functions left out: slang_source(helpers=True) shows them)"


def kernels_first(source: str, helpers: bool = True) -> str:
    """The module as a reader wants it: each module's header line and its
    kernels first, then (``helpers``) the maths and index helpers every module
    starts with, written once however many modules (loop bodies) there are.
    Only the view changes: the module compiled keeps its order, helpers
    before the kernels that call them.  The kernels of the README's program
    started at line 337 of 751, after the helpers."""
    kernels: list[str] = []
    blocks: list[str] = []
    block: list[str] | None = None      # the helpers of the module being read, until its first kernel
    for line in source.splitlines():
        if line.startswith(_MODULE_HEADER):
            kernels += [line, ""]
            block = []
            continue
        if block is not None and line.startswith(_KERNEL_HEADER):
            _keep(blocks, block)
            block = None
        (kernels if block is None else block).append(line)
    _keep(blocks, block or [])          # a module without kernels
    tail = ([HELPERS_FOLLOW, *blocks] if blocks else []) if helpers else [HELPERS_LEFT_OUT]
    return "\n\n".join(["\n".join(kernels).strip("\n"), *tail]) + "\n"


def _keep(blocks: list[str], lines: list[str]) -> None:
    """Add a module's helpers unless an identical block is there already."""
    text = "\n".join(lines).strip("\n")
    if text and text not in blocks:
        blocks.append(text)


def tasklet_lines(source: str) -> dict[str, list[str]]:
    """``{tasklet: [Slang line, ...]}``: the lines generated for each tasklet,
    found by the ``// tasklet NAME (file:line)`` comments the code generator
    writes before them (up to the next such comment or the brace that closes
    the block it is in), for tools that show a tasklet next to its code.  A
    tasklet fused into several kernels collects the lines of each; one folded
    into another's loop (``kernels()`` lists it) has none of its own."""
    out: dict[str, list[str]] = {}
    current, depth = None, 0
    for line in source.splitlines():
        text = line.strip()
        if text.startswith("// tasklet "):
            current, depth = out.setdefault(text.split()[2], []), 0
            continue
        if current is None:
            continue
        depth += text.count("{") - text.count("}")
        if depth < 0:
            current = None
        elif text:
            current.append(text)
    return out


def kernel_headers(source: str) -> dict[str, list[str]]:
    """``{kernel: [comment line, ...]}``: the comment the code generator writes
    above each kernel (``// kernel NAME: ...`` and the lines after it naming
    its tasklets), for tools that show a kernel without its whole body.  A
    kernel running another's code (``lowering.shared_code``) gets that
    code's comment, which names it."""
    out: dict[str, list[str]] = {}
    current = None
    for line in source.splitlines():
        text = line.strip()
        if text.startswith("// kernel "):
            current = out.setdefault(text.split()[2].rstrip(":"), [text])
        elif current is not None and text.startswith("//"):
            current.append(text)
            if text.startswith(SHARED_BY):
                for other in text[len(SHARED_BY):].split(" (")[0].split(", "):
                    out[other] = current
        else:
            current = None
    return out


def highlight_html(source: str, engine: str = "auto") -> str:
    """Highlighted HTML (inline styles, so it survives notebook sanitising and
    export).  ``engine``: ``"pygments"``, ``"builtin"``, or ``"auto"`` (pygments
    when importable)."""
    if engine not in ("auto", "pygments", "builtin"):
        raise ValueError(f"engine must be 'auto', 'pygments' or 'builtin', not {engine!r}")
    if engine != "builtin":
        try:
            from pygments import highlight
            from pygments.formatters import HtmlFormatter
            from pygments.lexers import HLSLShaderLexer
        except ImportError:
            if engine == "pygments":
                raise
        else:
            return highlight(source, HLSLShaderLexer(), HtmlFormatter(noclasses=True, nobackground=True))
    return f'<div class="highlight"><pre style="{_PRE}">{_builtin_spans(source)}</pre></div>'


def _builtin_spans(source: str) -> str:
    out, pos = [], 0
    for m in _TOKEN.finditer(source):
        out.append(html.escape(source[pos:m.start()]))
        kind, text = m.lastgroup, m.group()
        if kind == "word":
            kind = "keyword" if text in _KEYWORDS else "type" if text in _TYPES else None
        out.append(f'<span style="{_STYLE[kind]}">{html.escape(text)}</span>' if kind else html.escape(text))
        pos = m.end()
    out.append(html.escape(source[pos:]))
    return "".join(out)
