"""Runs a store: starts its intake and changelog queries and waits for them.

once        Trigger.AvailableNow: process everything in the topic at start, commit, stop.
continuous  a processing-time trigger (the commit interval) until SIGINT/SIGTERM or `stop_after`.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from deltastate.changelog.tables import ensure_tables
from deltastate.config import Settings
from deltastate.engine.fold import register_fold
from deltastate.engine.lineage import Lineage, load_or_create
from deltastate.engine.plan import changelog_stream, classified_stream, source_stream
from deltastate.engine.writer import (
    BatchListener,
    BatchReport,
    changelog_writer,
    intake_writer,
)
from deltastate.infra.spark import get_spark
from deltastate.stores import load_store


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


def run_store(settings: Settings, store_name: str, *, once: bool = True, trigger: str = "1 second",
              topic: str | None = None, max_offsets_per_trigger: int | None = None,
              listener: BatchListener | None = None, stop_after: float | None = None,
              stop_event: threading.Event | None = None) -> RunResult:
    store = load_store(settings, store_name)
    spark = get_spark(settings, f"deltastate-{store_name}")
    ensure_tables(spark, settings, store)
    lineage = load_or_create(spark, settings, store)
    fold = register_fold(spark, store)
    result = RunResult(store=store_name, lineage=lineage, seconds=0.0)
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

    source = source_stream(spark, settings, topic or store.source.topic, max_offsets_per_trigger)
    classified = classified_stream(source, settings, store)

    def start(df, name: str, writer: Callable, mode: str):
        w = (df.writeStream.queryName(f"{store_name}-{name}")
             .option("checkpointLocation", lineage.query_checkpoint(name))
             .outputMode(mode).foreachBatch(writer))
        w = w.trigger(availableNow=True) if once else w.trigger(processingTime=trigger)
        return w.start()

    started = time.monotonic()
    queries = [
        start(classified, "intake", intake_writer(settings, store, lineage, on_batch), "append"),
        start(changelog_stream(classified, store, fold), "changelog",
              changelog_writer(settings, store, fold, lineage, on_batch), "update"),
    ]
    try:
        if once:
            for q in queries:
                q.awaitTermination()
        else:
            _wait_continuous(queries, stop_after, stop_event)
    finally:
        for q in queries:
            if q.isActive:
                q.stop()
    for q in queries:
        if q.exception() is not None:
            raise q.exception()
        result.progress[q.name] = [dict(p) if not isinstance(p, dict) else p for p in q.recentProgress]
    result.seconds = time.monotonic() - started
    return result


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
