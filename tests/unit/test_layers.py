"""The layers of docs/architecture.md, read from the source: which package may import which
(runtime imports, module level or inside functions; ``if TYPE_CHECKING:`` ones do not
count), and no import cycle between modules."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "daemon" / "edgevlm"

# package -> the packages it must never import (issue 23)
FORBIDDEN = {
    "wire": ("pipeline", "verbs", "frontdoors", "sources", "integrations", "service",
             "camera_flow"),
    "pipeline": ("verbs", "frontdoors", "sources", "integrations", "service", "camera_flow"),
    "verbs": ("frontdoors", "sources", "integrations", "service", "camera_flow"),
    "vision": ("pipeline", "verbs", "frontdoors", "sources", "integrations", "service",
               "engine"),
    "engine": ("pipeline", "verbs", "frontdoors", "sources", "integrations", "service",
               "camera_flow"),
    # the door to the C core: below everything but wire.errors
    "core": ("engine", "vision", "pipeline", "verbs", "frontdoors", "sources", "integrations",
             "service", "camera_flow"),
    # the camera sources arrive over MQTT and use its topic map (frontdoors/mqtt/topics.py)
    "sources": ("integrations", "service", "camera_flow"),
    "integrations": ("frontdoors", "service", "camera_flow"),
}


def _module(path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    is_init = parts[-1] == "__init__"
    return ".".join(parts[:-1] if is_init else parts), is_init


def _runtime_imports(tree: ast.AST) -> list[ast.ImportFrom | ast.Import]:
    found: list[ast.ImportFrom | ast.Import] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for other in child.orelse:
                    visit(other)
                continue
            if isinstance(child, ast.Import | ast.ImportFrom):
                found.append(child)
            visit(child)

    visit(tree)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = {_module(p)[0]: p for p in PKG.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_init = path.name == "__init__.py"
        for node in _runtime_imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                if node.level:
                    base = name.split(".") if is_init else name.split(".")[:-1]
                    base = base[:len(base) - (node.level - 1)]
                    target = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    target = node.module or ""
                # `from pkg import submodule` imports the submodule (and the package)
                targets = [target, *(f"{target}.{a.name}" for a in node.names)]
            graph[name] |= {t for t in targets if t in modules and t != name
                            and not name.startswith(t + ".")}  # a package's own __init__
    return graph


def _layer(module: str) -> str:
    return module.split(".")[1] if "." in module else module


def test_no_package_imports_a_layer_above_it() -> None:
    graph = import_graph()
    wrong = sorted((m, t) for m, targets in graph.items() for t in targets
                   if _layer(t) in FORBIDDEN.get(_layer(m), ()))
    assert not wrong, "imports against docs/architecture.md's layers:\n" + "\n".join(
        f"  {m} -> {t}" for m, t in wrong)


def test_the_verbs_are_all_registered() -> None:
    from edgevlm.verbs import REGISTRY

    modules = {p.stem for p in (PKG / "verbs").glob("*.py")} - {"__init__", "base"}
    assert modules == set(REGISTRY), "a verbs/ module without its registry row (or back)"


def test_the_engine_imports_nothing_of_the_pipeline_or_the_front_doors() -> None:
    graph = import_graph()
    wrong = sorted((m, t) for m, targets in graph.items() if _layer(m) == "engine"
                   for t in targets if _layer(t) in ("pipeline", "verbs", "frontdoors",
                                                     "sources", "integrations"))
    assert not wrong, wrong


def test_no_import_cycles() -> None:
    graph = import_graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def connect(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    assert not cycles, cycles
