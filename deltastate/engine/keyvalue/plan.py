"""The streaming plan of a key-value store: one Kafka source, one query, one parse per record.

Each classified record feeds two groups of one native streaming aggregation (RocksDB state, update
mode: each micro-batch emits exactly the groups it changed, the record cache):
  key group      (store_key, null): the store's fold over the key's valid records;
  audit group    (null, partition): running totals for the intake audit (engine/keyvalue/audit.py).
A dead letter feeds only its partition's audit group (plus one shared null group that stays empty).

A restored store (deltastate restore) adds a second source: a Delta table of the state rebuilt from
the changelog, unioned with the events, each seed row one fold partial positioned before every
event. Keys the seed alone touched are not written back to the changelog.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from deltastate.changelog.layout import APPLIED, AUDIT_COUNTS, DEAD_LETTERED, RECORDS_IN, SOURCE_PARTITION, TOMBSTONES
from deltastate.config import Settings
from deltastate.engine.keyvalue.fold import POS, FoldSpec, arg_columns, event_args, fold_over_args, seed_args
from deltastate.ingest.decode import classify
from deltastate.stores.definition import StoreDefinition


def seed_stream(spark: SparkSession, seed_path: str) -> DataFrame:
    """The restored state as a streaming source: read whole in the first micro-batch, then idle. Delta
    reads at most 1,000 files per micro-batch by default; a seed split over batches would emit a key's
    seed after its events, as a change with no audit row."""
    return spark.readStream.format("delta").option("maxFilesPerTrigger", str(2**31 - 1)).load(seed_path)


def classified_stream(source: DataFrame, settings: Settings, store: StoreDefinition) -> DataFrame:
    return classify(source, store, settings.max_value_bytes)


AUDIT_PARTITION = "audit_partition"
# The audit group's running totals (a sum over no rows is null: read as 0), in engine.common.output.COUNTS order,
# then offsets and stream time.
AUDIT_COLUMNS = (*AUDIT_COUNTS, "audit_lo", "audit_hi", "audit_stream_time")


def _audit_aggregates() -> list:
    """Null for key groups (no audit row feeds them), running totals for audit groups."""
    audit, valid, tomb = F.col("__audit"), F.col("__valid"), F.col("is_tombstone")
    one = F.lit(1).cast("bigint")
    return [
        F.sum(F.when(audit, one)).alias(RECORDS_IN),
        F.sum(F.when(audit & valid, one)).alias(APPLIED),
        F.sum(F.when(audit & ~valid, one)).alias(DEAD_LETTERED),
        F.sum(F.when(audit & valid & tomb, one)).alias(TOMBSTONES),
        F.min(F.when(audit, F.col("offset"))).alias("audit_lo"),
        F.max(F.when(audit, F.col("offset"))).alias("audit_hi"),
        F.max(F.when(audit & valid & ~tomb, F.col("__event_ms"))).alias("audit_stream_time"),
    ]


def store_stream(classified: DataFrame, store: StoreDefinition, fold: FoldSpec,
                 seed: DataFrame | None = None) -> DataFrame:
    """Per changed key: the fold result plus the bookkeeping its changelog record needs; per source
    partition of the batch: the audit group's running totals."""
    valid = F.col("reason").isNull()
    rows = classified.select(
        F.when(valid, F.col("key_str")).alias("store_key"), *event_args(store),
        F.col("partition").cast("int").alias("partition"), F.col("offset"), F.col("kafka_timestamp"),
        valid.alias("__valid"), F.col("is_tombstone"),
        F.when(valid, F.col(store.event_time_field)).cast("bigint").alias("__event_ms"),
    )
    # Two rows per record: its key's row, then its partition's audit row, whose null fold position
    # makes the fold ignore it (the audit aggregates ignore key rows). Spark's partial aggregation
    # folds a task's audit rows into one per partition before the shuffle.
    rows = rows.select("*", F.explode(F.array(F.lit(False), F.lit(True))).alias("__audit"))
    audit = F.col("__audit")
    rows = rows.select(
        F.when(~audit, F.col("store_key")).alias("store_key"),
        F.when(audit, F.col("partition")).alias(AUDIT_PARTITION),
        F.when(~audit, F.col(POS)).alias(POS), *[c for c in arg_columns(fold) if c != POS],
        F.when(~audit & F.col("__valid"), F.col("partition")).alias(SOURCE_PARTITION),
        F.when(~audit & F.col("__valid"), F.col("kafka_timestamp")).alias("kafka_timestamp"),
        "offset", "__valid", "is_tombstone", "__event_ms", "__audit",
    )
    if seed is not None:
        rows = rows.unionByName(seed.select(
            F.col("key").alias("store_key"), F.lit(None).cast("int").alias(AUDIT_PARTITION), *seed_args(store),
            F.col(SOURCE_PARTITION).cast("int").alias(SOURCE_PARTITION),
            F.lit(None).cast("timestamp").alias("kafka_timestamp"), F.lit(None).cast("bigint").alias("offset"),
            F.lit(True).alias("__valid"), F.lit(False).alias("is_tombstone"),
            F.lit(None).cast("bigint").alias("__event_ms"), F.lit(False).alias("__audit")))
    folded = (rows.groupBy("store_key", AUDIT_PARTITION)
              .agg(fold_over_args(fold).alias("fold"),
                   F.max(SOURCE_PARTITION).alias(SOURCE_PARTITION),
                   F.max("kafka_timestamp").alias("kafka_timestamp"),
                   *_audit_aggregates()))
    # A key whose only input so far is its seed row (last position before every offset) has not
    # changed: a null fold makes the writer skip it, as it skips the dead letters' group.
    return folded.select("store_key", AUDIT_PARTITION,
                         F.when(F.col("fold.last_pos") >= 0, F.col("fold")).alias("fold"),
                         SOURCE_PARTITION, "kafka_timestamp", *AUDIT_COLUMNS)
