"""Interactive reads over the current snapshot: get, top, rank, range, all and read-only SQL.

Every read returns a QueryResult: plain Python rows (dicts in column order) and the version of the
snapshot that served them. Orderings are total, so results are deterministic: top and rank order by
the chosen column descending (NULLs last), then key ascending; rank(k) is k's 1-based position in
that ordering, i.e. its index in top(n=<all>) plus one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from deltastate.config import Settings
from deltastate.errors import KeyNotFoundError, QueryError, SnapshotError
from deltastate.query.guard import check_read_only
from deltastate.query.reader import Snapshot, SnapshotReader
from deltastate.snapshot.publish import quote
from deltastate.stores import load_store
from deltastate.stores.definition import StoreDefinition


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


def _positive(name: str, value: int | None, optional: bool = True) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise QueryError(f"parameter {name!r} must be a positive integer, got {value!r}")
    return value


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


class Queries:
    """The reads. One instance may serve many threads."""

    def __init__(self, settings: Settings, reader: SnapshotReader | None = None) -> None:
        self.settings = settings
        self.reader = reader or SnapshotReader(settings)

    def close(self) -> None:
        self.reader.close()

    def __enter__(self) -> Queries:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- helpers -------------------------------------------------------------------------------
    def _store(self, name: str) -> StoreDefinition:
        return load_store(self.settings, name)  # UnknownStoreError for an undeclared store

    @staticmethod
    def _table(snap: Snapshot, store: StoreDefinition) -> str:
        if store.name not in snap.stores:
            raise SnapshotError(f"store {store.name!r} is not in snapshot {snap.version}; "
                                "run `deltastate snapshot publish` to include it")
        return quote(store.name)

    @staticmethod
    def _order_by(store: StoreDefinition, by: str | None) -> str:
        column = by if by is not None else store.leaderboard_default_by
        if column is None:
            raise QueryError(f"parameter 'by' is required: store {store.name!r} declares no leaderboard.default_by")
        if column not in store.numeric_columns:
            raise QueryError(f"parameter 'by': {column!r} is not a numeric value column of store {store.name!r}; "
                             f"choose one of: {', '.join(store.numeric_columns) or 'none'}")
        return column

    @staticmethod
    def _run(snap: Snapshot, sql: str, params: list[Any] | None = None) -> QueryResult:
        import duckdb

        try:
            cursor = snap.con.execute(sql, params or [])
            columns = _unique([d[0] for d in cursor.description or []])
            rows = [dict(zip(columns, values, strict=True)) for values in cursor.fetchall()]
        except duckdb.Error as exc:
            raise _translate(exc) from exc
        return QueryResult(snap.version, columns, rows)

    # -- reads ---------------------------------------------------------------------------------
    def get(self, store: str, key: str) -> QueryResult:
        """The key's current value row; KeyNotFoundError when the key is absent."""
        definition = self._store(store)
        with self.reader.snapshot() as snap:
            result = self._run(snap, f"SELECT * FROM {self._table(snap, definition)} WHERE \"key\" = ?", [key])
        if not result.rows:
            raise KeyNotFoundError(store, key)
        return result

    def top(self, store: str, n: int = 10, by: str | None = None) -> QueryResult:
        """The n best keys by a numeric value column (default: the store's leaderboard column)."""
        definition = self._store(store)
        column = quote(self._order_by(definition, by))
        n = _positive("n", n, optional=False)
        with self.reader.snapshot() as snap:
            sql = (f"SELECT * FROM {self._table(snap, definition)} "
                   f"ORDER BY {column} DESC NULLS LAST, \"key\" ASC LIMIT ?")
            return self._run(snap, sql, [n])

    def rank(self, store: str, key: str, by: str | None = None) -> QueryResult:
        """One row {rank, key, <by>}: the key's 1-based position in the top ordering."""
        definition = self._store(store)
        name = self._order_by(definition, by)
        column = quote(name)
        with self.reader.snapshot() as snap:
            sql = (f"SELECT rank, \"key\", {column} FROM (SELECT \"key\", {column}, row_number() OVER "
                   f"(ORDER BY {column} DESC NULLS LAST, \"key\" ASC) AS rank FROM {self._table(snap, definition)}) "
                   "WHERE \"key\" = ?")
            result = self._run(snap, sql, [key])
        if not result.rows:
            raise KeyNotFoundError(store, key)
        return result

    def range(self, store: str, from_key: str, to_key: str, limit: int | None = None) -> QueryResult:
        """Keys in [from_key, to_key] (inclusive, byte order), ascending."""
        definition = self._store(store)
        limit = _positive("limit", limit)
        with self.reader.snapshot() as snap:
            sql = f"SELECT * FROM {self._table(snap, definition)} WHERE \"key\" >= ? AND \"key\" <= ? ORDER BY \"key\""
            params: list[Any] = [from_key, to_key]
            if limit is not None:
                sql, params = sql + " LIMIT ?", params + [limit]
            return self._run(snap, sql, params)

    def all(self, store: str, limit: int | None = None) -> QueryResult:
        """Every key of the store (or the first `limit`), ascending."""
        definition = self._store(store)
        limit = _positive("limit", limit)
        with self.reader.snapshot() as snap:
            sql = f"SELECT * FROM {self._table(snap, definition)} ORDER BY \"key\""
            if limit is not None:
                return self._run(snap, sql + " LIMIT ?", [limit])
            return self._run(snap, sql)

    def sql(self, query: str) -> QueryResult:
        """One read-only statement over the snapshot (tables: the stores, _snapshot, _snapshot_stores)."""
        statement = check_read_only(query)
        with self.reader.snapshot() as snap:
            return self._run(snap, statement)


__all__ = ["Queries", "QueryResult"]
