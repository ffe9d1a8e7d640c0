"""The changelog's bookkeeping columns and the intake table's audit columns are named in
deltastate/changelog/ alone (layout.py names them, intake.py reads the audit): no module outside
that package spells one as a bare string literal; it imports the name from changelog.layout.

A literal counts when it equals a column name exactly and is not a docstring. The exceptions below
are words that happen to equal a column name but are something else (a CLI or REST field, a metric
label, a key of another file's format), each with its reason; an exception that no longer occurs
fails the test too, so the list stays exact.
"""

from __future__ import annotations

import ast
from pathlib import Path

from deltastate.changelog.layout import BOOKKEEPING_COLUMNS, INTAKE_COLUMNS

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "deltastate"
OWNER = PACKAGE / "changelog"
NAMES = {name for name, _ in (*BOOKKEEPING_COLUMNS, *INTAKE_COLUMNS)}

EXCEPTIONS: dict[tuple[str, str], str] = {
    ("bench/peers.py", "records_in"): "a field of `deltastate run --json`'s output, which the bench parses",
    ("bench/peers.py", "applied"): "a field of the run's and the Kafka Streams peer's JSON output, which the bench parses",
    ("cli/run_cmd.py", "records_in"): "a field of `deltastate run --json`'s output",
    ("cli/run_cmd.py", "applied"): "a field of `deltastate run --json`'s output",
    ("cli/run_cmd.py", "dead_lettered"): "a field of `deltastate run --json`'s output",
    ("cli/run_cmd.py", "epoch"): "a field of `deltastate run --json`'s output",
    ("cli/run_cmd.py", "late"): "a field of `deltastate run --json`'s output",
    ("bench/peers.py", "late"): "a field of `deltastate run --json`'s output, which the bench parses",
    ("bench/warm_run.py", "records_in"): "a field of its JSON line, the one `deltastate run --json` prints",
    ("bench/warm_run.py", "applied"): "a field of its JSON line, the one `deltastate run --json` prints",
    ("bench/warm_run.py", "dead_lettered"): "a field of its JSON line, the one `deltastate run --json` prints",
    ("bench/warm_run.py", "late"): "a field of its JSON line, the one `deltastate run --json` prints",
    ("engine/common/lineage.py", "lineage_id"): "a key of the checkpoint's lineage.json",
    ("engine/common/lineage.py", "epoch"): "a key of the checkpoint's lineage.json",
    ("infra/offset_log.py", "offsets"): "the folder of Spark's checkpoint offset log",
    ("maintenance/inspect.py", "lineage_id"): "a field of `deltastate inspect`'s checkpoint report",
    ("maintenance/inspect.py", "epoch"): "a field of `deltastate inspect`'s checkpoint report",
    ("metrics/names.py", "op"): "a Prometheus label name",
    ("migration/steps.py", "records_in"): "a field of `deltastate migrate start`'s report",
    ("service/routes.py", "source_partition"): "a field of the REST service's key-location answer",
    ("snapshot/catalog.py", "stream_times"): "a column of the DuckDB snapshot's catalog of stores",
    ("snapshot/catalog.py", "value_version"): "a column of the DuckDB snapshot's catalog of stores",
    ("stores/compat.py", "value_version"): "a key of the definition fingerprint a changelog records as a table property",
}


def _docstrings(tree: ast.Module) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def column_literals() -> dict[tuple[str, str], list[int]]:
    """(module path under deltastate/, column name) -> lines where the name is a bare literal."""
    found: dict[tuple[str, str], list[int]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if OWNER in path.parents:
            continue
        tree = ast.parse(path.read_text())
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in NAMES
                    and id(node) not in docs):
                found.setdefault((path.relative_to(PACKAGE).as_posix(), node.value), []).append(node.lineno)
    return found


def test_column_names_are_literals_only_in_changelog() -> None:
    unexplained = {f"deltastate/{module}:{min(lines)} {name!r}" for (module, name), lines in column_literals().items()
                   if (module, name) not in EXCEPTIONS}
    assert not unexplained, ("column names spelled outside deltastate/changelog/; import them from "
                             f"changelog.layout (or read the audit through changelog.intake): {sorted(unexplained)}")


def test_every_exception_still_occurs() -> None:
    stale = set(EXCEPTIONS) - set(column_literals())
    assert not stale, f"exceptions that no longer occur; remove them: {sorted(stale)}"


def test_the_walk_sees_a_literal() -> None:
    tree = ast.parse('"""doc: batch_id"""\nx = row["batch_id"]\n')
    literals = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and id(n) not in _docstrings(tree)]
    assert literals == ["batch_id"]
