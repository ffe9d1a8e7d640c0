"""Only the store backends know a store's kind: no module outside deltastate/stores/ and the backends
branches on it. Code that needs a kind-dependent fact asks backend_of(store) for it
(deltastate/stores/backends), so a new kind of store is one new backend, not a branch in every caller.

A branch is the test of an if / elif / while / ternary / match case / comprehension filter that
mentions the kind: is_windowed, max_entries, changelog.enabled and the like, a kind name
('key_value', 'window', 'session', ...) in a comparison, or a `.type` / `.store_type` / `.kind`
compared with an upper-case constant (StoreType.WINDOW). Allowed to know the kind: anything under
deltastate/stores/, any module or folder whose name contains 'backend', and any module defining a
class named *Backend.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "deltastate"

KIND_WORDS = {"key_value", "keyvalue", "window", "session", "windowed"}
KIND_ATTRS = {"is_windowed", "max_entries", "changelog_enabled", "is_lru", "is_unlogged", "is_session", "is_window"}
TYPE_ATTRS = {"type", "store_type", "kind"}
KIND_ENUMS = {"StoreType", "StoreKind"}


def _is_kind_word(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in KIND_WORDS


def _compares_kind(node: ast.Compare) -> bool:
    parts = [node.left, *node.comparators]
    if any(_is_kind_word(p) for p in parts):
        return True
    if any(isinstance(p, (ast.Tuple, ast.Set, ast.List)) and any(_is_kind_word(e) for e in p.elts) for p in parts):
        return True
    attrs = [p for p in parts if isinstance(p, ast.Attribute)]
    if any(a.attr in TYPE_ATTRS for a in attrs) and any(a.attr.isupper() for a in attrs):
        return True
    return any(isinstance(a.value, ast.Name) and a.value.id in KIND_ENUMS for a in attrs)


def mentions_kind(test: ast.AST) -> bool:
    for n in ast.walk(test):
        if isinstance(n, ast.Attribute) and n.attr in KIND_ATTRS:
            return True
        if isinstance(n, ast.Name) and n.id in KIND_ATTRS:
            return True
        if (isinstance(n, ast.Attribute) and n.attr == "enabled" and isinstance(n.value, ast.Attribute)
                and n.value.attr == "changelog"):
            return True
        if isinstance(n, ast.Compare) and _compares_kind(n):
            return True
    return False


def branches(tree: ast.AST) -> list[int]:
    """Line numbers of the tests in `tree` that branch on a store's kind."""
    lines = []
    for n in ast.walk(tree):
        if isinstance(n, (ast.If, ast.IfExp, ast.While)):
            tests = [n.test]
        elif isinstance(n, ast.match_case):
            tests = [n.pattern]
        elif isinstance(n, ast.comprehension):
            tests = list(n.ifs)
        else:
            continue
        lines += [t.lineno for t in tests if mentions_kind(t)]
    return sorted(lines)


def may_know_kind(relative: Path, tree: ast.Module) -> bool:
    parts = relative.parts
    if parts[1] == "stores" or any("backend" in p for p in parts):
        return True
    return any(isinstance(c, ast.ClassDef) and c.name.endswith("Backend") for c in tree.body)


def kind_branches() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(ROOT)
        tree = ast.parse(path.read_text(), str(relative))
        if not may_know_kind(relative, tree):
            found += [f"{relative}:{line}" for line in branches(tree)]
    return found


def test_no_module_outside_the_backends_branches_on_a_store_kind():
    assert kind_branches() == []


def test_the_branch_finder_finds_each_form():
    source = """
if store.type == "window": pass
x = a if is_windowed(store) else b
while store.max_entries is not None: pass
y = [s for s in stores if not s.changelog.enabled]
if kind in ("key_value", "session"): pass
if store.type is StoreType.WINDOW: pass
if backend.spark_state: pass
if statement_type == duckdb.StatementType.SELECT: pass
"""
    assert branches(ast.parse(source)) == [2, 3, 4, 5, 6, 7]


def test_the_stores_package_and_backend_modules_may_know_the_kind():
    plain = ast.parse("x = 1")
    assert may_know_kind(Path("deltastate/stores/loader.py"), plain)
    assert may_know_kind(Path("deltastate/stores/backends/lru.py"), plain)
    assert may_know_kind(Path("deltastate/engine/backend_start.py"), plain)
    assert may_know_kind(Path("deltastate/engine/x.py"), ast.parse("class WindowBackend: pass"))
    assert not may_know_kind(Path("deltastate/query/reads.py"), plain)
