"""foreachBatch writers: turn one micro-batch into Delta appends that land exactly once.

Each batch DataFrame is persisted before use: a stateful plan evaluated twice would run its state
update twice, and the intake batch is read for dead letters and for the audit counts.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from deltastate.changelog import layout
from deltastate.changelog.tables import append_once
from deltastate.config import Settings
from deltastate.engine.fold import EVENT_TIME_SLOT, FoldSpec
from deltastate.engine.lineage import Lineage
from deltastate.stores.definition import StoreDefinition


@dataclass(frozen=True)
class BatchReport:
    query: str
    batch_id: int
    records: int
    detail: dict[str, int]


BatchListener = Callable[[BatchReport], None]


def changelog_records(batch: DataFrame, store: StoreDefinition, fold: FoldSpec, lineage: Lineage,
                      batch_id: int) -> DataFrame:
    """The changelog rows of one micro-batch of the changelog query."""
    alive = F.col("fold.n") > 0
    slot = {name: F.col(f"fold.r{i}") for i, name in enumerate(fold.slots)}
    values = [F.when(alive, slot[f.name]).cast(f.spark_type).alias(f.name) for f in store.value_fields]
    return batch.where(F.col("fold.last_pos").isNotNull()).select(
        F.col("store_key").alias(layout.KEY),
        *values,
        F.when(alive, F.lit(layout.OP_PUT)).otherwise(F.lit(layout.OP_DELETE)).alias(layout.OP),
        F.lit(store.value_version).cast("int").alias("value_version"),
        F.col("source_partition").cast("int").alias("source_partition"),
        F.col("fold.last_pos").alias("source_offset"),
        F.lit(lineage.epoch).cast("int").alias("epoch"),
        F.lit(batch_id).cast("bigint").alias("batch_id"),
        F.lit(lineage.lineage_id).alias("query_id"),
        # try_multiply: an epoch-ms value past the timestamp range gives a null event time instead
        # of an overflow that would fail, and on every replay fail again, the micro-batch.
        F.when(alive, F.timestamp_micros(F.try_multiply(slot[EVENT_TIME_SLOT], F.lit(1000))))
         .otherwise(F.col("kafka_timestamp")).alias("event_time"),
        F.current_timestamp().alias("write_time"),
        F.lit(layout.segment_of(lineage.epoch, batch_id)).cast("bigint").alias(layout.SEGMENT),
    )


def changelog_writer(settings: Settings, store: StoreDefinition, fold: FoldSpec, lineage: Lineage,
                     listener: BatchListener | None = None):
    path = settings.table_path(store.name, layout.CHANGELOG)
    app_id = lineage.app_id(layout.CHANGELOG)

    def write(batch: DataFrame, batch_id: int) -> None:
        records = changelog_records(batch, store, fold, lineage, batch_id).persist()
        try:
            counts = records.groupBy(layout.OP).count().collect()
            by_op = {row[layout.OP]: int(row["count"]) for row in counts}
            if by_op:
                append_once(records, path, app_id, batch_id)
        finally:
            records.unpersist()
        if listener:
            listener(BatchReport("changelog", batch_id, sum(by_op.values()), by_op))

    return write


def intake_writer(settings: Settings, store: StoreDefinition, lineage: Lineage,
                  listener: BatchListener | None = None):
    """Dead letters and the batch's audit row. One aggregation pass gives the counts and offset
    ranges per partition; the batch is read a second time only when it holds dead letters, which
    is rare, instead of caching every record of every batch."""
    dead_path = settings.table_path(store.name, layout.DEADLETTER)
    intake_path = settings.table_path(store.name, layout.INTAKE)
    columns = [name for name, _ in layout.DEADLETTER_COLUMNS]

    def write(batch: DataFrame, batch_id: int) -> None:
        valid = F.col("reason").isNull()
        per_partition = batch.groupBy("partition").agg(
            F.count(F.lit(1)).alias("records_in"),
            F.count_if(valid).alias("applied"),
            F.count_if(~valid).alias("dead_lettered"),
            F.count_if(valid & F.col("is_tombstone")).alias("tombstones"),
            F.min("offset").alias("lo"), F.max("offset").alias("hi"),
            F.max(F.when(valid & ~F.col("is_tombstone"), F.col(store.event_time_field))).alias("stream_time"),
        ).collect()
        if not per_partition:
            return
        totals = {k: sum(int(r[k]) for r in per_partition)
                  for k in ("records_in", "applied", "dead_lettered", "tombstones")}
        if totals["dead_lettered"]:
            dead = (batch.where(~valid)
                    .withColumn("partition", F.col("partition").cast("int"))
                    .withColumn("value_size", F.col("value_size").cast("int"))
                    .withColumn("batch_id", F.lit(batch_id).cast("bigint"))
                    .withColumn("query_id", F.lit(lineage.lineage_id))
                    .withColumn("write_time", F.current_timestamp())
                    .select(*columns))
            append_once(dead, dead_path, lineage.app_id(layout.DEADLETTER), batch_id)
        offsets = json.dumps({str(r["partition"]): [int(r["lo"]), int(r["hi"])]
                              for r in sorted(per_partition, key=lambda r: r["partition"])})
        # The batch's newest event time per partition (stream time is the running max over batches).
        stream_times = json.dumps({str(r["partition"]): int(r["stream_time"])
                                   for r in sorted(per_partition, key=lambda r: r["partition"])
                                   if r["stream_time"] is not None})
        audit = batch.sparkSession.createDataFrame(
            [(lineage.lineage_id, batch_id, totals["records_in"], totals["applied"],
              totals["dead_lettered"], totals["tombstones"], offsets, 0, stream_times)],
            "query_id string, batch_id bigint, records_in bigint, applied bigint, dead_lettered bigint, "
            "tombstones bigint, offsets string, late bigint, stream_times string",
        ).withColumn("write_time", F.current_timestamp()).select(*[n for n, _ in layout.INTAKE_COLUMNS])
        append_once(audit, intake_path, lineage.app_id(layout.INTAKE), batch_id)
        if listener:
            listener(BatchReport("intake", batch_id, totals["records_in"],
                                 {k: totals[k] for k in ("applied", "dead_lettered", "tombstones")}))

    return write
