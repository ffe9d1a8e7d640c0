"""The reads the snapshot's read index answers: key lookups (get, batch get) and the leaderboard
(top, rank, and the count above a value that a scattered rank adds up per partition).

Each read asks the read index first: a binary search in key order, or a precomputed top ordering of
a numeric column, with no SQL at all. DuckDB answers the same read, with the same rows in the same
order, where the index cannot: the store has changelog rows newer than the snapshot (a fresh read),
the snapshot has no index for it, or the read is scoped to some partitions and the index predates
the partitioned layout. The top ordering is total, so answers are deterministic: the chosen column
descending (NULLs last), then key ascending; rank(k) is k's 1-based position in it, i.e. its index in
top(n=<all>) plus one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from deltastate.changelog.layout import KEY
from deltastate.errors import KeyNotFoundError
from deltastate.query.errors import ParameterError, StoreTypeError
from deltastate.query.result import QueryResult, run
from deltastate.query.source import ReadSource, positive
from deltastate.snapshot.publish import quote
from deltastate.stores.backends import backend_of
from deltastate.stores.definition import StoreDefinition


class IndexedReads(ReadSource):
    """get, get_many, top, rank and count_above."""

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
            result = run(snap, f"SELECT * FROM {self._table(snap, definition, keys)} WHERE \"key\" IN ({marks})",
                         list(dict.fromkeys(keys)))
        by_key = {row[KEY]: row for row in result.rows}
        return QueryResult(result.snapshot_version, result.columns, [by_key[k] for k in keys if k in by_key])

    # -- leaderboard reads -----------------------------------------------------------------------
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

    def top(self, store: str, n: int = 10, by: str | None = None) -> QueryResult:
        """The n best keys by a numeric value column (default: the store's leaderboard column)."""
        definition = self.store(store)
        name = self._order_by(definition, by)
        n = positive("n", n, optional=False)
        with self.reader.snapshot() as snap:
            index = self._index(snap, definition)
            if index is not None:
                return QueryResult(snap.version, index.columns, index.top(name, n, self.partitions))
            sql = (f"SELECT * FROM {self._table(snap, definition)} "
                   f"ORDER BY {quote(name)} DESC NULLS LAST, \"key\" ASC LIMIT ?")
            return run(snap, sql, [n])

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
            result = run(snap, sql, [key])
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
            return int(run(snap, sql, params).row["above"])


__all__ = ["IndexedReads"]
