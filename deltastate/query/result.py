"""What every read answers, and how a statement on a snapshot becomes that answer.

A QueryResult holds plain Python rows (dicts in column order) and the version of the snapshot that
served them, so the CLI, the REST service and the query tier shape one kind of value. Running a
statement here is the one place DuckDB's errors turn into QueryError (a write refused by the
read-only connection says so), and the one place result columns are made unique, so that no value is
lost when a row becomes a dict.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from deltastate.errors import QueryError
from deltastate.query.errors import SqlLimitError

if TYPE_CHECKING:
    from deltastate.query.reader import Snapshot


@dataclass(frozen=True)
class QueryResult:
    snapshot_version: int
    columns: list[str]
    rows: list[dict[str, Any]]

    @property
    def row(self) -> dict[str, Any]:
        """The single row of a get or rank."""
        if len(self.rows) != 1:
            raise QueryError(f"expected one row, got {len(self.rows)}")
        return self.rows[0]

    def __len__(self) -> int:
        return len(self.rows)


def _unique(names: list[str]) -> list[str]:
    """Column names made unique (a, a_2, ...) so no value is lost when rows become dicts."""
    seen: dict[str, int] = {}
    out = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name}_{seen[name]}")
    return out


def _translate(exc: Exception) -> QueryError:
    import duckdb

    message = str(exc).strip()
    if isinstance(exc, duckdb.PermissionException) or "read-only mode" in message or "locked" in message:
        return QueryError(f"read-only: {message}")
    return QueryError(f"query failed: {message}")


def run(snap: Snapshot, sql: str, params: Sequence[Any] | None = None) -> QueryResult:
    """Every row the statement returns on the snapshot."""
    import duckdb

    try:
        cursor = snap.con.execute(sql, list(params or []))
        columns = _unique([d[0] for d in cursor.description or []])
        rows = [dict(zip(columns, values, strict=True)) for values in cursor.fetchall()]
    except duckdb.Error as exc:
        raise _translate(exc) from exc
    return QueryResult(snap.version, columns, rows)


def run_at_most(snap: Snapshot, statement: str, max_rows: int) -> QueryResult:
    """The statement's rows on the snapshot; SqlLimitError rather than a truncated answer when it
    returns more than max_rows (it fetches one row past the limit, never the whole answer)."""
    import duckdb

    try:
        cursor = snap.con.execute(statement)
        columns = _unique([d[0] for d in cursor.description or []])
        fetched = cursor.fetchmany(max_rows + 1)
    except duckdb.Error as exc:
        raise _translate(exc) from exc
    if len(fetched) > max_rows:
        raise SqlLimitError(f"the statement returns more than {max_rows} rows (the row limit); "
                            "add a LIMIT or aggregate")
    return QueryResult(snap.version, columns, [dict(zip(columns, v, strict=True)) for v in fetched])


__all__ = ["QueryResult", "run", "run_at_most"]
