"""Wires a store run to its exporter: the batch listener the engine calls, Spark's progress events,
and the way its metrics leave the process (served for a continuous run, pushed for a --once run)."""

from __future__ import annotations

import atexit
import logging
import time
from functools import partial

from pyspark.sql import SparkSession

from deltastate.config import Settings
from deltastate.engine.common.lineage import Lineage
from deltastate.engine.common.report import BatchListener, BatchReport
from deltastate.metrics import exposition, progress
from deltastate.metrics import names as m
from deltastate.metrics.exporter import StoreExporter
from deltastate.stores.definition import StoreDefinition

log = logging.getLogger(__name__)
_live: dict[str, StoreExporter] = {}  # query name prefix -> the exporter of the run using it


def memtable_bytes(spark: SparkSession, checkpoint: str) -> int:
    """Bytes in RocksDB's memtables of the state partitions under the checkpoint that this JVM holds
    (jvm/src/io/deltastate/RocksDbMemory.java); -1 when it holds none or Spark hides them."""
    try:
        return int(spark._jvm.io.deltastate.RocksDbMemory.memtableBytes(checkpoint))
    except Exception:  # a stopped session or a JVM without deltastate's functions: no figure
        return -1


def watch_run(spark: SparkSession, settings: Settings, store: StoreDefinition, lineage: Lineage, topic: str,
              once: bool, on_batch: BatchListener) -> BatchListener:
    """The listener to give the store's writer: on_batch, after the batch's figures are recorded."""
    if once and not settings.pushgateway:
        return on_batch  # a --once run's metrics only leave the process by a push: nothing to keep
    prefix = f"{store.name}-"
    previous = _live.pop(prefix, None)
    if previous is not None:  # an earlier run of the store in this process has ended
        previous.close()
    try:
        exporter = StoreExporter(settings, store, lineage, topic, memtable_bytes=partial(memtable_bytes, spark, lineage.checkpoint))
    except Exception:  # no metrics is better than no store (an unreachable broker fails the run itself)
        log.exception("store %s: metrics off for this run", store.name)
        return on_batch
    _live[prefix] = exporter
    progress.listen(spark)
    # A continuous run's exporter stops with its query; a --once run's at exit (after its last push).
    progress.ROUTER.add(prefix, exporter.on_progress, None if once else exporter.close)
    started = time.time()

    def done() -> None:
        m.JOB_SECONDS.labels("run", store.name).set(time.time() - started)
        m.JOB_DONE.labels("run", store.name).set(time.time())

    if once:
        # A --once run may end right after its last batch: each batch's figures are recorded and
        # pushed before the batch returns, and the last progress event is pushed at exit.
        def pushed(report: BatchReport) -> None:
            exporter.guarded(exporter.record_batch, report)
            done()
            exposition.push(settings, "run", store.name)
            on_batch(report)

        def at_exit() -> None:
            exporter.close()
            exposition.push(settings, "run", store.name)

        atexit.register(at_exit)
        return pushed
    exposition.serve(settings)
    exporter.start_refreshing()
    exporter.after_batch.append(done)

    def queued(report: BatchReport) -> None:
        exporter.on_batch(report)
        on_batch(report)

    return queued
