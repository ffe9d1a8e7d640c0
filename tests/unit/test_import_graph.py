"""The package's import graph: no cycles between modules or between packages (engine's common,
keyvalue and windowed count as packages), and no private name imported across modules. Every import
statement counts, those inside functions too."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "deltastate"


def modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def resolve(name: str, known: dict[str, Path]) -> str | None:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports(known: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the deltastate modules it imports (a package's __init__ re-exporting its own
    submodules does not count as the package depending on them)."""
    edges: dict[str, set[str]] = {m: set() for m in known}
    for module, path in known.items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("deltastate"):
                targets = [resolve(f"{node.module}.{a.name}", known) or resolve(node.module, known) for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [resolve(a.name, known) for a in node.names if a.name.startswith("deltastate")]
            for target in targets:
                own_submodule = path.name == "__init__.py" and target is not None and target.startswith(module + ".")
                if target and target != module and not own_submodule:
                    edges[module].add(target)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on.add(node)
        for nxt in edges.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in list(edges):
        if node not in index:
            visit(node)
    return found


def package(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:3]) if parts[1:2] == ["engine"] and len(parts) > 3 else ".".join(parts[:2])


def test_no_import_cycle_between_modules():
    assert cycles(imports(modules())) == []


def test_no_import_cycle_between_packages():
    edges: dict[str, set[str]] = {}
    for module, targets in imports(modules()).items():
        for target in targets:
            if package(module) != package(target):
                edges.setdefault(package(module), set()).add(package(target))
    assert cycles(edges) == []


def test_no_private_name_is_imported_across_modules():
    private = []
    for module, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("deltastate"):
                private += [f"{module} <- {node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
    assert private == []


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
