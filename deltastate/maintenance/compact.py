"""Log compaction of a store's Delta changelog, the way Kafka's log cleaner compacts a changelog topic.

Why it never collides with the running stream: the changelog is partitioned by `segment`, and the
stream only appends to the newest segment. Compaction reads the table at one pinned version V,
rewrites only SEALED segments (older than V's newest one) with a replaceWhere overwrite on exactly
those partitions, and Delta's conflict check for that overwrite looks only at files added to those
partitions concurrently: the stream's appends land elsewhere and never conflict. A conflict with
another maintenance writer (cleanup appending a tombstone to a segment that became sealed meanwhile,
a second compaction) fails only the compaction, which retries from a fresh version.

What a rewrite keeps, per store key (latest record by (epoch, batch_id) across the whole table at V):
  * every record in a segment that is not rewritten (the active segment; segments holding a record
    younger than min_compaction_lag, as Kafka never cleans records younger than the lag);
  * in rewritten segments, only the key's latest record, unless it is a tombstone older than
    delete_retention whose key has no record left in any segment that is not rewritten.
The rewrite is committed with dataChange=false: it removes only records that are no longer state
and that every reader has already seen, so a streaming reader of the changelog must not read the
re-added survivors again as new appends.

Then OPTIMIZE bin-packs the sealed segments' small files (also dataChange=false), and VACUUM deletes
unreferenced files older than the retention chosen in vacuum_retention_hours().
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from deltastate import metrics
from deltastate.changelog.intake import newest_audited
from deltastate.changelog.layout import (
    BATCH_ID,
    CHANGELOG,
    LINEAGE_ID,
    OP,
    OP_DELETE,
    ORDER_COLUMNS,
    SEGMENT,
    WRITE_TIME,
    store_key_columns,
)
from deltastate.config import Settings
from deltastate.maintenance.log_retention import maintain_logs
from deltastate.maintenance.stats import (
    MaintenanceError,
    TableFigures,
    dirty_ratio,
    get_session,
    should_compact,
    table_figures,
)
from deltastate.maintenance.stats import (
    now_ms as clock_ms,
)
from deltastate.maintenance.vacuum import vacuum_table
from deltastate.report import Report
from deltastate.stores import load_store
from deltastate.stores.definition import StoreDefinition

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

CONFLICT_RETRIES = 3


@dataclass(frozen=True)
class CompactionReport(Report):
    store: str
    read_version: int | None
    before: TableFigures | None
    after: TableFigures | None
    superseded: int = 0
    dirty_ratio_before: float = 0.0
    dirty_ratio_after: float | None = None
    tombstones_dropped: int = 0
    records_dropped: int = 0
    segments_rewritten: int = 0
    files_optimized: int = 0
    # The stream appends one small file per micro-batch to the intake audit and dead-letter tables;
    # OPTIMIZE bin-packs them (files removed per table).
    side_files_optimized: dict[str, int] | None = None
    vacuum_retention_hours: float | None = None
    files_vacuumed: int | None = None
    attempts: int = 1
    seconds: float = 0.0
    skipped: str | None = None


def compact_store(settings: Settings, store_name: str, *, spark: SparkSession | None = None,
                  now_ms: int | None = None, vacuum: bool = True) -> CompactionReport:
    """Compacts the store's changelog (see the module docstring); safe while its stream runs."""
    store = load_store(settings, store_name)
    return metrics.record_compaction(settings, compact_changelog(get_session(settings, spark), settings, store,
                                                                  now=now_ms, vacuum=vacuum))


def compact_changelog(spark: SparkSession, settings: Settings, store: StoreDefinition, *,
                      now: int | None = None, vacuum: bool = True) -> CompactionReport:
    from delta.tables import DeltaTable

    from deltastate.changelog.reader import changelog_version

    started = time.monotonic()
    path = settings.table_path(store.storage, CHANGELOG)
    if changelog_version(spark, path) is None:
        return CompactionReport(store.name, None, None, None, skipped="no changelog table yet")
    now = clock_ms() if now is None else now
    for attempt in range(1, CONFLICT_RETRIES + 1):
        try:
            report, newest = _compact_at(spark, settings, store, path, now, attempt)
            break
        except Exception as exc:  # noqa: BLE001 - only Delta commit conflicts are retried
            if not _is_conflict(exc) or attempt == CONFLICT_RETRIES:
                if _is_conflict(exc):
                    raise MaintenanceError(store.name, f"compaction kept conflicting with concurrent writers "
                                                       f"after {attempt} attempts: {exc}") from exc
                raise
    # File compaction runs whether or not records were dropped (small files cost reads either way),
    # on sealed segments only: OPTIMIZE never conflicts with appends, but leaving the active segment
    # alone keeps its file set stable for the stream's next micro-batches.
    optimized = 0
    if newest > 0:
        metrics = DeltaTable.forPath(spark, path).optimize().where(f"`{SEGMENT}` < {newest}").executeCompaction()
        optimized = _files_removed(metrics)
    maintain_logs(spark, settings, store, clean_now=True)
    side = _optimize_side_tables(spark, settings, store, vacuum)
    retention, vacuumed = (None, None)
    if vacuum:
        retention, vacuumed = vacuum_table(spark, settings, store, path)
    after = table_figures(spark, path)
    ratio_after = None
    if report.skipped is None:
        # Of the rewritten version (appends the stream made meanwhile are not counted): a dropped
        # record that was not its key's latest was superseded; the dropped latest ones are tombstones.
        left = report.before.records - report.records_dropped
        ratio_after = dirty_ratio(report.superseded - (report.records_dropped - report.tombstones_dropped), left)
    return CompactionReport(
        **{**report.to_dict(), "before": report.before, "after": after, "dirty_ratio_after": ratio_after,
           "files_optimized": optimized, "side_files_optimized": side, "vacuum_retention_hours": retention,
           "files_vacuumed": vacuumed, "seconds": time.monotonic() - started})


def _optimize_side_tables(spark: SparkSession, settings: Settings, store: StoreDefinition,
                          vacuum: bool) -> dict[str, int]:
    """OPTIMIZE (and VACUUM) the intake audit and dead-letter tables: files removed per table.

    Their rows are never rewritten (a batch's audit row and dead letters are the record of what it
    read), only bin-packed with dataChange=false. OPTIMIZE reads nothing the stream writes and the
    stream's idempotent appends are blind, so neither conflicts with the other. Reads of one batch's
    rows (the run-start ledger, engine/keyvalue/audit.py) find them by lineage_id/batch_id statistics either way."""
    from delta.tables import DeltaTable

    from deltastate.changelog.layout import DEADLETTER, INTAKE
    from deltastate.changelog.tables import table_exists

    removed = {}
    for name in (INTAKE, DEADLETTER):
        path = settings.table_path(store.storage, name)
        if not table_exists(spark, path):
            continue
        removed[name] = _files_removed(DeltaTable.forPath(spark, path).optimize().executeCompaction())
        if vacuum:
            vacuum_table(spark, settings, store, path)
    return removed


def _compact_at(spark: SparkSession, settings: Settings, store: StoreDefinition, path: str, now: int,
                attempt: int) -> tuple[CompactionReport, int]:
    """One attempt at the version the table has now; returns the report and V's newest segment."""
    from pyspark.sql import functions as F

    before = table_figures(spark, path)
    version = before.version
    opts = store.changelog
    table = spark.read.format("delta").option("versionAsOf", version).load(path)
    newest = _newest_segment(table)
    audited = newest_audited(spark, settings, store)  # lineage -> its newest batch with an audit row
    flagged = _flag(table, store, newest, now - opts.min_compaction_lag_ms, now - opts.delete_retention_ms,
                    audited).persist()
    try:
        counts = flagged.agg(
            F.count(F.lit(1)).alias("total"),
            F.count_if(~F.col("_is_latest") & ~F.col("_pending")).alias("superseded"),
            F.count_if(~F.col("_keep")).alias("droppable"),
            F.count_if(~F.col("_keep") & F.col("_is_latest")).alias("tombstones_dropped"),
        ).first()
        total, superseded = int(counts["total"]), int(counts["superseded"])
        droppable, tombstones = int(counts["droppable"]), int(counts["tombstones_dropped"])
        ratio = dirty_ratio(superseded, total)
        skipped = should_compact(superseded, droppable, total, opts.min_cleanable_dirty_ratio)
        # Records at V exactly (files and bytes are the log's figures when the attempt began).
        before = TableFigures(version, total, before.files, before.bytes)
        base = dict(store=store.name, read_version=version, before=before, after=None, superseded=superseded,
                    dirty_ratio_before=ratio, attempts=attempt)
        if skipped is not None:
            return CompactionReport(**base, skipped=skipped), newest
        dirty = sorted(int(r[SEGMENT]) for r in flagged.where(~F.col("_keep")).select(SEGMENT).distinct().collect())
        survivors = (flagged.where(F.col(SEGMENT).isin(dirty) & F.col("_keep"))
                     .select(*table.columns).repartition(F.col(SEGMENT)))
        (survivors.write.format("delta").mode("overwrite")
         .option("replaceWhere", f"`{SEGMENT}` IN ({', '.join(str(s) for s in dirty)})")
         .option("dataChange", "false")
         .option("userMetadata", f"deltastate compact {store.name} from version {version}")
         .save(path))
        return CompactionReport(**base, records_dropped=droppable, tombstones_dropped=tombstones,
                                segments_rewritten=len(dirty)), newest
    finally:
        flagged.unpersist()


def _flag(table: DataFrame, store: StoreDefinition, newest: int, lag_cutoff_ms: int,
          tombstone_cutoff_ms: int, audited: dict[str, int]) -> DataFrame:
    """Adds _is_latest (the record is its store key's state) and _keep (compaction keeps it).

    A segment is cleanable when it is sealed (older than the newest segment at V: the stream has
    moved past it) and its newest record is older than the lag (Kafka's min.compaction.lag.ms).
    Records of a batch whose audit row has not landed (past its lineage's newest audited batch) are
    not state yet: a crash there makes restore remove them, so they never supersede a record, and
    they are kept. Lineages without audit rows (cleanup's tombstones) are committed as written."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    per_key = Window.partitionBy(*store_key_columns(store))
    per_segment = Window.partitionBy(SEGMENT)
    order = F.struct(*[F.col(c) for c in ORDER_COLUMNS])
    cleanable = ((F.col(SEGMENT) < F.lit(newest))
                 & (F.max(F.unix_millis(WRITE_TIME)).over(per_segment) <= F.lit(lag_cutoff_ms)))
    pending = F.lit(False)
    if audited:
        newest_audited = F.create_map(*[F.lit(x) for q, b in sorted(audited.items()) for x in (q, b)])
        pending = F.coalesce(F.col(BATCH_ID) > F.try_element_at(newest_audited, F.col(LINEAGE_ID)), F.lit(False))
    flagged = (table
               .withColumn("_pending", pending)
               .withColumn("_in_cleanable", F.coalesce(cleanable, F.lit(False)) & ~F.col("_pending"))
               .withColumn("_is_latest", ~F.col("_pending")
                           & (order == F.max(F.when(~F.col("_pending"), order)).over(per_key)))
               # A tombstone may go only when no record of its key stays behind in an untouched segment
               # (that record would otherwise become the key's state again).
               .withColumn("_all_cleanable", F.min(F.col("_in_cleanable").cast("int")).over(per_key) == 1))
    old_tombstone = ((F.col(OP) == F.lit(OP_DELETE)) & (F.unix_millis(WRITE_TIME) < F.lit(tombstone_cutoff_ms))
                     & F.col("_all_cleanable"))
    keep = ~F.col("_in_cleanable") | (F.col("_is_latest") & ~old_tombstone)
    return flagged.withColumn("_keep", keep)


def _newest_segment(table: DataFrame) -> int:
    row = table.agg({SEGMENT: "max"}).first()
    return -1 if row is None or row[0] is None else int(row[0])


def _files_removed(metrics: DataFrame) -> int:
    row = metrics.select("metrics.numFilesRemoved").first()
    return 0 if row is None or row[0] is None else int(row[0])


def _is_conflict(exc: BaseException) -> bool:
    from delta.exceptions import base

    conflicts = (base.ConcurrentAppendException, base.ConcurrentDeleteReadException,
                 base.ConcurrentDeleteDeleteException, base.ConcurrentTransactionException,
                 base.ConcurrentWriteException, base.DeltaConcurrentModificationException)
    return isinstance(exc, conflicts) or "Concurrent" in type(exc).__name__
