"""The driver program spark-submit runs for every Spark task of the DAGs (local[*] or a cluster).

    spark-submit .../deltastate/orchestration/sparkjob.py ACTION STORE --report FILE [--topic T]

ACTION is run | compact | cleanup | restore | publish. The driver does the work through the same
deltastate functions the CLI and the tests call, prints its figures (they land in the Airflow task
log, which streams spark-submit's output), and writes them as one JSON object to FILE so the
operator can push them as XCom. A failed action exits non-zero after writing {"error": ...} (and,
for a blocked publish, the validation report) to FILE.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from deltastate.config import Settings, load_settings

ACTIONS = ("run", "compact", "cleanup", "restore", "publish")
ALL_STORES = "*"


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


def _as_dict(report: Any) -> dict[str, Any]:
    return report.to_dict() if hasattr(report, "to_dict") else dict(report)


def _run(settings: Settings, store: str, topic: str | None, max_offsets: int | None) -> dict[str, Any]:
    from deltastate.engine.runner import run_store

    result = run_store(settings, store, once=True, topic=topic, max_offsets_per_trigger=max_offsets)
    return {"store": store, "records_in": result.records_in, "applied": result.applied,
            "dead_lettered": result.dead_lettered, "changelog_records": result.changelog_records,
            "batches": result.batches, "epoch": result.lineage.epoch, "seconds": round(result.seconds, 3)}


def perform(settings: Settings, action: str, store: str, topic: str | None = None,
            max_offsets: int | None = None) -> dict[str, Any]:
    """Do one action in this process (the Spark driver) and return its figures."""
    from deltastate.infra.spark import get_spark

    if action == "run":
        return _run(settings, store, topic, max_offsets)
    if action == "compact":
        from deltastate.maintenance.compact import compact_store

        return _as_dict(compact_store(settings, store, spark=get_spark(settings, f"deltastate-compact-{store}")))
    if action == "cleanup":
        from deltastate.maintenance.cleanup import cleanup_store

        return _as_dict(cleanup_store(settings, store, spark=get_spark(settings, f"deltastate-cleanup-{store}"),
                                     topic=topic))
    if action == "restore":
        from deltastate.maintenance.restore import restore_store

        return _as_dict(restore_store(settings, store, listener=_ProgressPrinter(store)))
    if action == "publish":
        from deltastate.quality.gate import gated_publish

        stores = None if store == ALL_STORES else [store]
        return gated_publish(get_spark(settings, "deltastate-publish"), settings, stores).to_dict()
    raise ValueError(f"unknown action {action!r}; known: {', '.join(ACTIONS)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sparkjob")
    parser.add_argument("action", choices=ACTIONS)
    parser.add_argument("store")
    parser.add_argument("--report", required=True)
    parser.add_argument("--topic", default=None)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=None)
    args = parser.parse_args(argv)
    report_file = Path(args.report)
    started = time.monotonic()
    settings = load_settings()
    try:
        figures = perform(settings, args.action, args.store, args.topic, args.max_offsets_per_trigger)
        code = 0
    except Exception as exc:  # the report carries the failure to the operator, then we exit non-zero
        traceback.print_exc()
        figures = {"error": f"{type(exc).__name__}: {exc}"}
        detail = getattr(exc, "report", None)
        if detail is not None:
            figures["validation"] = _as_dict(detail)
        code = 1
    figures = {"action": args.action, "store": args.store, "driver_seconds": round(time.monotonic() - started, 3),
               **figures}
    text = json.dumps(figures, default=str, sort_keys=True)
    print(f"deltastate {args.action} {args.store}: {text}", flush=True)
    report_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = report_file.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(report_file)
    return code


if __name__ == "__main__":
    sys.exit(main())
