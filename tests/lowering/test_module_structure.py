"""lowering/'s modules import one another one way (issue 30): a pass imports
the plan's records (``plan_types``), the rewrites and the index analysis, and
only the pipeline (``plan``) imports the passes.  An import cycle papered over
with an import inside a function hid that ten modules depended on each other."""
import ast
from pathlib import Path

import networkx as nx

import symdiff.lowering

LOWERING = Path(symdiff.lowering.__file__).parent


def module_name(path: Path) -> str:
    """A module's dotted name within lowering/ (``kernels.writer``; a package: its own)."""
    parts = path.relative_to(LOWERING).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def sibling_imports() -> list[tuple[str, str, bool]]:
    """``(module, imported module, at module level)`` for every relative import
    in lowering/ and its packages, modules named as ``module_name``; at module
    level: outside every function (a module-level ``if`` may choose how it imports)."""
    paths = sorted(LOWERING.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    found = []
    for path in paths:
        tree = ast.parse(path.read_text())
        inside = {id(node) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                  for node in ast.walk(f)}
        package = path.relative_to(LOWERING).parts[:-1]
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = ".".join(package[:len(package) - node.level + 1])
                within = ".".join(p for p in (base, node.module) if p)
                for alias in node.names:  # ``from .kernels import registry``: the module, else the one named
                    name = f"{within}.{alias.name}" if within else alias.name
                    found.append((module_name(path), name if name in modules else within, id(node) not in inside))
    return found


def test_the_scan_sees_the_pipeline_imports():
    """Not vacuous: the pipeline's imports of its passes are found."""
    edges = {(m, s) for m, s, _ in sibling_imports()}
    assert {("plan", "rematerialise"), ("plan", "rowfusion"), ("plan", "plan_types")} <= edges
    # and the kernel forms' package: the generator, the registry and the forms' shared writer
    assert {("codegen", "kernels.registry"), ("kernels.registry", "kernels.writer"),
            ("kernels.rows", "rowfusion"), ("kernels.cpu_matmul", "kernels.register_tiles")} <= edges


def test_no_import_cycle():
    graph = nx.DiGraph((m, s) for m, s, _ in sibling_imports())
    assert list(nx.simple_cycles(graph)) == []


def test_no_sibling_import_inside_a_function():
    assert [(m, s) for m, s, top in sibling_imports() if not top] == []
