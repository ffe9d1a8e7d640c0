"""The live state of a key-value store read from its Spark state store (`format("statestore")`).

A store declared with `changelog: {enabled: false}` writes no changelog, so its state exists only in
the checkpoint's state store; snapshots read it from there, at the checkpoint's newest committed
batch. The state store holds the plan's aggregation buffers (plan.store_stream): per key group the
fold's buffer (first_pos, last_pos, reset_pos, n, one slot per fold slot), then max(source_partition),
max(kafka_timestamp) and the audit aggregates, the last ones sharing names, so fields are taken by
position and the layout is checked before use.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from pyspark.sql import DataFrame, DataFrameReader, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, StructField, StructType, TimestampType

from deltastate.changelog.layout import BATCH_ID, EPOCH, EVENT_TIME, SOURCE_OFFSET, SOURCE_PARTITION, WRITE_TIME
from deltastate.config import Settings
from deltastate.engine.common.lineage import LINEAGE_FILE, load_or_create
from deltastate.engine.common.source import QUERY
from deltastate.engine.keyvalue.plan import AUDIT_PARTITION
from deltastate.errors import CheckpointMismatchError
from deltastate.infra.offset_log import COMMITS, SHUFFLE_PARTITIONS, read_entry
from deltastate.stores.definition import StoreDefinition

_FOLD_FIELDS = ("first_pos", "last_pos", "reset_pos", "n")


@dataclass(frozen=True)
class StateRead:
    """The store's live keys (changelog.reader.state_columns) at one committed batch."""

    rows: DataFrame | None  # None: the store's query has committed no batch yet
    batch_id: int | None
    committed_at: datetime | None  # when that batch's commit landed (naive UTC)


def state_store_reader(spark: SparkSession) -> DataFrameReader:
    """`spark.read.format("statestore")` on a session that can serve it.

    Spark's state store providers report to the driver's StateStoreCoordinator, an RPC endpoint the
    session's StreamingQueryManager registers when it is created (RocksDB reports every snapshot it
    loads, reads included). A session that has never touched streaming, such as a new `deltastate
    inspect` or `snapshot publish` process, has no such endpoint, and every shard's load fails with
    RpcEndpointNotFoundException. Creating the manager registers the coordinator, as starting a
    streaming query would; in a session that already has one this is a lookup."""
    spark.streams  # noqa: B018 - the property creates the JVM StreamingQueryManager
    return spark.read.format("statestore")


def check_state_files(store: str, query_checkpoint: str, batch_id: int) -> None:
    """Refuses, naming what is missing and what to do, a checkpoint whose Spark state cannot be read:
    Spark's reader needs one folder with files per shard (the batch's shuffle partitions, from its
    offset log entry) of the aggregation's operator, and a state folder deleted or copied in part
    would otherwise end in a JVM error per shard."""
    shards = int(read_entry(query_checkpoint, batch_id).conf[SHUFFLE_PARTITIONS])
    state = Path(query_checkpoint, "state", "0")
    missing = [p for p in range(shards) if not (state / str(p)).is_dir()
               or not any(f.name[0].isdigit() for f in (state / str(p)).iterdir())]
    if missing:
        raise CheckpointMismatchError(
            f"store {store!r}: the checkpoint's Spark state has no files for shard(s) {missing} of {shards} under "
            f"{state}, so batch {batch_id}'s state cannot be read; rebuild the checkpoint with "
            f"`deltastate restore {store}`")


def newest_committed_batch(query_checkpoint: str) -> tuple[int, datetime] | None:
    commits = [p for p in Path(query_checkpoint, COMMITS).glob("*") if p.name.isdigit()]
    if not commits:
        return None
    newest = max(commits, key=lambda p: int(p.name))
    at = datetime.fromtimestamp(newest.stat().st_mtime, UTC).replace(tzinfo=None)
    return int(newest.name), at


def read_state(spark: SparkSession, settings: Settings, store: StoreDefinition) -> StateRead:
    """One row per live key: the key, its values, source_partition, source_offset (its latest
    record's offset), epoch, batch_id (the batch read), event_time and write_time (the commit time
    of the batch read: the state store keeps no per-key write time)."""
    checkpoint = settings.checkpoint_path(store.storage)
    if not Path(checkpoint, LINEAGE_FILE).is_file():
        return StateRead(None, None, None)
    lineage = load_or_create(spark, settings, store)
    query_checkpoint = lineage.query_checkpoint(QUERY)
    newest = newest_committed_batch(query_checkpoint)
    if newest is None:
        return StateRead(None, None, None)
    batch_id, committed_at = newest
    check_state_files(store.name, query_checkpoint, batch_id)
    raw = state_store_reader(spark).option("batchId", batch_id).load(query_checkpoint)
    slots = len(store.aggregations) + 1  # the value fields, then the event time
    value = _positional(store, raw.schema["value"].dataType, slots)
    state = raw.select(F.col("key.store_key").alias("key"), F.col(f"key.{AUDIT_PARTITION}").alias("audit"),
                       F.col("value").cast(value).alias("v"))
    live = state.where(F.col("audit").isNull() & F.col("key").isNotNull() & (F.col("v.n") > 0))
    values = [F.col(f"v.s{i}").cast(store.value_field(a.target).spark_type).alias(a.target)
              for i, a in enumerate(store.aggregations)]
    rows = live.select(
        "key", *values,
        F.col("v.source_partition").alias(SOURCE_PARTITION), F.col("v.last_pos").alias(SOURCE_OFFSET),
        F.lit(lineage.epoch).cast("int").alias(EPOCH), F.lit(batch_id).cast("bigint").alias(BATCH_ID),
        F.timestamp_micros(F.try_multiply(F.col(f"v.s{slots - 1}"), F.lit(1000))).alias(EVENT_TIME),
        F.lit(committed_at).cast("timestamp").alias(WRITE_TIME))
    return StateRead(rows, batch_id, committed_at)


def _positional(store: StoreDefinition, value: StructType, slots: int) -> StructType:
    """The state value's struct with unique names: the fold's buffer fields by name, the slot
    fields s0.., then source_partition and kafka_timestamp; the audit aggregates after them keep
    placeholder names."""
    fields = list(value.fields)
    names = [f.name for f in fields]
    expected = [*_FOLD_FIELDS, *(f"s{i}" for i in range(slots))]
    after = len(expected)
    if (names[:after] != expected or len(fields) < after + 2 or not isinstance(fields[after].dataType, IntegerType)
            or not isinstance(fields[after + 1].dataType, TimestampType)):
        raise CheckpointMismatchError(
            f"store {store.name!r}: the state store's value layout {names} is not the key-value plan's "
            f"(fold buffer {expected}, then source partition and Kafka timestamp)")
    renamed = [*expected, SOURCE_PARTITION, "kafka_timestamp", *(f"_a{i}" for i in range(len(fields) - after - 2))]
    return StructType([StructField(n, f.dataType, True) for n, f in zip(renamed, fields, strict=True)])
