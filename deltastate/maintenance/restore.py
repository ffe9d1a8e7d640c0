"""Restore: rebuild a store's checkpoint from its changelog when the Spark checkpoint is lost or
corrupt (Kafka Streams restores a lost state store from its changelog topic the same way).

Steps: move the old checkpoint folder aside; remove what batches left half-written (dead letters and
changelog rows of batches whose audit row never landed: a store's query appends changelog, dead
letters, then the audit row, and a batch is done when its audit row landed); take the changelog's
latest version V; for a key-value store, write the live state at V (one row per live key, so the
work follows the state's size, not the history's length) to a seed Delta table inside a new
checkpoint with a new lineage and the next epoch; record that the new query resumes one past the
highest offset the audit holds per partition. The next `deltastate run` seeds its state from the
table and reads Kafka from there: no event is lost and none is counted twice. Window and session
stores need no seed: their state is the changelog itself.

A store without changelog (changelog.enabled: false) has nothing to restore from: its restore is a
replay. The new checkpoint reads the source topic from its earliest offsets, and the audit and dead
letters start over with it (their old rows are deleted), so they describe the one pass that built
the state; records the topic no longer holds (its retention) are missing from the state and the audit.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from deltastate import metrics
from deltastate.changelog.audit_log import flush_audits
from deltastate.changelog.intake import audit_position, audited_batches
from deltastate.changelog.layout import (
    BATCH_ID,
    CHANGELOG,
    DEADLETTER,
    INTAKE,
    LINEAGE_ID,
    MIGRATION_SEED_LINEAGE,
    SOURCE_PARTITION,
)
from deltastate.changelog.reader import changelog_version, latest_state
from deltastate.changelog.tables import ensure_tables, table_exists
from deltastate.config import Settings
from deltastate.engine.common.lineage import load_or_create
from deltastate.engine.common.resume import ResumePlan, save_plan
from deltastate.engine.common.writer_lock import claim_checkpoint
from deltastate.infra.spark import get_spark
from deltastate.maintenance.inspect import record_restore_rate
from deltastate.maintenance.listener import RestoreListener, RestoreMode, SilentListener
from deltastate.report import Report
from deltastate.stores import load_store
from deltastate.stores.backends import backend_of, cleanup_lineage_ids
from deltastate.stores.definition import StoreDefinition

SEED_DIR = "seed"


@dataclass(frozen=True)
class RestoreReport(Report):
    store: str
    mode: RestoreMode
    changelog_version: int | None  # the version whose state was restored
    lineage_id: str  # the new checkpoint's lineage
    epoch: int
    records_restored: int  # live state rows written to the seed
    starting_offsets: dict[int, int] = field(default_factory=dict)  # partition -> next offset to read
    seed_path: str | None = None
    moved_checkpoint: str | None = None  # where the old checkpoint folder went
    orphans: int = 0  # dead letters and changelog rows of batches whose audit row never landed, removed
    seconds: float = 0.0
    cleared: int = 0  # a replay: audit rows and dead letters deleted so that they start over with it


def _move_aside(checkpoint: str) -> str | None:
    """Keeps the old checkpoint for inspection instead of deleting it."""
    folder = Path(checkpoint)
    if not folder.exists():
        return None
    target = folder.with_name(f"{folder.name}.lost-{datetime.now(UTC):%Y%m%dT%H%M%S%f}")
    folder.rename(target)
    return str(target)


def drop_orphan_dead_letters(spark: SparkSession, settings: Settings, store: StoreDefinition) -> int:
    """An intake batch appends its dead letters, then its audit row; a crash between the two leaves
    dead letters of a batch that the audit (and so the resume offsets) never saw. Their old
    checkpoint is gone, so no replay would skip them: the resumed run writes them again. Remove
    them first so that each dead letter stays in the table once."""
    return _drop_unaudited(spark, settings, store, settings.table_path(store.storage, DEADLETTER))


def _drop_unaudited(spark: SparkSession, settings: Settings, store: StoreDefinition, path: str,
                    exempt: tuple[str, ...] = ()) -> int:
    """Deletes the rows of `path` from micro-batches without an audit row (lineages in exempt
    excepted); returns how many."""
    if not table_exists(spark, path):
        return 0
    audited = audited_batches(spark, settings, store)
    if audited is None:
        return 0
    rows = spark.read.format("delta").load(path)
    if exempt:
        rows = rows.where(~F.col(LINEAGE_ID).isin(list(exempt)))
    orphans = (rows.join(audited, [LINEAGE_ID, BATCH_ID], "left_anti")
               .groupBy(LINEAGE_ID, BATCH_ID).count().collect())
    if not orphans:
        return 0
    cond = " OR ".join(f"({LINEAGE_ID} = '{r[LINEAGE_ID]}' AND {BATCH_ID} = {int(r[BATCH_ID])})" for r in orphans)
    DeltaTable.forPath(spark, path).delete(cond)
    return sum(int(r["count"]) for r in orphans)


def _write_seed(spark: SparkSession, settings: Settings, store: StoreDefinition, version: int, seed_path: str,
                listener: RestoreListener) -> int:
    """The live state at version into the seed table, one append per source partition (the batches
    the listener sees, like Kafka Streams restoring one changelog partition at a time)."""
    state = latest_state(spark, settings, store, version).persist()
    try:
        slices = sorted(((r[SOURCE_PARTITION], int(r["count"]))
                         for r in state.groupBy(SOURCE_PARTITION).count().collect()),
                        key=lambda s: -1 if s[0] is None else s[0])
        total = 0
        for partition, count in slices:
            state.where(F.col(SOURCE_PARTITION).eqNullSafe(F.lit(partition).cast("int"))) \
                 .write.format("delta").mode("append").save(seed_path)
            total += count
            listener.on_batch(count, partition)
        return total
    finally:
        state.unpersist()


def drop_unaudited_changelog(spark: SparkSession, settings: Settings, store: StoreDefinition) -> int:
    """Changelog rows of micro-batches whose audit row never landed. Cleanup's tombstones have no
    audit rows, by design, and stay."""
    return _drop_unaudited(spark, settings, store, settings.table_path(store.storage, CHANGELOG),
                           (*cleanup_lineage_ids(), MIGRATION_SEED_LINEAGE))


def restore_store(settings: Settings, store_name: str, *, listener: RestoreListener | None = None,
                  spark: SparkSession | None = None) -> RestoreReport:
    """Rebuilds store_name's checkpoint from its changelog (see the module doc). The store's stream
    must not be running. Safe to repeat: a failed restore leaves no checkpoint, which `run` refuses,
    so the operator restores again."""
    started = time.monotonic()
    listener = metrics.restore_listener(settings, listener or SilentListener())
    store = load_store(settings, store_name)
    claim_checkpoint(settings, store.storage)  # fails while a run of the store still writes
    spark = spark or get_spark(settings, f"deltastate-restore-{store_name}")
    ensure_tables(spark, settings, store)
    moved = _move_aside(settings.checkpoint_path(store.storage))
    version = changelog_version(spark, settings.table_path(store.storage, CHANGELOG))
    mode: RestoreMode = backend_of(store).restore_mode
    if mode == "replay":
        return _replay(spark, settings, store, moved, listener, started)
    listener.on_start(store.name, version, mode)
    flush_audits(spark, settings, store)  # every committed batch's audit in the intake table first
    orphans = drop_orphan_dead_letters(spark, settings, store)
    orphans += drop_unaudited_changelog(spark, settings, store)
    version = changelog_version(spark, settings.table_path(store.storage, CHANGELOG))
    offsets = audit_position(spark, settings, store).next_offsets
    lineage = load_or_create(spark, settings, store)  # the folder is gone: a new lineage, the next epoch
    seed_path, restored = None, 0
    if mode == "full" and version is not None:
        seed_path = f"{lineage.checkpoint}/{SEED_DIR}"
        restored = _write_seed(spark, settings, store, version, seed_path, listener)
        if restored == 0:
            seed_path = None  # nothing live: the new checkpoint starts empty
    save_plan(lineage.checkpoint, ResumePlan(offsets, seed_path))
    seconds = time.monotonic() - started
    record_restore_rate(lineage.checkpoint, restored, seconds)
    listener.on_end(restored, seconds)
    return RestoreReport(store.name, mode, version, lineage.lineage_id, lineage.epoch, restored, offsets,
                         seed_path, moved, orphans, seconds)


def _replay(spark: SparkSession, settings: Settings, store: StoreDefinition, moved: str | None,
            listener: RestoreListener, started: float) -> RestoreReport:
    """A store without changelog: a new checkpoint that replays the topic from its earliest offsets."""
    listener.on_start(store.name, None, "replay")
    cleared = 0
    for table in (INTAKE, DEADLETTER):
        path = settings.table_path(store.storage, table)
        cleared += spark.read.format("delta").load(path).count()
        DeltaTable.forPath(spark, path).delete()
    lineage = load_or_create(spark, settings, store)
    save_plan(lineage.checkpoint, ResumePlan({}, None))
    seconds = time.monotonic() - started
    listener.on_end(0, seconds)
    return RestoreReport(store.name, "replay", None, lineage.lineage_id, lineage.epoch, 0, {}, None, moved,
                         seconds=seconds, cleared=cleared)
