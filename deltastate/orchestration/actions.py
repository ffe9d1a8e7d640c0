"""The actions an Airflow task runs on Spark for one store (run | compact | cleanup | restore |
publish | migrate_<step>), through the same deltastate functions the CLI and the tests call. `deltastate job`
runs one in a spark-submit driver; the operator's inline mode runs one in the task's process.

Every action returns a report dataclass built on deltastate.report.Report, and its figures (what the
driver prints, writes to its report file and the operator returns as XCom) are that report's
`to_dict()`: one serialization for every action."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from deltastate.config import Settings
from deltastate.report import Report

if TYPE_CHECKING:  # the DAG processor imports this module: no pyspark (deltastate.maintenance loads it)
    from deltastate.maintenance.listener import RestoreMode

MIGRATION_STEPS = ("plan", "start", "status", "cutover", "rollback", "retire")
ACTIONS = ("run", "compact", "cleanup", "restore", "publish", *(f"migrate_{s}" for s in MIGRATION_STEPS))
ALL_STORES = "*"
# The report type each action returns, as "module:Class" (importing them here would load pyspark
# while the DAG processor parses dags/, which imports this module for MIGRATION_STEPS).
ACTION_REPORTS = {
    "run": f"{__name__}:RunReport",
    "compact": "deltastate.maintenance.compact:CompactionReport",
    "cleanup": "deltastate.maintenance.cleanup:CleanupReport",
    "restore": "deltastate.maintenance.restore:RestoreReport",
    "publish": "deltastate.quality.gate:GateReport",
    "migrate_plan": "deltastate.migration.plan:MigrationPlan",
    **{f"migrate_{s}": "deltastate.migration.steps:StepReport" for s in MIGRATION_STEPS if s != "plan"},
}


def _log(line: str) -> None:
    print(line, flush=True)


@dataclass(frozen=True)
class RunReport(Report):
    """A store run's figures: the run's totals without its per-batch progress events."""

    store: str
    records_in: int
    applied: int
    dead_lettered: int
    changelog_records: int
    batches: int
    epoch: int
    seconds: float


class _ProgressPrinter:
    """Restore listener: one task-log line per event, each batch naming its source partition."""

    def __init__(self, store: str) -> None:
        self.store = store
        self.restored = 0

    def on_start(self, store: str, from_changelog_version: int | None, mode: RestoreMode) -> None:
        source = "an empty changelog" if from_changelog_version is None else f"changelog version {from_changelog_version}"
        _log(f"[restore {store}] start: {mode} restore from {source}")

    def on_batch(self, records_restored: int, partition: int | None) -> None:
        self.restored += records_restored
        where = "rows without a source partition" if partition is None else f"source partition {partition}"
        _log(f"[restore {self.store}] batch: {where}: {records_restored:,} records ({self.restored:,} so far)")

    def on_end(self, total_records: int, seconds: float) -> None:
        _log(f"[restore {self.store}] end: {total_records:,} records in {seconds:.1f} s")


def figures(report: Report) -> dict[str, Any]:
    """An action's figures: its report as JSON-safe data (deltastate.report)."""
    if not isinstance(report, Report):
        raise TypeError(f"an action returned {type(report).__name__}, not a deltastate.report.Report")
    return report.to_dict()


def _run(settings: Settings, store: str, topic: str | None, max_offsets: int | None) -> RunReport:
    from deltastate.engine import run_store

    result = run_store(settings, store, once=True, topic=topic, max_offsets_per_trigger=max_offsets)
    return RunReport(store, result.records_in, result.applied, result.dead_lettered, result.changelog_records,
                     result.batches, result.lineage.epoch, round(result.seconds, 3))


def _migrate(settings: Settings, step: str, store: str, to_version: int | None,
             hold_s: float | None) -> dict[str, Any]:
    """One migration step (deltastate/migration), its figures printed for the task log."""
    from deltastate.infra.spark import get_spark
    from deltastate.migration import steps

    if step in ("plan", "start") and to_version is None:
        raise ValueError(f"migrate {step} needs the target version (to_version)")
    if step == "retire":
        report = steps.retire(settings, store, hold_s=hold_s)
    else:
        spark = get_spark(settings, f"deltastate-migrate-{store}")
        if step == "plan":
            from deltastate.migration.plan import plan_migration
            from deltastate.stores import load_store

            report = plan_migration(spark, settings, load_store(settings, store), load_store(settings, store, to_version))
        elif step == "start":
            report = steps.start(spark, settings, store, int(to_version),  # type: ignore[arg-type]
                                 progress=steps.progress_printer(store, int(to_version), _log))  # type: ignore[arg-type]
        elif step == "cutover":
            from deltastate.stores.current import read_record

            migration = read_record(settings, store).migration
            report = steps.cutover(spark, settings, store,
                                   progress=steps.progress_printer(store, 0 if migration is None else migration.to_version,
                                                                   _log))
        else:
            report = {"status": steps.status, "rollback": steps.rollback}[step](spark, settings, store)
    out = figures(report)
    _log(f"[migrate {store}] {step}: {json.dumps(out)}")
    return out


def perform(settings: Settings, action: str, store: str, topic: str | None = None,
            max_offsets: int | None = None, to_version: int | None = None,
            hold_s: float | None = None) -> dict[str, Any]:
    """Do one action in this process (the Spark driver) and return its figures (`figures`)."""
    from deltastate.infra.spark import get_spark

    if action.startswith("migrate_"):
        return _migrate(settings, action.removeprefix("migrate_"), store, to_version, hold_s)
    if action == "run":
        return figures(_run(settings, store, topic, max_offsets))
    if action == "compact":
        from deltastate.maintenance.compact import compact_store

        return figures(compact_store(settings, store, spark=get_spark(settings, f"deltastate-compact-{store}")))
    if action == "cleanup":
        from deltastate.maintenance.cleanup import cleanup_store

        return figures(cleanup_store(settings, store, spark=get_spark(settings, f"deltastate-cleanup-{store}"),
                                     topic=topic))
    if action == "restore":
        from deltastate.maintenance.restore import restore_store

        return figures(restore_store(settings, store, listener=_ProgressPrinter(store)))
    if action == "publish":
        from deltastate.quality.gate import gated_publish

        stores = None if store == ALL_STORES else [store]
        return figures(gated_publish(get_spark(settings, "deltastate-publish"), settings, stores))
    raise ValueError(f"unknown action {action!r}; known: {', '.join(ACTIONS)}")
