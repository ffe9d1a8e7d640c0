"""Runs a store: starts its streaming query (checkpoint folder `stream`) and waits for it.

once        Trigger.AvailableNow: process everything in the topic at start, commit, stop.
continuous  a processing-time trigger (the commit interval) until SIGINT/SIGTERM or `stop_after`.
"""

from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from deltastate.changelog.layout import is_windowed
from deltastate.changelog.tables import ensure_tables
from deltastate.config import Settings
from deltastate.engine.fold import register_fold
from deltastate.engine.lineage import Lineage, load_or_create
from deltastate.engine.plan import QUERY, classified_stream, seed_stream, source_stream, store_stream
from deltastate.engine.resume import ResumePlan, load_plan, save_plan, topic_partitions
from deltastate.engine.writer import BatchListener, BatchReport, store_writer
from deltastate.errors import CheckpointMismatchError
from deltastate.infra.spark import get_spark
from deltastate.maintenance.checkpoint import any_query_started, drop_orphan_temp_files, verify_checkpoint
from deltastate.engine.writer_lock import claim_checkpoint
from deltastate.stores import load_store
from deltastate.stores.state import applied_to, query_state_conf


@dataclass
class RunResult:
    store: str
    lineage: Lineage
    seconds: float
    batches: dict[str, int] = field(default_factory=dict)
    records_in: int = 0
    applied: int = 0
    dead_lettered: int = 0
    changelog_records: int = 0
    progress: dict[str, list[dict]] = field(default_factory=dict)
    # The state keys the store's query started with (read back from the query's own session).
    state_conf: dict[str, str | None] = field(default_factory=dict)


def run_store(settings: Settings, store_name: str, *, once: bool = True, trigger: str = "1 second",
              topic: str | None = None, max_offsets_per_trigger: int | None = None,
              listener: BatchListener | None = None, stop_after: float | None = None,
              stop_event: threading.Event | None = None, resume: ResumePlan | None = None) -> RunResult:
    """resume: where a new checkpoint starts (deltastate restore saves one beside the checkpoint it
    creates, and every later run of that checkpoint reads it back)."""
    claim_checkpoint(settings, store_name)  # one writer per checkpoint: held while this process lives
    store = load_store(settings, store_name)
    # Under the lock no live writer owns Spark's temp files: a killed run's leftovers can go.
    drop_orphan_temp_files(Path(settings.checkpoint_path(store.name)))
    spark = get_spark(settings, f"deltastate-{store_name}")
    ensure_tables(spark, settings, store)
    verify_checkpoint(spark, settings, store)
    lineage = load_or_create(spark, settings, store)
    resume = _resume_plan(lineage, resume)
    if is_windowed(store):  # window and session stores: one query, their state lives in the changelog
        from deltastate.engine.windowed_runner import run_windowed

        return run_windowed(spark, settings, store, lineage, once=once, trigger=trigger, topic=topic,
                            max_offsets_per_trigger=max_offsets_per_trigger, listener=listener,
                            stop_after=stop_after, stop_event=stop_event, resume=resume)
    fold = register_fold(spark, store)
    result = RunResult(store=store_name, lineage=lineage, seconds=0.0)
    on_batch = counting_listener(result, listener)

    topic = topic or store.source.topic
    starting = "earliest"
    seed = None
    if resume is not None:  # a restored checkpoint: its state is seeded, Kafka read from the audited offsets
        starting = resume.kafka_starting_offsets(topic, topic_partitions(settings.kafka_bootstrap, topic))
        seed = seed_stream(spark, resume.seed_path) if resume.seed_path else None
    classified = classified_stream(source_stream(spark, settings, topic, max_offsets_per_trigger, starting),
                                   settings, store)
    writer = (store_stream(classified, store, fold, seed).writeStream.queryName(f"{store_name}-{QUERY}")
              .option("checkpointLocation", lineage.query_checkpoint(QUERY))
              .outputMode("update").foreachBatch(store_writer(settings, store, fold, lineage, topic, on_batch)))
    writer = writer.trigger(availableNow=True) if once else writer.trigger(processingTime=trigger)
    started = time.monotonic()
    with applied_to(spark, store.state):  # the store's own state provider and RocksDB options
        query = writer.start()
    result.state_conf = query_state_conf(query, store.state)
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


def counting_listener(result: RunResult, listener: BatchListener | None) -> BatchListener:
    """A batch listener that adds each report to result's counts (reports come from the query's
    own thread), then passes it on."""
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

    return on_batch


def _resume_plan(lineage: Lineage, given: ResumePlan | None) -> ResumePlan | None:
    """The checkpoint's saved plan wins (its queries were built from it); a plan given for a
    checkpoint whose queries have not started yet is saved so that later runs rebuild the same plan."""
    saved = load_plan(lineage.checkpoint)
    if saved is not None:
        if given is not None and given != saved:
            raise CheckpointMismatchError(
                f"store {lineage.store!r}: checkpoint {lineage.checkpoint} was restored with another resume "
                "plan than the one given; run without one, or `deltastate restore` again")
        return saved
    if given is not None:
        if any_query_started(lineage.checkpoint):
            raise CheckpointMismatchError(
                f"store {lineage.store!r}: checkpoint {lineage.checkpoint} already started without a resume "
                f"plan; a plan applies only to a new checkpoint (`deltastate restore {lineage.store}`)")
        save_plan(lineage.checkpoint, given)
    return given


def _wait_continuous(queries, stop_after: float | None, stop_event: threading.Event | None) -> None:
    stop = stop_event or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
    deadline = None if stop_after is None else time.monotonic() + stop_after
    while not stop.is_set():
        if any(not q.isActive for q in queries):
            break  # a failed query ends the run; its exception is raised by the caller
        if deadline is not None and time.monotonic() >= deadline:
            break
        stop.wait(0.5)
