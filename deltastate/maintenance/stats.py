"""What maintenance measures and decides with: table size figures, the dirty ratio, the clock, and
the error maintenance raises. Pure functions here are unit-tested alone; the rest read Delta."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from deltastate.errors import DeltastateError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from deltastate.config import Settings


class MaintenanceError(DeltastateError):
    """Compaction or cleanup of a store could not run; the message names the store."""

    def __init__(self, store: str, problem: str) -> None:
        super().__init__(f"store {store!r}: {problem}")
        self.store = store


@dataclass(frozen=True)
class TableFigures:
    """A Delta table at one version: records, and the data files (and their bytes) that version
    references. Files removed by a rewrite stay on disk until VACUUM; they are not counted here."""

    version: int
    records: int
    files: int
    bytes: int


def table_figures(spark: SparkSession, path: str) -> TableFigures:
    """Figures of the table's latest version, from the Delta log: DESCRIBE DETAIL for files and
    bytes, and a count Delta answers from the files' statistics instead of scanning."""
    from delta.tables import DeltaTable

    from deltastate.changelog.reader import changelog_version

    version = changelog_version(spark, path)
    if version is None:
        raise ValueError(f"no Delta table at {path}")
    detail = DeltaTable.forPath(spark, path).detail().select("numFiles", "sizeInBytes").first()
    records = spark.read.format("delta").option("versionAsOf", version).load(path).count()
    return TableFigures(version, int(records), int(detail["numFiles"] or 0), int(detail["sizeInBytes"] or 0))


def dirty_ratio(superseded: int, total: int) -> float:
    """Share of records that are no longer state (Kafka's dirty ratio, counted in records)."""
    return 0.0 if total <= 0 else superseded / total


def should_compact(superseded: int, droppable: int, total: int, min_ratio: float) -> str | None:
    """None when compaction should rewrite; otherwise why it is skipped. Like Kafka's log cleaner,
    a log is cleaned only once its dirty share reaches min.cleanable.dirty.ratio, and a pass that
    would drop nothing (everything dirty is still within the lag or in the active segment) is
    skipped rather than rewriting files for nothing."""
    if total == 0:
        return "empty changelog"
    ratio = dirty_ratio(superseded, total)
    if ratio < min_ratio:
        return f"dirty ratio {ratio:.3f} < min_cleanable_dirty_ratio {min_ratio:g}"
    if droppable == 0:
        return "nothing droppable: superseded records are in the active segment or within min_compaction_lag"
    return None


def now_ms() -> int:
    return int(time.time() * 1000)


def expired(last_ms: int, now: int, age_ms: int) -> bool:
    """A record last touched at last_ms is older than age_ms at `now` (strictly)."""
    return last_ms < now - age_ms


def get_session(settings: Settings, spark: SparkSession | None) -> SparkSession:
    if spark is not None:
        return spark
    from deltastate.infra.spark import get_spark

    return get_spark(settings, "deltastate-maintenance")
