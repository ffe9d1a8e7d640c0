"""Stream time within a micro-batch, kept by the task that reads each Kafka partition (no shuffle):
each record's stream time equals a running maximum over its partition in offset order, computed here
in Python from the produced records; a source that splits a partition over tasks is detected, and
records out of offset order within a task fail rather than get a wrong time."""

import json
import random

import pytest
from py4j.protocol import Py4JJavaError
from pyspark.sql import functions as F

from deltastate.engine.windowed.records import batch_records
from deltastate.engine.windowed.stream_time import READ_TASK, STREAM_TIME, split_partitions
from deltastate.ingest.decode import classify
from deltastate.ingest.partitioner import partition_for
from deltastate.ingest.producer import ensure_topic, produce_records
from deltastate.stores import load_store

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

PARTITIONS = 4


def _clicks(n: int, seed: int) -> list[tuple[bytes, bytes]]:
    """Clicks with jittered times (out of order), some invalid (they must not move stream time)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        user = f"u{rng.randrange(12)}"
        ts = 1_700_000_000_000 + i * 50 + rng.randrange(-4_000, 4_000)
        doc = {"user_id": user, "page": "/a", "ts": ts}
        if rng.random() < 0.05:
            doc["page"] = 7  # a schema violation: dead-lettered, no stream time of its own
        out.append((user.encode(), json.dumps(doc).encode()))
    return out


def _expected(records: list[tuple[bytes, bytes]], before: dict[int, int]) -> dict[tuple[int, int], int | None]:
    running: dict[int, int | None] = {p: before.get(p) for p in range(PARTITIONS)}
    next_offset = {p: 0 for p in range(PARTITIONS)}
    out = {}
    for key, value in records:
        p = partition_for(key, PARTITIONS)
        doc = json.loads(value)
        if isinstance(doc["page"], str):
            running[p] = doc["ts"] if running[p] is None else max(running[p], doc["ts"])
        out[(p, next_offset[p])] = running[p]
        next_offset[p] += 1
    return out


def _read(spark, broker: str, topic: str, **options: str):
    reader = (spark.read.format("kafka").option("kafka.bootstrap.servers", broker)
              .option("subscribe", topic).option("startingOffsets", "earliest"))
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def test_each_record_gets_its_partitions_running_max_in_offset_order_and_splits_are_detected(
        spark, broker, topic, make_settings) -> None:
    settings = make_settings()
    store = load_store(settings, "user_sessions")  # session stores keep each record's stream time
    records = _clicks(3_000, seed=11)
    ensure_topic(broker, topic, PARTITIONS)
    produce_records(broker, topic, records)
    before = {0: 1_700_000_100_000, 2: 1}  # partition 0 starts ahead of its first records
    timed = batch_records(classify(_read(spark, broker, topic), store, settings.max_value_bytes), store, before)
    rows = timed.select("partition", "offset", STREAM_TIME, READ_TASK).collect()
    expected = _expected(records, before)
    got = {(r["partition"], r["offset"]): r[STREAM_TIME] for r in rows}
    assert got == expected
    spans = {p: (lo, hi) for p, lo, hi in
             timed.groupBy("partition").agg(F.min(READ_TASK), F.max(READ_TASK)).collect()}
    assert split_partitions(spans) == []

    split = batch_records(classify(_read(spark, broker, topic, minPartitions="8"), store, settings.max_value_bytes),
                          store, {})
    spans = {p: (lo, hi) for p, lo, hi in
             split.groupBy("partition").agg(F.min(READ_TASK), F.max(READ_TASK)).collect()}
    assert split_partitions(spans), "minPartitions=8 splits 4 partitions over 8 tasks"


def test_records_out_of_offset_order_within_a_task_fail_the_batch(spark, make_settings) -> None:
    settings = make_settings()
    store = load_store(settings, "user_sessions")
    value = json.dumps({"user_id": "u", "page": "/a", "ts": 5}).encode()
    rows = [("clicks", 0, offset, None, b"u", value) for offset in (3, 1, 2)]
    raw = (spark.createDataFrame(rows, "topic string, partition int, offset long, timestamp timestamp, "
                                       "key binary, value binary").coalesce(1))
    timed = batch_records(classify(raw, store, settings.max_value_bytes), store, {})
    with pytest.raises(Py4JJavaError, match="offset order"):
        timed.select(STREAM_TIME).collect()
