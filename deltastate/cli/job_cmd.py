"""`deltastate job ACTION STORE --report FILE`: the driver program of every Spark task of the DAGs.

The operator spark-submits deltastate/cli/__main__.py with these arguments (local[*] or a cluster).
The driver does the action, prints its figures (they land in the Airflow task log, which streams
spark-submit's output) and writes them as one JSON object to FILE, so the operator can push them as
XCom. A failed action exits non-zero after writing {"error": ...} (and, for a blocked publish, the
validation report) to FILE.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path

import click

from deltastate.cli.errors import settings_of
from deltastate.orchestration.actions import ACTIONS, perform
from deltastate.orchestration.actions import figures as report_figures


@click.command("job")
@click.argument("action", type=click.Choice(ACTIONS))
@click.argument("store")
@click.option("--report", "report_file", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Where the action's figures are written as JSON.")
@click.option("--topic", default=None, help="Read this topic instead of the store's declared one.")
@click.option("--max-offsets-per-trigger", type=click.IntRange(min=1), default=None,
              help="Cap on records per micro-batch (run).")
@click.option("--to-version", type=click.IntRange(min=1), default=None, help="Target version (migrate_plan, migrate_start).")
@click.option("--hold-seconds", type=click.FloatRange(min=0), default=None, help="Hold period (migrate_retire).")
@click.pass_context
def job(ctx: click.Context, action: str, store: str, report_file: Path, topic: str | None,
        max_offsets_per_trigger: int | None, to_version: int | None, hold_seconds: float | None) -> None:
    """Run ACTION for STORE (or '*' for publish) and write its figures to --report."""
    started = time.monotonic()
    try:
        figures = perform(settings_of(ctx), action, store, topic, max_offsets_per_trigger, to_version, hold_seconds)
        code = 0
    except Exception as exc:  # the report carries any failure to the operator, then the exit code
        traceback.print_exc()
        figures = {"error": f"{type(exc).__name__}: {exc}"}
        detail = getattr(exc, "report", None)
        if detail is not None:
            figures["validation"] = report_figures(detail)
        code = 1
    figures = {"action": action, "store": store, "driver_seconds": round(time.monotonic() - started, 3), **figures}
    text = json.dumps(figures, default=str, sort_keys=True)
    click.echo(f"deltastate {action} {store}: {text}")
    report_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = report_file.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(report_file)
    sys.stdout.flush()
    if code:
        sys.exit(code)
