"""Runs a store: checks and claims its checkpoint, starts the store type's streaming query
(checkpoint folder `stream`) and waits for it.

once        Trigger.AvailableNow: process everything in the topic at start, commit, stop.
continuous  a processing-time trigger (the commit interval) until SIGINT/SIGTERM or `stop_after`.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

from deltastate import metrics
from deltastate.changelog.audit_log import flush_audits
from deltastate.changelog.batch_commit import BatchCommitter
from deltastate.changelog.layout import CHANGELOG
from deltastate.changelog.tables import ensure_tables
from deltastate.config import Settings
from deltastate.engine.common.checkpoint_check import drop_orphan_temp_files, verify_checkpoint
from deltastate.engine.common.lineage import load_or_create
from deltastate.engine.common.report import BatchListener, RunResult, counting_listener
from deltastate.engine.common.resume import ResumePlan, resume_plan_for
from deltastate.engine.common.source import source_stream
from deltastate.engine.common.writer_lock import claim_checkpoint
from deltastate.engine.keyvalue.start import start_keyvalue
from deltastate.engine.windowed.start import start_windowed
from deltastate.infra.spark import get_spark
from deltastate.infra.topics import partition_count
from deltastate.maintenance.log_retention import maintain_logs
from deltastate.stores import load_store
from deltastate.stores.backends import backend_of
from deltastate.stores.definition import StoreDefinition
from deltastate.stores.fence import check_may_write, fenced

log = logging.getLogger(__name__)

# The start function of each engine package a backend names (StoreBackend.engine).
ENGINE_STARTS = {"keyvalue": start_keyvalue, "windowed": start_windowed}


def run_store(settings: Settings, store_name: str, *, once: bool = True, trigger: str = "1 second",
              topic: str | None = None, max_offsets_per_trigger: int | None = None,
              listener: BatchListener | None = None, stop_after: float | None = None,
              stop_event: threading.Event | None = None, resume: ResumePlan | None = None,
              version: int | None = None) -> RunResult:
    """resume: where a new checkpoint starts (deltastate restore saves one beside the checkpoint it
    creates, and every later run of that checkpoint reads it back). version: the value schema
    version to run (default: the current one); a version a migration builds runs beside the current
    one, each in its own checkpoint, and a version that is neither current nor being built is refused."""
    store = load_store(settings, store_name, version)
    check_may_write(settings, store)
    claim_checkpoint(settings, store.storage)  # one writer per checkpoint: held while this process lives
    # Under the lock no live writer owns Spark's temp files: a killed run's leftovers can go.
    drop_orphan_temp_files(Path(settings.checkpoint_path(store.storage)))
    spark = get_spark(settings, f"deltastate-{store_name}")
    ensure_tables(spark, settings, store)
    # Audits committed with the changelog but not yet copied (a run that died) reach the intake
    # table before anything reads it: the checkpoint check, the run's ledger, its stream times.
    flush_audits(spark, settings, store)
    verify_checkpoint(spark, settings, store)
    lineage = load_or_create(spark, settings, store)
    resume = resume_plan_for(lineage, resume)
    topic = topic or store.source.topic
    # A restored checkpoint reads Kafka from the audited offsets; Spark wants every partition of the
    # topic named, so the count comes from the broker (the topic read may not be the declared one).
    starting = ("earliest" if resume is None or not resume.starting_offsets else
                resume.kafka_starting_offsets(topic, partition_count(settings.kafka_bootstrap, topic)))
    source = source_stream(spark, settings, topic, max_offsets_per_trigger, starting)
    result = RunResult(store=store_name, lineage=lineage)
    on_batch = metrics.watch_run(spark, settings, store, lineage, topic, once, counting_listener(result, listener))
    start = ENGINE_STARTS[backend_of(store).engine]
    committer = BatchCommitter(settings, store, lineage.app_id(CHANGELOG))
    writer = start(spark, settings, store, lineage, source, topic, on_batch, resume, committer)
    writer = writer.trigger(availableNow=True) if once else writer.trigger(processingTime=trigger)
    started = time.monotonic()
    with store.state.applied_to(spark):  # the store's own state provider and RocksDB options
        query = writer.start()
    result.state_conf = store.state.started_with(query)
    failure: BaseException | None = None
    try:
        if once:
            query.awaitTermination()
        else:
            result.stopped_by = wait_continuous(query, stop_after, stop_event, lambda: fenced(settings, store),
                                                lambda: beside_stream(spark, settings, store, committer))
    except BaseException as e:
        failure = e
        raise
    finally:
        if query.isActive:
            stop_between_batches(query)
        failure = failure or query.exception()  # a continuous run's query fails without raising here
        # The run's last audits, before anyone reads its history.
        copy_after_run(store.name, lambda: flush_audits(spark, settings, store), failure)
        maintain_logs(spark, settings, store, clean_now=True)
    if failure is not None:
        raise failure
    result.progress = [dict(p) if not isinstance(p, dict) else p for p in query.recentProgress]
    result.seconds = time.monotonic() - started
    return result


def beside_stream(spark, settings: Settings, store: StoreDefinition, committer: BatchCommitter) -> None:
    """A continuous run's own thread, between its checks: the audit copy when one is due, and the
    changelog's and intake's Delta checkpoints and the logs' cleanup when due (changelog/checkpoints.py,
    changelog/log_cleanup.py), so no batch pays any of them."""
    committer.maybe_copy(spark)
    maintain_logs(spark, settings, store)


def stop_between_batches(query, wait_seconds: float = 15.0) -> None:
    """Stops the query once its running batch has ended (or after wait_seconds). Stopping interrupts
    whatever the stream thread does: inside a batch's write, Spark aborts the job and logs it as an
    error with a trace, and the files written so far are left for VACUUM (the batch replays in the next
    run, so nothing is lost). A batch that ended is seen either as no trigger running or as a newer
    progress: a batch that starts right after another is then still taking its offsets."""
    deadline = time.monotonic() + wait_seconds
    last = query.lastProgress
    ended_before = last["batchId"] if last else None
    while query.isActive and time.monotonic() < deadline:
        last = query.lastProgress
        if not query.status["isTriggerActive"] or (last and last["batchId"] != ended_before):
            break
        time.sleep(0.02)
    query.stop()


def copy_after_run(store: str, copy: Callable[[], None], failure: BaseException | None) -> None:
    """Runs the audit copy that ends a run. After a failed run, a failing copy must not hide why the
    run failed: its error is logged and noted on the run's exception, and the next run's start
    copies what is left (flush_audits reads the changelog's commits, so nothing is lost). After a
    run that succeeded, a failing copy fails the run."""
    if failure is None:
        copy()
        return
    try:
        copy()
    except Exception as e:  # noqa: BLE001 - reported beside the run's own failure, which is raised
        log.warning("store %r: copying the run's audits failed after the run failed (%s); the next run's "
                    "start copies them", store, e)
        failure.add_note(f"store {store!r}: copying the run's audits also failed ({e}); the next run copies them")


def wait_continuous(query, stop_after: float | None, stop_event: threading.Event | None,
                    fence: Callable[[], str | None] = lambda: None,
                    tick: Callable[[], None] = lambda: None) -> str | None:
    """Until the query fails, stop_after seconds pass, stop_event is set, SIGINT/SIGTERM arrives, or
    `fence` gives a reason to stop (a migration's cutover or rollback moved the store off this version),
    which is returned. `tick` runs at every check (the audit copy)."""
    stop = stop_event or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
    deadline = None if stop_after is None else time.monotonic() + stop_after
    while not stop.is_set():
        if not query.isActive:
            break  # a failed query ends the run; its exception is raised by the caller
        if deadline is not None and time.monotonic() >= deadline:
            break
        reason = fence()
        if reason is not None:
            log.info(reason)
            return reason
        tick()
        stop.wait(0.5)
    return None
