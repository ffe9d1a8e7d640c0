"""Runs a window or session store: one streaming query whose micro-batches windowed_batch applies.

Unlike key-value stores (Spark's RocksDB state, two queries), these stores keep their state in the
changelog and decide lateness per record from per-partition stream time, Kafka Streams' rule; both
need the whole micro-batch at once, so the one query classifies, merges and writes in foreachBatch.
"""

from __future__ import annotations

import threading
import time

from pyspark.sql import DataFrame, SparkSession

from deltastate.config import Settings
from deltastate.engine.lineage import Lineage
from deltastate.engine.resume import ResumePlan
from deltastate.engine.windowed_batch import windowed_writer
from deltastate.engine.writer import BatchListener, BatchReport
from deltastate.ingest.decode import classify
from deltastate.stores.definition import StoreDefinition

QUERY = "stream"


def kafka_source(spark: SparkSession, settings: Settings, topic: str, max_offsets_per_trigger: int | None,
                 resume: ResumePlan | None, store_partitions: int | None = None) -> DataFrame:
    start = (resume.kafka_starting_offsets(topic, store_partitions) if resume and resume.starting_offsets
             else "earliest")
    reader = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", settings.kafka_bootstrap)
              .option("subscribe", topic)
              .option("startingOffsets", start)
              .option("failOnDataLoss", "true"))
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    return reader.load()


def start_windowed(spark: SparkSession, settings: Settings, store: StoreDefinition, lineage: Lineage, *,
                   once: bool, trigger: str, topic: str | None, max_offsets_per_trigger: int | None,
                   listener: BatchListener | None, resume: ResumePlan | None = None):
    """Starts the store's query and returns it (the caller waits and stops it)."""
    source = kafka_source(spark, settings, topic or store.source.topic, max_offsets_per_trigger, resume,
                          store.source.partitions)
    classified = classify(source, store, settings.max_value_bytes)
    writer = (classified.writeStream.queryName(f"{store.name}-{QUERY}")
              .option("checkpointLocation", lineage.query_checkpoint(QUERY))
              .outputMode("append").foreachBatch(windowed_writer(settings, store, lineage, listener)))
    writer = writer.trigger(availableNow=True) if once else writer.trigger(processingTime=trigger)
    started = time.monotonic()
    query = writer.start()
    return query, started


def run_windowed(spark: SparkSession, settings: Settings, store: StoreDefinition, lineage: Lineage, *,
                 once: bool, trigger: str, topic: str | None, max_offsets_per_trigger: int | None,
                 listener: BatchListener | None, stop_after: float | None, stop_event,
                 resume: ResumePlan | None):
    from deltastate.engine.runner import RunResult, _wait_continuous

    result = RunResult(store=store.name, lineage=lineage, seconds=0.0)
    lock = threading.Lock()

    def on_batch(report: BatchReport) -> None:
        with lock:
            result.batches[report.query] = result.batches.get(report.query, 0) + 1
            if report.query == "intake":
                result.records_in += report.records
                result.applied += report.detail.get("applied", 0)
                result.dead_lettered += report.detail.get("dead_lettered", 0)
            else:
                result.changelog_records += report.records
        if listener:
            listener(report)

    query, started = start_windowed(spark, settings, store, lineage, once=once, trigger=trigger, topic=topic,
                                    max_offsets_per_trigger=max_offsets_per_trigger, listener=on_batch,
                                    resume=resume)
    try:
        if once:
            query.awaitTermination()
        else:
            _wait_continuous([query], stop_after, stop_event)
    finally:
        if query.isActive:
            query.stop()
    if query.exception() is not None:
        raise query.exception()
    result.progress[query.name] = [dict(p) if not isinstance(p, dict) else p for p in query.recentProgress]
    result.seconds = time.monotonic() - started
    return result
