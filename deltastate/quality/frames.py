"""The frames the suites check, each read from where the data really is: a sample of the store's
Kafka topic, the Delta changelog at a pinned version, a snapshot's DuckDB table."""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deltastate.changelog.layout import BATCH_ID, CHANGELOG, EPOCH, LINEAGE_ID, OP, OP_PUT, WRITE_TIME, store_key_columns
from deltastate.config import Settings
from deltastate.stores.definition import StoreDefinition

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import SparkSession

TS_MIN_MS = int(datetime(2000, 1, 1, tzinfo=UTC).timestamp() * 1000)
DAY_MS = 86_400_000


def event_time_bounds(now: datetime | None = None) -> dict[str, int]:
    """A sane event time: after 2000-01-01 and at most one day ahead of now (clock skew)."""
    now_ms = int((now or datetime.now(UTC)).timestamp() * 1000)
    return {"ts_min_ms": TS_MIN_MS, "ts_max_ms": now_ms + DAY_MS}


def batch_order_ok(frame: pd.DataFrame) -> pd.Series:
    """Per streaming query, ordered by write time: True where the batch id is not below any batch id
    the query wrote before (a query that went back would have replayed or lost batches)."""
    ordered = frame.sort_values([LINEAGE_ID, WRITE_TIME, BATCH_ID], kind="stable")
    earlier_max = ordered.groupby(LINEAGE_ID)[BATCH_ID].cummax().groupby(ordered[LINEAGE_ID]).shift(1)
    ok = earlier_max.isna() | (ordered[BATCH_ID] >= earlier_max)
    return ok.reindex(frame.index).astype(bool)


def changelog_frame(spark: SparkSession, settings: Settings, store: StoreDefinition, version: int) -> pd.DataFrame:
    """The changelog columns the changelog suite checks, at one Delta version, plus _batch_order_ok."""
    cols = [*store_key_columns(store), OP, BATCH_ID, LINEAGE_ID, WRITE_TIME]
    frame = (spark.read.format("delta").option("versionAsOf", version)
             .load(settings.table_path(store.storage, CHANGELOG)).select(*cols).toPandas())
    frame["_batch_order_ok"] = batch_order_ok(frame) if len(frame) else []
    return frame


def live_keys(spark: SparkSession, settings: Settings, store: StoreDefinition, version: int) -> int:
    """How many store keys are live at a changelog version, counted with a window ranking rather
    than the max_by reduction the snapshot itself is built with, so the two can disagree."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    keys = list(store_key_columns(store))
    ranked = Window.partitionBy(*keys).orderBy(F.col(EPOCH).desc(), F.col(BATCH_ID).desc())
    table = spark.read.format("delta").option("versionAsOf", version).load(settings.table_path(store.storage, CHANGELOG))
    return int(table.withColumn("_rank", F.row_number().over(ranked))
               .where((F.col("_rank") == 1) & (F.col(OP) == OP_PUT)).count())


def snapshot_frame(path: Path, store: StoreDefinition) -> pd.DataFrame:
    import duckdb

    con = duckdb.connect(str(path), read_only=True)
    try:
        return con.sql(f'SELECT * FROM "{store.name}"').df()
    finally:
        con.close()


def _event_row(store: StoreDefinition, key: bytes | None, value: bytes | None) -> dict[str, Any] | None:
    if value is None:
        return None  # a tombstone is not an event
    try:
        doc = json.loads(value)
    except (UnicodeDecodeError, json.JSONDecodeError):
        doc = {}
    doc = doc if isinstance(doc, dict) else {}
    row = {f: doc.get(f) for f in store.source.properties}
    row["_kafka_key"] = None if key is None else key.decode("utf-8", "replace")
    row["_key_matches"] = key is not None and str(doc.get(store.key_field)) == row["_kafka_key"]
    return row


def events_frame(settings: Settings, store: StoreDefinition, per_partition: int = 500,
                 topic: str | None = None, timeout_s: float = 20.0) -> pd.DataFrame:
    """The newest records of each partition of the store's topic, one row per non-tombstone."""
    import pandas as pd
    from confluent_kafka import OFFSET_END, Consumer, TopicPartition

    from deltastate.infra.topics import partitions_of, watermarks_of

    name = topic or store.source.topic
    consumer = Consumer({"bootstrap.servers": settings.kafka_bootstrap, "enable.auto.commit": False,
                         "group.id": f"deltastate-quality-{uuid.uuid4().hex[:8]}"})
    rows: list[dict[str, Any]] = []
    try:
        wanted: dict[int, int] = {}
        assignment = []
        for partition in partitions_of(consumer, name, timeout_s):
            low, high = watermarks_of(consumer, name, partition, timeout_s)
            if high > low:
                start = max(low, high - per_partition)
                wanted[partition] = high
                assignment.append(TopicPartition(name, partition, start))
        consumer.assign(assignment or [TopicPartition(name, 0, OFFSET_END)])
        deadline = time.monotonic() + timeout_s
        while wanted and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                if msg.error() is not None:
                    continue
                if msg.offset() + 1 >= wanted.get(msg.partition(), 0):
                    wanted.pop(msg.partition(), None)
                row = _event_row(store, msg.key(), msg.value())
                if row is not None:
                    rows.append(row)
    finally:
        consumer.close()
    columns = [*store.source.properties, "_kafka_key", "_key_matches"]
    return pd.DataFrame(rows, columns=columns)
