"""lowering/'s modules import one another one way (issue 30): a pass imports
the plan's records (``plan_types``), the rewrites and the index analysis, and
only the pipeline (``plan``) imports the passes.  An import cycle papered over
with an import inside a function hid that ten modules depended on each other."""
import ast
from pathlib import Path

import networkx as nx

import symdiff.lowering

LOWERING = Path(symdiff.lowering.__file__).parent


def sibling_imports() -> list[tuple[str, str, bool]]:
    """``(module, imported sibling, at module level)`` for every relative import in lowering/."""
    found = []
    for path in sorted(LOWERING.glob("*.py")):
        tree = ast.parse(path.read_text())
        top = {id(node) for node in tree.body}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                names = [node.module] if node.module else [a.name for a in node.names]
                found += [(path.stem, n.split(".")[0], id(node) in top) for n in names]
    return found


def test_the_scan_sees_the_pipeline_imports():
    """Not vacuous: the pipeline's imports of its passes are found."""
    edges = {(m, s) for m, s, _ in sibling_imports()}
    assert {("plan", "rematerialise"), ("plan", "rowfusion"), ("plan", "plan_types")} <= edges


def test_no_import_cycle():
    graph = nx.DiGraph((m, s) for m, s, _ in sibling_imports())
    assert list(nx.simple_cycles(graph)) == []


def test_no_sibling_import_inside_a_function():
    assert [(m, s) for m, s, top in sibling_imports() if not top] == []
