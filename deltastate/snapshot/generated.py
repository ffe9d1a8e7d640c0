"""Snapshots of generated rows, built without Spark: for the query bench (millions of keys in
seconds) and for tests of reads whose engine side is not the subject.

They go through the production publisher (publish_built: candidate, promote, CURRENT, keep-K) and
the production table definitions (table_ddl), so readers see exactly the files a publish writes;
only the rows come from a generator instead of a changelog.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from deltastate.config import Settings
from deltastate.snapshot.catalog import SnapshotInfo, StoreSnapshot
from deltastate.snapshot.publish import publish_built, quote, table_ddl
from deltastate.stores.definition import StoreDefinition

if TYPE_CHECKING:
    import duckdb


@dataclass(frozen=True)
class GeneratedStore:
    """One store of a generated snapshot: fill(con) inserts its rows into the store's created table."""

    definition: StoreDefinition
    fill: Callable[[duckdb.DuckDBPyConnection], None]
    changelog_version: int | None = None
    changelog_committed_at: datetime | None = None  # naive UTC


def publish_generated(settings: Settings, stores: list[GeneratedStore],
                      published_at: datetime | None = None) -> SnapshotInfo:
    """Publish the next snapshot with these stores' generated rows; return its info."""

    def build(con: duckdb.DuckDBPyConnection) -> list[StoreSnapshot]:
        built = []
        for s in stores:
            con.execute(table_ddl(s.definition))
            s.fill(con)
            [(rows,)] = con.execute(f"SELECT count(*) FROM {quote(s.definition.name)}").fetchall()
            built.append(StoreSnapshot(s.definition.name, s.definition.type, s.changelog_version,
                                       s.changelog_committed_at, int(rows),
                                       value_version=s.definition.value_version))
        return built

    return publish_built(settings, build, published_at=published_at)


def player_stats_sql(keys: int, seed: int = 1) -> str:
    """A SELECT of `keys` rows in player_stats' snapshot columns (player-000000000 ...), deterministic
    per seed."""
    return (
        "SELECT printf('player-%09d', i) AS key, 1 + (hash(i, {s}) % 50)::BIGINT AS games, "
        "(hash(i, {s} + 1) % 100000)::BIGINT AS total_score, (hash(i, {s} + 2) % 10000)::BIGINT AS best_score, "
        "1700000000000 + (hash(i, {s} + 3) % 86400000)::BIGINT AS last_played, (i % 4)::INTEGER AS source_partition, "
        "i AS source_offset, 0::BIGINT AS batch_id, TIMESTAMP '2026-01-01' AS event_time, "
        "TIMESTAMP '2026-01-01' AS write_time FROM range({n}) t(i)"
    ).format(s=int(seed), n=int(keys))


__all__ = ["GeneratedStore", "player_stats_sql", "publish_generated"]
