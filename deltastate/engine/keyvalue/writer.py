"""The foreachBatch writer of a key-value store: one micro-batch into one Delta commit that lands
exactly once (its changelog records with its audit), after its dead letters when it has any.

A batch runs its stateful plan once. One Spark job runs it, writes the changed keys as the
changelog's files and observes the batch's summary (the audit groups' totals) on the way; the
commit then carries the audit built from that summary. A run's first batch may be a replay, which
is checked before anything is written: one that may have landed, and a store without changelog, run
the plan into the cache and summarise it first (a stateful plan evaluated twice would run its state
update twice), then write.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import datetime

from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from deltastate.changelog import layout
from deltastate.changelog.audit_log import BatchAudit, append_audit, audit_record, audit_rows
from deltastate.changelog.batch_commit import RECORDS_PER_FILE, BatchCommitter
from deltastate.changelog.bookkeeping import batch_bookkeeping, with_batch_literals
from deltastate.changelog.layout import (
    SOURCE_PARTITION,
    WRITE_TIME,
)
from deltastate.config import Settings
from deltastate.engine.common.lineage import Lineage
from deltastate.engine.common.output import COUNTS, dead_letter_rows
from deltastate.engine.common.report import BatchListener, BatchReport
from deltastate.engine.common.steps import Select
from deltastate.engine.keyvalue.audit import (
    BatchCounts,
    Ledger,
    RunningTotals,
    advance,
    batch_audit,
    ledger_json,
    load_ledger,
    reread_dead_letters,
)
from deltastate.engine.keyvalue.fold import EVENT_TIME_SLOT, FoldSpec
from deltastate.engine.keyvalue.plan import AUDIT_COLUMNS, AUDIT_PARTITION
from deltastate.errors import AuditMismatchError
from deltastate.stores.backends import backend_of
from deltastate.stores.definition import StoreDefinition
from deltastate.stores.expression import value_column


def changelog_select(spark: SparkSession, store: StoreDefinition, fold: FoldSpec,
                     lineage: Lineage) -> Callable[[DataFrame, int], DataFrame]:
    """(batch, batch_id) -> the batch's changelog rows, one per changed key (the audit groups' rows
    left out, in the same filter). The select is built once per run (engine/common/steps.py); a
    batch adds only its batch id and segment (with_batch_literals)."""
    alive = F.col("fold.n") > 0
    slot = {name: F.col(f"fold.r{i}") for i, name in enumerate(fold.slots)}
    values = [F.when(alive, value_column(store, f.name, slot)).cast(f.spark_type).alias(f.name)
              for f in store.value_fields]
    head = [F.col("store_key").alias(layout.KEY), *values]
    bookkeeping = batch_bookkeeping(
        op=F.when(alive, F.lit(layout.OP_PUT)).otherwise(F.lit(layout.OP_DELETE)),
        value_version=store.value_version, source_partition=F.col(SOURCE_PARTITION),
        source_offset=F.col("fold.last_pos"), epoch=lineage.epoch, lineage_id=lineage.lineage_id,
        # try_multiply: an epoch-ms value past the timestamp range gives a null event time instead
        # of an overflow that would fail, and on every replay fail again, the micro-batch.
        event_time=F.when(alive, F.timestamp_micros(F.try_multiply(slot[EVENT_TIME_SLOT], F.lit(1000))))
                    .otherwise(F.col("kafka_timestamp")))
    tail = [F.col(c) for c in backend_of(store).delete_reason_columns]
    changed_keys = F.col(AUDIT_PARTITION).isNull() & F.col("fold.last_pos").isNotNull()

    select = Select(spark, [*head, *bookkeeping, *tail])

    def records(batch: DataFrame, batch_id: int) -> DataFrame:
        return select(with_batch_literals(batch.where(changed_keys), lineage.epoch, batch_id))

    return records


def files_for(records: int) -> int:
    """How many files a batch of this many changelog records is written as, when its records are
    written from the cache (a run's first batch): one, or one per RECORDS_PER_FILE."""
    return max(1, -(-records // RECORDS_PER_FILE))


def store_writer(spark: SparkSession, settings: Settings, store: StoreDefinition, fold: FoldSpec, lineage: Lineage,
                 topic: str, committer: BatchCommitter, listener: BatchListener | None = None):
    """One micro-batch of a key-value store: its dead letters, then one commit of its changelog
    records carrying its audit (changelog/audit_log.py). The commit lands last: a batch is done when
    it has one. A store without changelog appends its audit row to the intake table instead."""
    paths = {t: settings.table_path(store.storage, t) for t in (layout.CHANGELOG, layout.DEADLETTER, layout.INTAKE)}
    ledger = Ledger(next_batch=-1)  # loaded from the audit table at the first batch (or a replay)
    writes_changelog = backend_of(store).has_changelog
    changelog_records = changelog_select(spark, store, fold, lineage)
    # The batch's summary, in one row: the audit groups' rows (their running totals) and the key
    # groups' changelog records by op. Built once, like the changelog's columns.
    changed = F.col("fold.last_pos").isNotNull()
    summary_columns = [
        F.collect_list(F.when(F.col(AUDIT_PARTITION).isNotNull(), F.struct(AUDIT_PARTITION, *AUDIT_COLUMNS)))
        .alias("audits"),
        F.count_if(changed & (F.col("fold.n") > 0)).alias(layout.OP_PUT),
        F.count_if(changed & (F.col("fold.n") == 0)).alias(layout.OP_DELETE)]

    def summarised(row) -> tuple[dict[int, RunningTotals], dict[str, int]]:
        running = {int(r[AUDIT_PARTITION]): RunningTotals(
                       tuple(int(r[c] or 0) for c in AUDIT_COLUMNS[:4]), int(r["audit_lo"]), int(r["audit_hi"]),
                       None if r["audit_stream_time"] is None else int(r["audit_stream_time"]))
                   for r in row["audits"]}
        return running, {op: int(row[op]) for op in (layout.OP_PUT, layout.OP_DELETE) if row[op]}

    def write(batch: DataFrame, batch_id: int) -> None:
        nonlocal ledger
        spark = batch.sparkSession
        started = time.perf_counter()
        if ledger.next_batch != batch_id:
            ledger = load_ledger(spark, settings, store, lineage, batch_id)
        staged = None
        if writes_changelog and not ledger.audited:
            # One job: the stateful plan runs once, its changed keys are written as the changelog's
            # files, and the summary is observed on the way; then the commit carrying the audit.
            observed = Observation(f"summary_{uuid.uuid4().hex}")
            staged = committer.stage(changelog_records(batch.observe(observed, *summary_columns), batch_id),
                                     batch_id, lineage.app_id(layout.INTAKE))
        if staged is not None:
            running, by_op = summarised(observed.get)
            audit = batch_audit(ledger, running, store.name, batch_id)
            stated = time.perf_counter()
            committed_row = None
            if audit.counts:  # a batch over transaction markers alone read no record: nothing to commit
                record = _audit_of(lineage, ledger, audit, batch_id)
                _write_dead_letters(spark, settings, store, lineage, topic, audit, batch_id,
                                    paths[layout.DEADLETTER], committer)
                committer.commit_staged(staged, record)
                committed_row = {**record.row, WRITE_TIME: datetime.now()}
        else:
            # A replay whose audit landed (the ledger says so) or may have (the commit's idempotent
            # check comes first), or a store without changelog: the summary's job, then the write.
            committed_row = None
            b = batch.persist()  # a stateful plan evaluated twice would run its state update twice
            try:
                # A global aggregate: its last stage is one task, not one per shuffle partition.
                running, by_op = summarised(b.agg(*summary_columns).first())
                audit = batch_audit(ledger, running, store.name, batch_id)
                stated = time.perf_counter()
                # A replayed batch whose audit already landed has its records, dead letters and audit in place.
                if audit.counts and not ledger.audited:
                    _write_dead_letters(spark, settings, store, lineage, topic, audit, batch_id,
                                        paths[layout.DEADLETTER], committer)
                    record = _audit_of(lineage, ledger, audit, batch_id)
                    if writes_changelog:
                        records = changelog_records(b, batch_id)
                        committer.commit(records.coalesce(files_for(sum(by_op.values()))), batch_id, record)
                    else:
                        append_audit(audit_rows(spark, [record.row]), paths[layout.INTAKE], record.app_id, batch_id)
                    committed_row = {**record.row, WRITE_TIME: datetime.now()}
            finally:
                b.unpersist()
        committed = time.perf_counter()
        ledger = advance(ledger, audit, batch_id)
        if listener:
            phases = {"state": stated - started, "commit": committed - stated}
            listener(BatchReport(batch_id, *(audit.total(name) for name in COUNTS), changelog=by_op, phases=phases,
                                 audit=committed_row))

    return write


def _audit_of(lineage: Lineage, ledger: Ledger, audit: BatchCounts, batch_id: int) -> BatchAudit:
    return BatchAudit(lineage.app_id(layout.INTAKE), audit_record(
        lineage.lineage_id, batch_id, audit.counts, audit.offsets, audit.stream_times, ledger_json(ledger)))


def _write_dead_letters(spark: SparkSession, settings: Settings, store: StoreDefinition, lineage: Lineage,
                        topic: str, audit: BatchCounts, batch_id: int, path: str, committer: BatchCommitter) -> None:
    expected = audit.total(layout.DEAD_LETTERED)
    if not expected:
        return
    with reread_dead_letters(spark, settings, store, topic, audit.with_dead_letters()) as failed:
        dead = dead_letter_rows(failed, lineage, batch_id).persist()
        try:
            found = dead.count()
            if found != expected:
                raise AuditMismatchError(
                    f"store {store.name!r}, batch {batch_id}: {expected} records of topic {topic!r} failed, but "
                    f"reading offsets {audit.with_dead_letters()} again found {found}; the batch's dead letters "
                    "and audit row were not written")
            committer.append_dead_letters(dead, path, lineage.lineage_id, batch_id)
        finally:
            dead.unpersist()
