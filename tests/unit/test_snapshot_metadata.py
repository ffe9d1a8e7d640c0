"""The _snapshot_stores table: rows written by insert_store_row read back whole, and snapshots
published before the stream-time columns existed still read (those columns as None)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import duckdb

from deltastate.snapshot.catalog import META_DDL, META_TABLE, STORES_DDL, StoreSnapshot, insert_store_row, read_info

OLD_STORES_DDL = ("CREATE TABLE _snapshot_stores (store VARCHAR PRIMARY KEY, store_type VARCHAR NOT NULL, "
                  "changelog_version BIGINT, changelog_committed_at TIMESTAMP, row_count BIGINT NOT NULL)")
PUBLISHED = datetime(2026, 11, 23, 1, 2, 3)


def _snapshot(path: Path, stores_ddl: str, fill: Callable[[duckdb.DuckDBPyConnection], None]) -> None:
    con = duckdb.connect(str(path))
    try:
        con.execute(META_DDL)
        con.execute(f"INSERT INTO {META_TABLE} VALUES (?, ?)", [4, PUBLISHED])
        con.execute(stores_ddl)
        fill(con)
    finally:
        con.close()


def test_rows_read_back_with_their_stream_times(tmp_path: Path) -> None:
    path = tmp_path / "snapshot-000004.duckdb"
    stores = [StoreSnapshot("pulse_counts", "window", 7, PUBLISHED, 12, 3, '{"0": 1700000060000, "2": 1700000000500}'),
              StoreSnapshot("player_stats", "key_value", 2, PUBLISHED, 5)]
    _snapshot(path, STORES_DDL, lambda con: [insert_store_row(con, s) for s in stores])
    info = read_info(path)
    assert list(info.stores) == sorted(stores, key=lambda s: s.store)
    assert info.store("pulse_counts").stream_times_by_partition() == {0: 1700000060000, 2: 1700000000500}
    assert info.store("player_stats").stream_times_by_partition() == {}


def test_a_snapshot_from_before_the_stream_time_columns_reads(tmp_path: Path) -> None:
    path = tmp_path / "snapshot-000004.duckdb"
    _snapshot(path, OLD_STORES_DDL,
              lambda con: con.execute("INSERT INTO _snapshot_stores VALUES (?, ?, ?, ?, ?)",
                                      ["trade_stats", "window", 9, PUBLISHED, 40]))
    [store] = read_info(path).stores
    assert store == StoreSnapshot("trade_stats", "window", 9, PUBLISHED, 40, None, None)
    assert store.stream_times_by_partition() == {}
