"""The actions an Airflow task runs on Spark for one store (run | compact | cleanup | restore |
publish | migrate_<step>), through the same deltastate functions the CLI and the tests call. `deltastate job`
runs one in a spark-submit driver; the operator's inline mode runs one in the task's process."""

from __future__ import annotations

import json
from typing import Any

from deltastate.config import Settings

MIGRATION_STEPS = ("plan", "start", "status", "cutover", "rollback", "retire")
ACTIONS = ("run", "compact", "cleanup", "restore", "publish", *(f"migrate_{s}" for s in MIGRATION_STEPS))
ALL_STORES = "*"


def _log(line: str) -> None:
    print(line, flush=True)


class _ProgressPrinter:
    """Restore listener: one log line per event, so the task log shows the restore's progress."""

    def __init__(self, store: str) -> None:
        self.store = store

    def _say(self, event: str, payload: Any) -> None:
        body = payload.to_dict() if hasattr(payload, "to_dict") else payload
        print(f"[restore {self.store}] {event}: {json.dumps(body, default=str)}", flush=True)

    def on_start(self, *args: Any, **kwargs: Any) -> None:
        self._say("start", args[0] if len(args) == 1 and not kwargs else {"args": args, **kwargs})

    def on_batch(self, *args: Any, **kwargs: Any) -> None:
        self._say("batch", args[0] if len(args) == 1 and not kwargs else {"args": args, **kwargs})

    def on_end(self, *args: Any, **kwargs: Any) -> None:
        self._say("end", args[0] if len(args) == 1 and not kwargs else {"args": args, **kwargs})


def as_dict(report: Any) -> dict[str, Any]:
    return report.to_dict() if hasattr(report, "to_dict") else dict(report)


def _run(settings: Settings, store: str, topic: str | None, max_offsets: int | None) -> dict[str, Any]:
    from deltastate.engine import run_store

    result = run_store(settings, store, once=True, topic=topic, max_offsets_per_trigger=max_offsets)
    return {"store": store, "records_in": result.records_in, "applied": result.applied,
            "dead_lettered": result.dead_lettered, "changelog_records": result.changelog_records,
            "batches": result.batches, "epoch": result.lineage.epoch, "seconds": round(result.seconds, 3)}


def _migrate(settings: Settings, step: str, store: str, to_version: int | None,
             hold_s: float | None) -> dict[str, Any]:
    """One migration step (deltastate/migration), its report printed for the task log."""
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
            from deltastate.stores.current import read_control

            migration = read_control(settings, store).get("migration") or {}
            report = steps.cutover(spark, settings, store,
                                   progress=steps.progress_printer(store, int(migration.get("to", 0)), _log))
        else:
            report = {"status": steps.status, "rollback": steps.rollback}[step](spark, settings, store)
    figures = as_dict(report)
    print(f"[migrate {store}] {step}: {json.dumps(figures, default=str)}", flush=True)
    return figures


def perform(settings: Settings, action: str, store: str, topic: str | None = None,
            max_offsets: int | None = None, to_version: int | None = None,
            hold_s: float | None = None) -> dict[str, Any]:
    """Do one action in this process (the Spark driver) and return its figures."""
    from deltastate.infra.spark import get_spark

    if action.startswith("migrate_"):
        return _migrate(settings, action.removeprefix("migrate_"), store, to_version, hold_s)
    if action == "run":
        return _run(settings, store, topic, max_offsets)
    if action == "compact":
        from deltastate.maintenance.compact import compact_store

        return as_dict(compact_store(settings, store, spark=get_spark(settings, f"deltastate-compact-{store}")))
    if action == "cleanup":
        from deltastate.maintenance.cleanup import cleanup_store

        return as_dict(cleanup_store(settings, store, spark=get_spark(settings, f"deltastate-cleanup-{store}"),
                                     topic=topic))
    if action == "restore":
        from deltastate.maintenance.restore import restore_store

        return as_dict(restore_store(settings, store, listener=_ProgressPrinter(store)))
    if action == "publish":
        from deltastate.quality.gate import gated_publish

        stores = None if store == ALL_STORES else [store]
        return gated_publish(get_spark(settings, "deltastate-publish"), settings, stores).to_dict()
    raise ValueError(f"unknown action {action!r}; known: {', '.join(ACTIONS)}")
