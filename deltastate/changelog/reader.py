"""Reads a store's state back out of its Delta changelog.

The changelog holds every put and delete; a key's state is its latest row by (epoch, batch_id), and
a key whose latest row is a delete is absent. The reduction is one native aggregate (max_by over a
struct ordered by the struct of ordering columns), so it runs on the executors, never in Python.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from deltastate.changelog.deltalog import local_dir, newest_commit, newest_version
from deltastate.changelog.layout import (
    CHANGELOG,
    EVENT_TIME,
    ORDER_COLUMNS,
    SOURCE_OFFSET,
    SOURCE_PARTITION,
    WRITE_TIME,
    store_key_columns,
)
from deltastate.changelog.rules import latest_per_key
from deltastate.config import Settings
from deltastate.stores.definition import StoreDefinition

if TYPE_CHECKING:  # pyspark is slow to import; callers already hold a session
    from pyspark.sql import DataFrame, SparkSession

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Bookkeeping columns the state keeps next to the value columns, in output order.
STATE_BOOKKEEPING = (SOURCE_PARTITION, SOURCE_OFFSET, *ORDER_COLUMNS, EVENT_TIME, WRITE_TIME)


def state_columns(store: StoreDefinition) -> list[str]:
    """Columns of latest_state(), in order."""
    return [*store_key_columns(store), *store.value_columns, *STATE_BOOKKEEPING]


def table_exists(spark: SparkSession, path: str) -> bool:
    # Imported here: the read-only query path imports this module and should not load pyspark.
    from deltastate.changelog.tables import table_exists as delta_table_exists

    return delta_table_exists(spark, path)


def latest_commit(spark: SparkSession, path: str) -> tuple[int, datetime] | None:
    """(version, commit time as aware UTC) of the newest commit of the Delta table at path; None when
    no Delta table is there. A local table's answer comes from its log's newest commit file, by the
    rule the query service's staleness uses (deltalog.newest_commit); other storage reads Delta's
    history through Spark."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    if local_dir(path) is not None:
        newest = newest_commit(path)
        return None if newest is None else (newest.version, newest.committed_at.replace(tzinfo=UTC))
    if not table_exists(spark, path):
        return None
    row = (DeltaTable.forPath(spark, path).history(1)
           .select("version", F.unix_micros("timestamp").alias("us")).first())
    return None if row is None else (int(row["version"]), _from_micros(row["us"]))


def changelog_version(spark: SparkSession, path: str) -> int | None:
    """Latest committed Delta version of the table at path; None when no Delta table is there. A
    local table's version is its log's newest commit file (no Spark job)."""
    if local_dir(path) is not None:
        return newest_version(path)
    latest = latest_commit(spark, path)
    return None if latest is None else latest[0]


def commit_time(spark: SparkSession, path: str, version: int) -> datetime | None:
    """Commit time (timezone-aware, UTC) of one version of the Delta table at path; None when unknown
    or expired from the history."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    if not table_exists(spark, path):
        return None
    row = (DeltaTable.forPath(spark, path).history()
           .where(F.col("version") == int(version)).select(F.unix_micros("timestamp").alias("us")).first())
    return None if row is None else _from_micros(row["us"])


def _from_micros(us: int | None) -> datetime | None:
    # Timestamps travel as epoch micros: collect() would give naive datetimes in the host's zone.
    return None if us is None else _EPOCH + timedelta(microseconds=int(us))


def latest_state(spark: SparkSession, settings: Settings, store: StoreDefinition,
                 version: int | None = None) -> DataFrame:
    """The store's live state at a Delta version of its changelog (default: latest).

    One row per live store key (key, plus window_start and window_end for window and session stores),
    the value columns, source_partition, source_offset, epoch, batch_id,
    event_time, write_time.
    """
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", int(version))
    changelog = reader.load(settings.table_path(store.storage, CHANGELOG))

    latest = latest_per_key(changelog, store_key_columns(store), [*store.value_columns, *STATE_BOOKKEEPING])
    return latest.select(*state_columns(store))


__all__ = [
    "STATE_BOOKKEEPING", "changelog_version", "commit_time", "latest_commit", "latest_state", "state_columns",
    "table_exists",
]
