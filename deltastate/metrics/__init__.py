"""Prometheus metrics of every store job and of the query service.

  names.py        every metric family, once (the job registry JOBS; the service's names)
  runs.py         a store run: its batch listener, Spark progress, served or pushed
  exporter.py     a run's figures from batch reports, audit rows, dead letters and the broker
  audit_tail.py   a run's new audit rows and dead letters, from the Delta log (no Spark job)
  positions.py    the source topic's end offsets and produce times
  progress.py     StreamingQueryProgress (RocksDB customMetrics included) as figures
  jobs.py         restore, compaction, cleanup, migration and snapshot reports as figures
  exposition.py   /metrics over HTTP, or a push to the Pushgateway
  service.py      the query service's registry
  otlp_bridge.py  Airflow's OpenTelemetry metrics, served for Prometheus

The job modules call the functions below, one call each where their report is made; this module
imports nothing heavy until one is called (the query service imports the package too).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from deltastate.config import Settings

R = TypeVar("R")


def watch_run(spark: Any, settings: Settings, store: Any, lineage: Any, topic: str, once: bool,
              on_batch: Any) -> Any:
    """The batch listener a store run gives its writer (see runs.py)."""
    from deltastate.metrics.runs import watch_run as watch

    return watch(spark, settings, store, lineage, topic, once, on_batch)


def restore_listener(settings: Settings, listener: Any) -> Any:
    """listener, wrapped so the restore's progress is exported as it goes."""
    from deltastate.metrics.jobs import MeteredRestore

    return MeteredRestore(settings, listener, total=_live_records(settings))


def _live_records(settings: Settings):
    def total(store_name: str, version: int) -> int | None:
        from pyspark.sql import SparkSession

        from deltastate.changelog.reader import latest_state
        from deltastate.stores import load_store

        spark = SparkSession.getActiveSession()
        if spark is None:
            return None
        # Cached: restore reads the same state at the same version next, and finds it here.
        return int(latest_state(spark, settings, load_store(settings, store_name), version).persist().count())

    return total


def record_compaction(settings: Settings, report: R) -> R:
    from deltastate.metrics.jobs import record_compaction as record

    return record(settings, report)  # type: ignore[arg-type,return-value]


def record_cleanup(settings: Settings, report: R) -> R:
    from deltastate.metrics.jobs import record_cleanup as record

    return record(settings, report)  # type: ignore[arg-type,return-value]


def record_migration(settings: Settings, report: R) -> R:
    from deltastate.metrics.jobs import record_migration as record

    return record(settings, report)  # type: ignore[arg-type,return-value]


def migration_step(step: Callable[..., R]) -> Callable[..., R]:
    """Decorates a migration step (start, status, cutover, rollback, retire): its StepReport is
    recorded with the Settings among the step's arguments."""

    @wraps(step)
    def recorded(*args: Any, **kwargs: Any) -> R:
        from deltastate.config import Settings

        report = step(*args, **kwargs)
        settings = next((a for a in (*args, *kwargs.values()) if isinstance(a, Settings)), None)
        return report if settings is None else record_migration(settings, report)

    return recorded


def record_snapshot(settings: Settings, info: R) -> R:
    from deltastate.metrics.jobs import record_snapshot as record

    return record(settings, info)  # type: ignore[arg-type,return-value]


def serve(settings: Settings) -> int:
    """Starts this process's /metrics endpoint (once); the port it listens on."""
    from deltastate.metrics.exposition import serve as start

    return start(settings)
