"""Runs a window or session store: one streaming query whose micro-batches windowed_batch applies.

Unlike key-value stores (Spark's RocksDB state), these stores keep their state in the
changelog and decide lateness per record from per-partition stream time, Kafka Streams' rule; both
need the whole micro-batch at once, so the one query classifies, merges and writes in foreachBatch.
"""

from __future__ import annotations

import time

from pyspark.sql import SparkSession

from deltastate.config import Settings
from deltastate.engine.lineage import Lineage
from deltastate.engine.plan import QUERY, source_stream
from deltastate.engine.resume import ResumePlan
from deltastate.engine.windowed_batch import windowed_writer
from deltastate.engine.writer import BatchListener
from deltastate.ingest.decode import classify
from deltastate.stores.definition import StoreDefinition


def start_windowed(spark: SparkSession, settings: Settings, store: StoreDefinition, lineage: Lineage, *,
                   once: bool, trigger: str, topic: str | None, max_offsets_per_trigger: int | None,
                   listener: BatchListener | None, resume: ResumePlan | None = None):
    """Starts the store's query and returns it (the caller waits and stops it)."""
    topic = topic or store.source.topic
    start = (resume.kafka_starting_offsets(topic, store.source.partitions) if resume and resume.starting_offsets
             else "earliest")
    source = source_stream(spark, settings, topic, max_offsets_per_trigger, start)
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
    from deltastate.engine.runner import RunResult, _wait_continuous, counting_listener

    result = RunResult(store=store.name, lineage=lineage, seconds=0.0)
    on_batch = counting_listener(result, listener)

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
