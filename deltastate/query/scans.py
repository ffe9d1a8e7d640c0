"""The reads that scan a store in order: range and all over key-value stores, window fetches and
session finds over window and session stores.

DuckDB answers them all from the rows a ReadSource selects (the snapshot's table with any fresh
overlay merged in, narrowed to the scope's partitions). Orderings are total, so results are
deterministic and a page can resume where the last one stopped:
  * range and all: the store key ascending (key, then window_start, window_end for windowed stores);
    `after` resumes strictly after a store key (keyset paging);
  * windows(key): window_start ascending (Kafka Streams WindowStore.fetch); windows(None): by
    (window_start, key) (fetchAll); sessions(key): session start ascending (findSessions).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from deltastate.changelog.layout import KEY, WINDOW_END, WINDOW_START, store_key_columns
from deltastate.query.errors import ParameterError
from deltastate.query.result import QueryResult, run
from deltastate.query.source import ReadSource, positive
from deltastate.query.times import parse_time
from deltastate.snapshot.publish import quote
from deltastate.stores.definition import StoreDefinition


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


def _limited(sql: str, params: list[Any], limit: int | None) -> tuple[str, list[Any]]:
    return (sql, params) if limit is None else (sql + " LIMIT ?", [*params, limit])


class ScanReads(ReadSource):
    """range, all, windows and sessions."""

    # -- key-range reads -------------------------------------------------------------------------
    def range(self, store: str, from_key: str | None, to_key: str | None, limit: int | None = None,
              after: Sequence[Any] | None = None) -> QueryResult:
        """Keys in [from_key, to_key] (inclusive, byte order; None: open), ascending by store key;
        `after` resumes a page strictly after that store key."""
        definition = self.store(store)
        limit = positive("limit", limit)
        rest, params = _after(definition, after)
        bounds = [(">=", from_key), ("<=", to_key)]
        where = "".join(f" AND \"key\" {op} ?" for op, v in bounds if v is not None)
        order = ", ".join(quote(c) for c in store_key_columns(definition))
        with self.reader.snapshot() as snap:
            sql = f"SELECT * FROM {self._table(snap, definition)} WHERE TRUE{where}{rest} ORDER BY {order}"
            values = [v for _, v in bounds if v is not None]
            return run(snap, *_limited(sql, [*values, *params], limit))

    def all(self, store: str, limit: int | None = None, after: Sequence[Any] | None = None) -> QueryResult:
        """Every entry of the store (or the first `limit`), ascending by store key."""
        definition = self.store(store)
        limit = positive("limit", limit)
        rest, params = _after(definition, after)
        order = ", ".join(quote(c) for c in store_key_columns(definition))
        with self.reader.snapshot() as snap:
            sql = f"SELECT * FROM {self._table(snap, definition)} WHERE TRUE{rest} ORDER BY {order}"
            return run(snap, *_limited(sql, params, limit))

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
        return self._windowed(definition, key, bounds, order, positive("limit", limit))

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
            table = self._table(snap, definition, None if key is None else [key])
            sql = (f"SELECT * FROM {table} WHERE {' AND '.join(where)} "
                   f"ORDER BY {', '.join(quote(c) for c in order)}")
            return run(snap, *_limited(sql, params, limit))


__all__ = ["ScanReads"]
