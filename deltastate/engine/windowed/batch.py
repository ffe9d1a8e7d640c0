"""foreachBatch body of a window or session store: one micro-batch in, one exactly-once Delta commit out.

Its dead letters first, when it has any, then one commit of its changelog records carrying its
audit row (changelog/audit_log.py); each is an idempotent Delta write keyed by the lineage and the
batch id, and the state and stream times a batch reads exclude anything written by an earlier
attempt of the same batch, so a replay computes, and skips, exactly what it first wrote. What the
batch changes is planned in changes.py.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from deltastate.changelog import layout
from deltastate.changelog.audit_log import BatchAudit, audit_record
from deltastate.changelog.batch_commit import BatchCommitter, StagedAppend
from deltastate.changelog.bookkeeping import batch_bookkeeping, with_batch_literals
from deltastate.changelog.intake import carried_stream_times_json
from deltastate.changelog.layout import (
    SOURCE_OFFSET,
    SOURCE_PARTITION,
    WRITE_TIME,
)
from deltastate.changelog.rules import retention_horizon
from deltastate.config import Settings
from deltastate.engine.common.lineage import Lineage
from deltastate.engine.common.output import COUNTS, dead_letter_rows
from deltastate.engine.common.report import BatchListener, BatchReport
from deltastate.engine.common.steps import Aggregate, Select
from deltastate.engine.windowed.changes import StateJoin, WindowedChanges, step_for
from deltastate.engine.windowed.live_store import LiveStore
from deltastate.engine.windowed.records import (
    IS_DELETE,
    IS_LATE,
    RecordsPlan,
    flag_columns,
)
from deltastate.engine.windowed.state import live_entries
from deltastate.engine.windowed.stream_time import (
    advance,
    load_stream_times,
    split_partitions,
)
from deltastate.engine.windowed.summary import PartitionSummary
from deltastate.errors import StreamTimeError
from deltastate.stores.definition import StoreDefinition
from deltastate.stores.expression import value_column

LATE = layout.REASON_LATE


@dataclass
class _Clock:
    """Stream times carried from one batch to the next (reloaded from the audit after a restart)."""

    next_batch: int | None = None
    times: dict[int, int] = field(default_factory=dict)
    deleted: bool = False  # whether the last batch held tombstones


def changelog_select(spark: SparkSession, store: StoreDefinition,
                     lineage: Lineage) -> Callable[[WindowedChanges, int], DataFrame]:
    """(changes, batch_id) -> the batch's changelog rows, in one pass over a mixed frame of puts and
    deletes. The steps are built once per run (engine/common/steps.py); a batch adds only its batch
    id and segment (with_batch_literals)."""
    # Aggregations come out of the merge; derived fields are computed over them on every put.
    aggregated = {a.target: F.col(a.target) for a in store.aggregations}
    value_of = {f.name: value_column(store, f.name, aggregated).cast(f.spark_type) for f in store.value_fields}
    values = [v.alias(name) for name, v in value_of.items()]
    put_rows = Select(spark, [layout.KEY, layout.WINDOW_START, layout.WINDOW_END, *values,
                              F.col(layout.EVENTS).cast("bigint").alias(layout.EVENTS),
                              F.lit(layout.OP_PUT).alias(layout.OP), SOURCE_PARTITION, SOURCE_OFFSET, "event_ms"])
    deleted = F.col(IS_DELETE)
    mixed_rows = Select(spark, [layout.KEY, layout.WINDOW_START, layout.WINDOW_END,
                                *[F.when(~deleted, v).alias(name) for name, v in value_of.items()],
                                F.col(layout.EVENTS).cast("bigint").alias(layout.EVENTS),
                                F.when(deleted, F.lit(layout.OP_DELETE)).otherwise(F.lit(layout.OP_PUT)).alias(layout.OP),
                                SOURCE_PARTITION, SOURCE_OFFSET, "event_ms"])
    delete_rows = Select(spark, [layout.KEY, layout.WINDOW_START, layout.WINDOW_END,
                                 *[F.lit(None).cast(f.spark_type).alias(f.name) for f in store.value_fields],
                                 F.lit(None).cast("bigint").alias(layout.EVENTS),
                                 F.lit(layout.OP_DELETE).alias(layout.OP), SOURCE_PARTITION, SOURCE_OFFSET,
                                 F.lit(None).cast("bigint").alias("event_ms")])
    head = [layout.KEY, F.col(layout.WINDOW_START).cast("bigint").alias(layout.WINDOW_START),
            F.col(layout.WINDOW_END).cast("bigint").alias(layout.WINDOW_END), *store.value_columns, layout.EVENTS]
    bookkeeping = batch_bookkeeping(
        op=F.col(layout.OP), value_version=store.value_version, source_partition=F.col(SOURCE_PARTITION),
        source_offset=F.col(SOURCE_OFFSET), epoch=lineage.epoch, lineage_id=lineage.lineage_id, event_time=F.timestamp_micros(F.try_multiply(F.col("event_ms"), F.lit(1000))))
    changelog_rows = Select(spark, [*head, *bookkeeping])

    def rows(changes: WindowedChanges, batch_id: int) -> DataFrame:
        if changes.mixed:  # one pass: a union of two filters over it would compute the merge twice
            both = mixed_rows(changes.puts)
        elif changes.removed is None:
            both = put_rows(changes.puts)
        else:
            both = put_rows(changes.puts).unionByName(delete_rows(changes.removed))
        return changelog_rows(with_batch_literals(both, lineage.epoch, batch_id))

    return rows


def _release(df: DataFrame) -> None:
    """Frees a cached or locally checkpointed frame now (DataFrame.unpersist does not reach a
    checkpoint's blocks, which would otherwise wait for the JVM's garbage collector)."""
    plan = df._jdf.queryExecution().analyzed()
    if plan.getClass().getSimpleName() == "LogicalRDD":
        plan.rdd().unpersist(False)
    else:
        df.unpersist()


def _dead_letters(records: DataFrame, session_late: DataFrame | None) -> DataFrame:
    """The batch's failed and late records (late ones with reason "late"), raw bytes included;
    session_late: the positions of the records a session merge found late (None: none did, or a
    window store, whose records carry their lateness)."""
    if session_late is None:
        dead = records.where(F.col("reason").isNotNull() | F.col(IS_LATE))
    else:
        marked = records.join(session_late.withColumn("_late", F.lit(True)), ["partition", "offset"], "left")
        dead = marked.where(F.col("reason").isNotNull() | F.col("_late").isNotNull())
    return dead.withColumn("reason", F.coalesce(F.col("reason"), F.lit(LATE)))


def windowed_writer(spark: SparkSession, settings: Settings, store: StoreDefinition, lineage: Lineage,
                    committer: BatchCommitter, listener: BatchListener | None = None):
    clock = _Clock()
    live: list[LiveStore] = []  # created at the first batch, when the changelog table exists
    spec = store.window or store.session
    assert spec is not None
    paths = {t: settings.table_path(store.storage, t) for t in (layout.CHANGELOG, layout.DEADLETTER, layout.INTAKE)}
    # The steps of every batch's plan, built once (engine/common/steps.py): building them again cost
    # each batch ~1,100 py4j round trips.
    records_plan = RecordsPlan(spark, store)
    with_flags = Select(spark, ["*", *flag_columns(store)])
    changelog_rows = changelog_select(spark, store, lineage)
    step = step_for(spark, store)
    summary = PartitionSummary(spark, store)
    count_late = Aggregate(spark, ["partition"], [F.count(F.lit(1)).alias("count")])
    op_counts = {op: F.count_if(F.col(layout.OP) == F.lit(op)) for op in (layout.OP_PUT, layout.OP_DELETE)}
    observed_ops = [c.alias(op) for op, c in op_counts.items()]

    def write(batch: DataFrame, batch_id: int) -> None:
        spark = batch.sparkSession
        started = time.perf_counter()
        if clock.next_batch != batch_id:
            clock.times = load_stream_times(spark, settings, store, lineage, batch_id)
        if not live:
            live.append(LiveStore(spark, store, lineage, spark.read.format("delta").load(
                paths[layout.CHANGELOG]).schema, settings.shuffle_partitions))
        entries_here = live[0].ready(batch_id)
        # A batch that writes its state through (every seeded batch but a run's first one that may
        # have committed already) runs one job: its summary is observed while the write fills the
        # cache. The others summarise first, in a job of their own, which also fills the cache.
        staging = entries_here and committer.stages(spark, batch_id, lineage.app_id(layout.INTAKE))
        records, observed = records_plan(batch, clock.times), None
        if staging:
            records, observed = summary.observed(records, clock.times, f"summary_{uuid.uuid4().hex}")
        stored = records.persist()
        cached = [stored]
        b = with_flags(stored)
        try:
            per_partition = None if staging else summary.aggregated(b)
            if per_partition == []:  # no records (offsets over transaction markers): the state's version moves on
                live[0].advance(batch_id)
                return
            read = time.perf_counter()
            # Entries no partition retains any longer cannot change: the state read skips them.
            horizon = min(retention_horizon(spec, t) for t in clock.times.values()) if clock.times else None

            def entries(wanted: DataFrame) -> DataFrame:
                if entries_here:
                    return live[0].read(wanted, batch_id, horizon)
                # Seeding from the changelog: every entry of the keys asked (the join keeps the windows).
                return live_entries(spark, settings, store, lineage, batch_id, wanted.select("key_str"), horizon)

            join = (StateJoin(live[0].by_key, lambda rows, prefix: live[0].joined(rows, batch_id, horizon, prefix),
                              lambda rows, prefix, deleted, removed: live[0].joined_deleting(
                                  rows, batch_id, horizon, prefix, deleted, removed),
                              lambda rows, kind, state: live[0].with_entries(rows, batch_id, horizon, kind, state),
                              live[0].partitions)
                    if staging else None)

            def planned(has_deletes: bool) -> tuple[WindowedChanges, DataFrame, StagedAppend | None, Observation]:
                changes = step(entries, join, b, has_deletes)
                cached.extend(changes.cached)
                rows = changelog_rows(changes, batch_id)
                ops, staged = Observation(f"ops_{uuid.uuid4().hex}"), None
                if staging:
                    # One job writes the records as the changelog's files and into the state store;
                    # they commit with the audit below. A failure between the two replays the batch,
                    # which reads the state's version before it and writes the next one again.
                    through = live[0].write_through(rows, batch_id, horizon).observe(ops, *observed_ops)
                    staged = committer.stage(through, batch_id, lineage.app_id(layout.INTAKE))
                return changes, rows, staged, ops

            # A window store's batch plans for deletes when it has any. One staged before its summary
            # is known plans for them when the batch before had some (a store whose tombstones come
            # often, as pulse_counts' checkouts do); planned without and holding some, it plans for
            # them and writes again (its first files deleted, the state's next version written again
            # from the same version before it).
            plans_deletes = (clock.deleted if per_partition is None
                             else any(int(r[layout.TOMBSTONES]) for r in per_partition))
            changes, rows, staged, observed_op = planned(plans_deletes)
            if observed is not None:
                per_partition = summary.from_observed(stored, observed)
                if per_partition is None:  # a partition without columns, or counts off the cache's rows
                    per_partition = summary.aggregated(b)
                if store.window and not plans_deletes and any(int(r[layout.TOMBSTONES]) for r in per_partition):
                    assert staged is not None
                    committer.abandon(staged)
                    changes, rows, staged, observed_op = planned(True)
                if not per_partition:  # no records: the write moved the state's version on, unchanged
                    assert staged is not None
                    committer.abandon(staged)
                    return
            split = split_partitions({int(r["partition"]): (r["task_lo"], r["task_hi"]) for r in per_partition})
            if split:
                raise StreamTimeError(store.name, batch_id, split)
            # Late events: window stores know theirs from the pass, session stores from the merge.
            late_by_partition = {int(r["partition"]): int(r[layout.LATE]) for r in per_partition}
            session_late = None  # (partition, offset) of the merge's late records, when it found any
            if changes.late is not None:
                late_by_partition = {}
                if changes.any_late():
                    session_late = changes.late.persist()  # counted, then dead-lettered: merged once more
                    cached.append(session_late)
                    late_by_partition = {int(r["partition"]): int(r["count"]) for r in count_late(session_late).collect()}
            counts = {}
            for r in per_partition:
                p, n_late = int(r["partition"]), late_by_partition.get(int(r["partition"]), 0)
                counts[p] = (int(r[layout.RECORDS_IN]), int(r[layout.RECORDS_IN]) - int(r["failed"]) - n_late,
                             int(r["failed"]) + n_late, int(r[layout.TOMBSTONES]))
            totals = {name: sum(c[i] for c in counts.values()) for i, name in enumerate(COUNTS)}
            totals[layout.LATE] = sum(late_by_partition.values())
            if totals[layout.DEAD_LETTERED]:  # before the commit: a replay of a committed batch skips it
                dead = _dead_letters(b, session_late)
                committer.append_dead_letters(dead_letter_rows(dead, lineage, batch_id), paths[layout.DEADLETTER],
                                              lineage.lineage_id, batch_id)
            batch_max = {int(r["partition"]): int(r["batch_max"]) for r in per_partition if r["batch_max"] is not None}
            new_times = advance(clock.times, batch_max)
            audit = BatchAudit(lineage.app_id(layout.INTAKE), audit_record(
                lineage.lineage_id, batch_id, counts,
                {int(r["partition"]): (int(r["lo"]), int(r["hi"])) for r in per_partition},
                batch_max, carried_stream_times_json(clock.times), late=totals[layout.LATE]))
            # One commit: the batch's changelog records (none for a batch of dead letters alone) and its audit.
            if staged is not None:
                committer.commit_staged(staged, audit)
                by_op = {op: int(n) for op, n in observed_op.get.items()}
                logged = time.perf_counter()
            else:  # seeding the state, or a run's first batch that may be a replay of a committed one
                rows = rows.persist()
                cached.append(rows)
                by_op = committer.commit(rows, batch_id, audit, op_counts)
                logged = time.perf_counter()
                # The state store follows the changelog: a batch whose commit landed and whose state
                # write did not is replayed, reads the same version and writes it again.
                seed = None if entries_here else live_entries(spark, settings, store, lineage, batch_id, None, horizon)
                live[0].write(rows, batch_id, seed, horizon)
            by_op = {op: n for op, n in by_op.items() if n}
            stated = time.perf_counter()
            committed_row = {**audit.row, WRITE_TIME: datetime.now()}
            clock.times, clock.next_batch = new_times, batch_id + 1
            clock.deleted = totals[layout.TOMBSTONES] > 0
        finally:
            for df in cached:
                _release(df)
        if listener:
            # The windows are computed lazily, inside the changelog append.
            phases = {"read": read - started, "state_and_commit": logged - read, "live": stated - logged}
            listener(BatchReport(batch_id, *(totals[name] for name in COUNTS), totals[layout.LATE], by_op, phases,
                                 committed_row))

    return write
