"""VACUUM of a store's changelog with a retention that never breaks a reader.

Why this retention: VACUUM deletes data files that no table version within the retention still
references. Too short a retention breaks three kinds of readers:
  * a write in flight (a micro-batch, a compaction) whose new files are not committed yet: Delta's
    own guard is the table's delta.deletedFileRetentionDuration (default 7 days), kept as the floor;
  * a reader pinned to an older version (snapshot publish, restore) while it reads;
  * time travel to the changelog version a retained DuckDB snapshot was built from, which restore
    and audits use to compare a snapshot with its changelog.
So the retention is the larger of the table's configured retention and the age of the oldest
changelog version any retained snapshot holds (plus an hour of margin). The intake audit and
dead-letter tables are vacuumed with the same retention: no reader pins them, so it is only cautious.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from deltastate.config import Settings
from deltastate.stores.definition import StoreDefinition

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_RETENTION_HOURS = 7 * 24.0  # Delta's default delta.deletedFileRetentionDuration
MARGIN_HOURS = 1.0


def parse_interval_hours(text: str | None) -> float | None:
    """Hours of a Delta interval property such as 'interval 7 days' or 'interval 12 hours'."""
    if not text:
        return None
    parts = text.lower().replace("interval", "").split()
    units = {"second": 1 / 3600, "minute": 1 / 60, "hour": 1.0, "day": 24.0, "week": 168.0}
    total, i = 0.0, 0
    while i + 1 < len(parts):
        unit = parts[i + 1].rstrip("s")
        if unit not in units:
            return None
        total += float(parts[i]) * units[unit]
        i += 2
    return total if i == len(parts) else None


def snapshot_hold_hours(settings: Settings, store: StoreDefinition, now: datetime) -> float:
    """Age in hours of the oldest changelog version of `store` that a retained snapshot holds."""
    from deltastate.errors import SnapshotError
    from deltastate.snapshot.catalog import list_snapshots

    try:
        infos = list_snapshots(settings)
    except SnapshotError:
        return 0.0
    times = [s.changelog_committed_at for info in infos for s in info.stores
             if s.store == store.name and s.changelog_committed_at is not None]
    if not times:
        return 0.0
    oldest = min(times).replace(tzinfo=UTC)  # snapshot metadata holds naive UTC
    return max(0.0, (now - oldest).total_seconds() / 3600)


def vacuum_retention_hours(spark: SparkSession, settings: Settings, store: StoreDefinition, path: str) -> float:
    from deltastate.changelog.tables import table_properties

    props = table_properties(spark, path)
    configured = parse_interval_hours(props.get("delta.deletedFileRetentionDuration")) or DEFAULT_RETENTION_HOURS
    held = snapshot_hold_hours(settings, store, datetime.now(UTC))
    return max(configured, held + MARGIN_HOURS if held else 0.0)


def vacuum_table(spark: SparkSession, settings: Settings, store: StoreDefinition,
                     path: str) -> tuple[float, int | None]:
    """Runs VACUUM; returns (retention hours, files deleted if Delta logged it)."""
    from delta.tables import DeltaTable

    hours = vacuum_retention_hours(spark, settings, store, path)
    table = DeltaTable.forPath(spark, path)
    table.vacuum(hours)
    row = table.history(3).where("operation = 'VACUUM END'").select("operationMetrics").first()
    if row is None or row[0] is None or "numDeletedFiles" not in row[0]:
        return hours, None
    return hours, int(row[0]["numDeletedFiles"])
