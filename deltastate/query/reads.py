"""Interactive reads over a snapshot: get, top, rank, range, all, window and session fetches, SQL.

Every read returns a QueryResult: plain Python rows (dicts in column order) and the version of the
snapshot that served them. The CLI and the REST service call these same functions. Orderings are
total, so results are deterministic:
  * top and rank: the chosen column descending (NULLs last), then key ascending; rank(k) is k's
    1-based position in that ordering, i.e. its index in top(n=<all>) plus one;
  * range and all: the store key ascending (key, then window_start, window_end for windowed stores);
  * windows(key): window_start ascending (Kafka Streams WindowStore.fetch); windows(None): by
    (window_start, key) (fetchAll); sessions(key): session start ascending (findSessions).

A Queries object resolves the current snapshot for each read; `at(snapshot)` pins one snapshot
(the service leases one per request) and may overlay changelog rows newer than it (fresh reads).
`scoped(partitions)` narrows the reads to the rows of some source partitions: an instance of a query
tier answers its share of a scattered read that way (service/tier/), and the parts merge into the
answer over every partition.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from deltastate.changelog.layout import KEY, OP, OP_PUT, SOURCE_PARTITION, WINDOW_END, WINDOW_START, store_key_columns
from deltastate.changelog.rules import retained_column
from deltastate.config import Settings
from deltastate.errors import KeyNotFoundError, QueryError, SnapshotError, UnknownStoreError
from deltastate.query.errors import ParameterError, StoreTypeError
from deltastate.query.guard import check_read_only
from deltastate.query.reader import Snapshot, SnapshotReader
from deltastate.query.times import parse_time
from deltastate.snapshot.publish import quote
from deltastate.snapshot.read_index import StoreIndex
from deltastate.stores import list_stores, load_store
from deltastate.stores.backends import Read, backend_of
from deltastate.stores.current import FIRST_VERSION, current_version
from deltastate.stores.definition import StoreDefinition

if TYPE_CHECKING:
    from deltastate.query.fresh import Overlay

_STORE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
FRESH_OP = OP  # the overlay's column telling puts from tombstones


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
        raise ParameterError(name, f"must be a positive integer, got {value!r}")
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


class _Pinned:
    """A reader that always hands out one snapshot (Queries.at)."""

    def __init__(self, snap: Snapshot) -> None:
        self._snap = snap
        self.pinned = snap

    @contextmanager
    def snapshot(self) -> Iterator[Snapshot]:
        yield self._snap

    def close(self) -> None:  # the owner of the snapshot closes it
        pass


class Queries:
    """The reads. One instance may serve many threads."""

    def __init__(self, settings: Settings, reader: SnapshotReader | None = None,
                 definitions: dict[tuple[str, int | None], StoreDefinition] | None = None,
                 overlays: dict[str, Overlay] | None = None, partitions: frozenset[int] | None = None) -> None:
        self.settings = settings
        self.reader = reader or SnapshotReader(settings)
        # Parsing a store's YAML costs milliseconds; a service shares one cache across requests.
        self._definitions = definitions if definitions is not None else {}
        self._definitions_lock = threading.Lock()
        self._overlays = overlays or {}
        self.partitions = partitions  # None: every partition

    def at(self, snap: Snapshot, overlays: dict[str, Overlay] | None = None) -> Queries:
        """These reads pinned to one open snapshot; overlays: per store, changelog rows committed after
        it (the snapshot's columns plus `op`, latest per store key) that replace or delete its rows,
        and for window and session stores the retention horizon they move (query/fresh.py)."""
        return Queries(self.settings, _Pinned(snap), self._definitions, overlays,  # type: ignore[arg-type]
                       self.partitions)

    def scoped(self, partitions: frozenset[int] | None) -> Queries:
        """These reads over the rows of these source partitions only (None: all of them)."""
        return Queries(self.settings, self.reader, self._definitions, self._overlays, partitions)

    def close(self) -> None:
        self.reader.close()

    def __enter__(self) -> Queries:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- helpers -------------------------------------------------------------------------------
    def store(self, name: str) -> StoreDefinition:
        """The store's definition (UnknownStoreError for an undeclared store), cached: at the value
        schema version the pinned snapshot holds, else at the store's current version."""
        if not _STORE_NAME.match(name):  # never let a name walk out of schemas/stores/
            raise UnknownStoreError(name, list_stores(self.settings))
        pinned = getattr(self.reader, "pinned", None)
        info = None if pinned is None else pinned.store_info.get(name)
        if info is not None:
            version = info.value_version if info.value_version is not None else FIRST_VERSION
        else:
            version = current_version(self.settings, name)
        found = self._definitions.get((name, version))
        if found is None:
            found = load_store(self.settings, name, version)
            with self._definitions_lock:
                self._definitions[(name, version)] = found
        return found

    def _table(self, snap: Snapshot, store: StoreDefinition) -> str:
        """What to select from: the store's table, or with an overlay, the table with newer changelog
        rows merged in (a row of the overlay replaces the snapshot's row of the same store key, a
        tombstone removes it)."""
        if store.name not in snap.stores:
            raise SnapshotError(f"store {store.name!r} is not in snapshot {snap.version}; "
                                "run `deltastate snapshot publish` to include it")
        table = quote(store.name)
        overlay = self._overlays.get(store.name)
        if overlay is None or overlay.rows is None:
            return self._in_scope(table)
        name = quote(f"_fresh_{store.name}")
        snap.con.register(f"_fresh_{store.name}", overlay.rows)
        same = " AND ".join(f"f.{quote(c)} = s.{quote(c)}" for c in store_key_columns(store))
        merged = (f"(SELECT * FROM {table} s WHERE NOT EXISTS (SELECT 1 FROM {name} f WHERE {same}) "
                  f"UNION ALL BY NAME SELECT * EXCLUDE ({FRESH_OP}) FROM {name} WHERE {FRESH_OP} = '{OP_PUT}')")
        if not overlay.horizon:
            return self._in_scope(merged)
        # Entries past retention at the newer stream times have left the store (see query/fresh.py).
        cases = " ".join(f"WHEN {int(p)} THEN {int(h)}" for p, h in sorted(overlay.horizon.items()))
        edge = retained_column(backend_of(store).retention_spec(store))  # type: ignore[arg-type]
        return self._in_scope(f"(SELECT * FROM {merged} WHERE {quote(edge)} > "
                              f"coalesce(CASE source_partition {cases} END, {-2**63}))")

    def _in_scope(self, table: str) -> str:
        """The rows of `table` in the scope's source partitions (every row when not scoped)."""
        if self.partitions is None:
            return table
        listed = ", ".join(str(int(p)) for p in sorted(self.partitions)) or "NULL"
        return f"(SELECT * FROM {table} WHERE {quote(SOURCE_PARTITION)} IN ({listed}))"

    @staticmethod
    def _order_by(store: StoreDefinition, by: str | None) -> str:
        if not backend_of(store).answers("top"):
            raise StoreTypeError(store.name, store.type, "a leaderboard (top, rank)",
                                 "use windows/sessions, or sql for ad-hoc rankings")
        column = by if by is not None else store.leaderboard_default_by
        if column is None:
            raise ParameterError("by", f"required: store {store.name!r} declares no leaderboard.default_by")
        if column not in store.numeric_columns:
            raise ParameterError("by", f"{column!r} is not a numeric value column of store {store.name!r}; "
                                 f"choose one of: {', '.join(store.numeric_columns) or 'none'}")
        return column

    @staticmethod
    def _require(store: StoreDefinition, read: Read, what: str) -> None:
        """StoreTypeError naming `what` and the reads to use instead, unless the store answers `read`."""
        backend = backend_of(store)
        if not backend.answers(read):
            raise StoreTypeError(store.name, store.type, what, backend.read_hint)

    @staticmethod
    def _run(snap: Snapshot, sql: str, params: Sequence[Any] | None = None) -> QueryResult:
        import duckdb

        try:
            cursor = snap.con.execute(sql, list(params or []))
            columns = _unique([d[0] for d in cursor.description or []])
            rows = [dict(zip(columns, values, strict=True)) for values in cursor.fetchall()]
        except duckdb.Error as exc:
            raise _translate(exc) from exc
        return QueryResult(snap.version, columns, rows)

    @staticmethod
    def _after(store: StoreDefinition, after: Sequence[Any] | None) -> tuple[str, list[Any]]:
        """Keyset paging: rows strictly after `after` (a store key: (key,) or (key, start, end))."""
        if after is None:
            return "", []
        keys = store_key_columns(store)
        if len(after) != len(keys):
            raise ParameterError("cursor", f"expected {len(keys)} parts for store {store.name!r}, got {len(after)}")
        tuple_sql = f"({', '.join(quote(c) for c in keys)})" if len(keys) > 1 else quote(KEY)
        marks = f"({', '.join('?' for _ in keys)})" if len(keys) > 1 else "?"
        return f" AND {tuple_sql} > {marks}", list(after)

    def _index(self, snap: Snapshot, store: StoreDefinition) -> StoreIndex | None:
        """The snapshot's read index of the store, unless newer changelog rows overlay it."""
        if store.name not in snap.stores:
            raise SnapshotError(f"store {store.name!r} is not in snapshot {snap.version}; "
                                "run `deltastate snapshot publish` to include it")
        if store.name in self._overlays:
            return None
        index = snap.index(store.name)
        # An index laid out before partitions were: a scoped read filters in DuckDB instead.
        return None if index is None or (self.partitions is not None and not index.partitioned) else index

    # -- key-value reads -------------------------------------------------------------------------
    def get(self, store: str, key: str) -> QueryResult:
        """The key's current value row; KeyNotFoundError when the key is absent."""
        found = self.get_many(store, [key])
        if not found.rows:
            raise KeyNotFoundError(store, key)
        return found

    def get_many(self, store: str, keys: Sequence[str]) -> QueryResult:
        """The rows of the keys present, in the order asked (a key asked twice answers twice)."""
        definition = self.store(store)
        self._require(definition, "get", "get")
        with self.reader.snapshot() as snap:
            index = self._index(snap, definition)
            if index is not None:
                found = [i for i in index.find_many(list(keys), self.partitions) if i is not None]
                rows = [index.row(found[0])] if len(found) == 1 else index.rows_at(found)
                return QueryResult(snap.version, index.columns, rows)
            if not keys:
                return QueryResult(snap.version, [], [])
            marks = ", ".join("?" for _ in dict.fromkeys(keys))
            result = self._run(snap, f"SELECT * FROM {self._table(snap, definition)} WHERE \"key\" IN ({marks})",
                               list(dict.fromkeys(keys)))
        by_key = {row[KEY]: row for row in result.rows}
        return QueryResult(result.snapshot_version, result.columns, [by_key[k] for k in keys if k in by_key])

    def top(self, store: str, n: int = 10, by: str | None = None) -> QueryResult:
        """The n best keys by a numeric value column (default: the store's leaderboard column)."""
        definition = self.store(store)
        name = self._order_by(definition, by)
        n = _positive("n", n, optional=False)
        with self.reader.snapshot() as snap:
            index = self._index(snap, definition)
            if index is not None:
                return QueryResult(snap.version, index.columns, index.top(name, n, self.partitions))
            sql = (f"SELECT * FROM {self._table(snap, definition)} "
                   f"ORDER BY {quote(name)} DESC NULLS LAST, \"key\" ASC LIMIT ?")
            return self._run(snap, sql, [n])

    def rank(self, store: str, key: str, by: str | None = None) -> QueryResult:
        """One row {rank, key, <by>}: the key's 1-based position in the top ordering."""
        definition = self.store(store)
        name = self._order_by(definition, by)
        column = quote(name)
        with self.reader.snapshot() as snap:
            index = self._index(snap, definition)
            if index is not None:
                i = index.find(key, self.partitions)
                if i is None:
                    raise KeyNotFoundError(store, key)
                value = index.row(i)[name]
                rank = index.rank(name, i) if self.partitions is None else \
                    1 + index.count_above(name, value, key, self.partitions)
                row = {"rank": rank, KEY: key, name: value}
                return QueryResult(snap.version, list(row), [row])
            sql = (f"SELECT rank, \"key\", {column} FROM (SELECT \"key\", {column}, row_number() OVER "
                   f"(ORDER BY {column} DESC NULLS LAST, \"key\" ASC) AS rank FROM {self._table(snap, definition)}) "
                   "WHERE \"key\" = ?")
            result = self._run(snap, sql, [key])
        if not result.rows:
            raise KeyNotFoundError(store, key)
        return result

    def count_above(self, store: str, key: str, value: Any, by: str | None = None) -> int:
        """How many keys rank above a key whose `by` value is `value` in the top ordering (the key
        need not be in the store, nor in the scope): what a scattered rank adds up per partition."""
        definition = self.store(store)
        column = quote(self._order_by(definition, by))
        if value is None:  # NULLs rank last: every non-NULL value is above, then NULLs by key
            where, params = f"{column} IS NOT NULL OR ({column} IS NULL AND \"key\" < ?)", [key]
        else:
            where, params = f"{column} > ? OR ({column} = ? AND \"key\" < ?)", [value, value, key]
        with self.reader.snapshot() as snap:
            index = self._index(snap, definition)
            if index is not None:
                return index.count_above(self._order_by(definition, by), value, key, self.partitions)
            sql = f"SELECT count(*) AS above FROM {self._table(snap, definition)} WHERE {where}"
            return int(self._run(snap, sql, params).row["above"])

    def range(self, store: str, from_key: str | None, to_key: str | None, limit: int | None = None,
              after: Sequence[Any] | None = None) -> QueryResult:
        """Keys in [from_key, to_key] (inclusive, byte order; None: open), ascending by store key;
        `after` resumes a page strictly after that store key."""
        definition = self.store(store)
        limit = _positive("limit", limit)
        rest, params = self._after(definition, after)
        bounds = [(">=", from_key), ("<=", to_key)]
        where = "".join(f" AND \"key\" {op} ?" for op, v in bounds if v is not None)
        order = ", ".join(quote(c) for c in store_key_columns(definition))
        with self.reader.snapshot() as snap:
            sql = f"SELECT * FROM {self._table(snap, definition)} WHERE TRUE{where}{rest} ORDER BY {order}"
            values = [v for _, v in bounds if v is not None]
            return self._run(snap, *self._limited(sql, [*values, *params], limit))

    def all(self, store: str, limit: int | None = None, after: Sequence[Any] | None = None) -> QueryResult:
        """Every entry of the store (or the first `limit`), ascending by store key."""
        definition = self.store(store)
        limit = _positive("limit", limit)
        rest, params = self._after(definition, after)
        order = ", ".join(quote(c) for c in store_key_columns(definition))
        with self.reader.snapshot() as snap:
            sql = f"SELECT * FROM {self._table(snap, definition)} WHERE TRUE{rest} ORDER BY {order}"
            return self._run(snap, *self._limited(sql, params, limit))

    @staticmethod
    def _limited(sql: str, params: list[Any], limit: int | None) -> tuple[str, list[Any]]:
        return (sql, params) if limit is None else (sql + " LIMIT ?", [*params, limit])

    # -- window and session reads ----------------------------------------------------------------
    def windows(self, store: str, key: str | None = None, time_from: str | int | None = None,
                time_to: str | int | None = None, limit: int | None = None) -> QueryResult:
        """WindowStore.fetch(key, from, to): the key's windows whose start lies in [from, to], by start;
        key=None is fetchAll(from, to): every key's windows in range, by (start, key). Open bounds
        when from/to are None. Times: epoch millis or ISO-8601 (UTC when no zone)."""
        definition = self.store(store)
        self._require(definition, "windows", "a window fetch")
        bounds = [(WINDOW_START, ">=", parse_time(time_from, "from")), (WINDOW_START, "<=", parse_time(time_to, "to"))]
        order = (WINDOW_START, KEY, WINDOW_END)
        return self._windowed(definition, key, bounds, order, _positive("limit", limit))

    def sessions(self, store: str, key: str, earliest_end: str | int | None = None,
                 latest_start: str | int | None = None) -> QueryResult:
        """SessionStore.findSessions(key, earliestSessionEndTime, latestSessionStartTime): the key's
        sessions with end >= earliest_end and start <= latest_start, by start."""
        definition = self.store(store)
        self._require(definition, "sessions", "a session fetch")
        bounds = [(WINDOW_END, ">=", parse_time(earliest_end, "earliest_end")),
                  (WINDOW_START, "<=", parse_time(latest_start, "latest_start"))]
        return self._windowed(definition, key, bounds, (WINDOW_START, WINDOW_END), None)

    def _windowed(self, definition: StoreDefinition, key: str | None, bounds: list[tuple[str, str, int | None]],
                  order: tuple[str, ...], limit: int | None) -> QueryResult:
        """Rows of one key (or all keys) whose window bounds pass every (column, op, value) with a value."""
        where, params = ["TRUE"], []
        if key is not None:
            where.append("\"key\" = ?")
            params.append(key)
        for column, op, value in bounds:
            if value is not None:
                where.append(f"{quote(column)} {op} ?")
                params.append(value)
        with self.reader.snapshot() as snap:
            sql = (f"SELECT * FROM {self._table(snap, definition)} WHERE {' AND '.join(where)} "
                   f"ORDER BY {', '.join(quote(c) for c in order)}")
            return self._run(snap, *self._limited(sql, params, limit))

    # -- SQL -----------------------------------------------------------------------------------------
    def sql(self, query: str, max_rows: int | None = None) -> QueryResult:
        """One read-only statement over the snapshot (tables: the stores, _snapshot, _snapshot_stores).
        max_rows: refuse (SqlLimitError) rather than truncate an answer with more rows."""
        from deltastate.query.errors import SqlLimitError

        statement = check_read_only(query)
        with self.reader.snapshot() as snap:
            if max_rows is None:
                return self._run(snap, statement)
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


__all__ = ["Queries", "QueryResult"]
