"""Snapshots built directly in DuckDB, without Spark: for the query bench (millions of generated
keys in seconds) and for tests of reads whose engine side is not the subject.

The files follow the catalog's contract exactly (snapshot-NNNNNN.duckdb under a temp name, renamed,
CURRENT moved atomically, keep-K retention, the _snapshot and _snapshot_stores tables), so readers
cannot tell them from published ones.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from deltastate.changelog.layout import KEY, WINDOW_END, WINDOW_START, is_windowed, store_key_columns
from deltastate.config import Settings
from deltastate.snapshot.catalog import (
    META_DDL,
    META_TABLE,
    STORES_DDL,
    TEMP_MARK,
    SnapshotInfo,
    StoreSnapshot,
    current_version,
    fsync_dir,
    insert_store_row,
    prune,
    read_info,
    snapshot_files,
    snapshot_name,
    write_pointer,
)
from deltastate.snapshot.publish import DUCKDB_TYPES, publish_lock, quote
from deltastate.stores.definition import StoreDefinition

if TYPE_CHECKING:
    import duckdb

WINDOWED_BOOKKEEPING = (("source_partition", "INTEGER"), ("source_offset", "BIGINT"), ("epoch", "INTEGER"),
                        ("batch_id", "BIGINT"), ("event_time", "TIMESTAMP"), ("write_time", "TIMESTAMP"))
KV_BOOKKEEPING = (("source_partition", "INTEGER"), ("source_offset", "BIGINT"), ("batch_id", "BIGINT"),
                  ("event_time", "TIMESTAMP"), ("write_time", "TIMESTAMP"))


def snapshot_table_columns(store: StoreDefinition) -> list[tuple[str, str]]:
    """(name, DuckDB type) of a store's snapshot table: store key, values, bookkeeping."""
    keys = [(KEY, "VARCHAR")] + ([(WINDOW_START, "BIGINT"), (WINDOW_END, "BIGINT")] if is_windowed(store) else [])
    values = [(f.name, DUCKDB_TYPES[f.type]) for f in store.value_fields]
    return keys + values + list(WINDOWED_BOOKKEEPING if is_windowed(store) else KV_BOOKKEEPING)


def create_table(con: duckdb.DuckDBPyConnection, store: StoreDefinition) -> None:
    cols = ", ".join(f"{quote(n)} {t}" for n, t in snapshot_table_columns(store))
    pk = ", ".join(quote(c) for c in store_key_columns(store))
    con.execute(f"CREATE TABLE {quote(store.name)} ({cols}, PRIMARY KEY ({pk}))")


@dataclass(frozen=True)
class SyntheticStore:
    """One store of a synthetic snapshot: fill(con) inserts its rows into the created table."""

    definition: StoreDefinition
    fill: Callable[[duckdb.DuckDBPyConnection], None]
    changelog_version: int | None = None
    changelog_committed_at: datetime | None = None  # naive UTC


def write_snapshot(settings: Settings, stores: list[SyntheticStore], published_at: datetime | None = None) -> SnapshotInfo:
    """Build, publish (CURRENT) and prune like the real publisher; return the new snapshot's info."""
    import duckdb

    with publish_lock(settings):
        folder = settings.snapshots_dir
        version = max([0, *snapshot_files(settings), current_version(settings) or 0]) + 1
        final = folder / snapshot_name(version)
        tmp = folder / f".{final.name}{TEMP_MARK}{os.getpid()}"
        stamp = published_at or datetime.now(UTC).replace(tzinfo=None)
        try:
            con = duckdb.connect(str(tmp))
            try:
                con.execute("SET TimeZone = 'UTC'")
                con.execute(META_DDL)
                con.execute(f"INSERT INTO {META_TABLE} VALUES (?, ?)", [version, stamp])
                con.execute(STORES_DDL)
                for s in stores:
                    create_table(con, s.definition)
                    s.fill(con)
                    [(rows,)] = con.execute(f"SELECT count(*) FROM {quote(s.definition.name)}").fetchall()
                    insert_store_row(con, StoreSnapshot(s.definition.name, s.definition.type, s.changelog_version,
                                                        s.changelog_committed_at, rows))
                con.execute("CHECKPOINT")
            finally:
                con.close()
            os.replace(tmp, final)
            fsync_dir(folder)
        finally:
            for leftover in (tmp, tmp.with_name(tmp.name + ".wal")):
                leftover.unlink(missing_ok=True)
        write_pointer(settings, final.name)
        prune(settings, settings.snapshot_keep)
        return read_info(final, current=True)


def player_stats_sql(keys: int, seed: int = 1) -> str:
    """A SELECT producing `keys` player_stats-shaped rows (player-000000000 ...), deterministic per seed."""
    return (
        "SELECT printf('player-%09d', i) AS key, 1 + (hash(i, {s}) % 50)::BIGINT AS games, "
        "(hash(i, {s} + 1) % 100000)::BIGINT AS total_score, (hash(i, {s} + 2) % 10000)::BIGINT AS best_score, "
        "1700000000000 + (hash(i, {s} + 3) % 86400000)::BIGINT AS last_played, (i % 4)::INTEGER AS source_partition, "
        "i AS source_offset, 0::BIGINT AS batch_id, TIMESTAMP '2026-01-01' AS event_time, "
        "TIMESTAMP '2026-01-01' AS write_time FROM range({n}) t(i)"
    ).format(s=int(seed), n=int(keys))


__all__ = ["SyntheticStore", "create_table", "player_stats_sql", "snapshot_table_columns", "write_snapshot"]
