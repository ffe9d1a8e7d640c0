"""`deltastate run STORE`: the store's streaming job, in the foreground."""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING

import click

from deltastate.config import load_settings

if TYPE_CHECKING:
    from deltastate.engine import BatchReport


def _print_batch(report: BatchReport) -> None:
    click.echo(f"  {report.describe()}")


@click.command()
@click.argument("store")
@click.option("--once", "mode", flag_value="once", default=True, help="Process the backlog, commit, stop (default).")
@click.option("--continuous", "mode", flag_value="continuous", help="Run until interrupted.")
@click.option("--trigger", default="1s", show_default=True, help="Commit interval in continuous mode.")
@click.option("--topic", default=None, help="Source topic (default: the store definition's).")
@click.option("--max-offsets-per-trigger", type=int, default=None, help="Bound each micro-batch.")
@click.option("--quiet", is_flag=True, help="No per-batch lines.")
@click.option("--json", "as_json", is_flag=True, help="End with the run's figures as one JSON line instead of a sentence.")
@click.option("--schema-version", type=click.IntRange(min=1), default=None,
              help="Run this value schema version (default: the current one); a migration's new version runs "
                   "beside the current one while it is built.")
@click.option("--in-process", is_flag=True,
              help="Run here even when a resident driver serves the home (`deltastate driver start`).")
@click.pass_context
def run(ctx: click.Context, store: str, mode: str, trigger: str, topic: str | None,
        max_offsets_per_trigger: int | None, quiet: bool, as_json: bool, schema_version: int | None,
        in_process: bool) -> None:
    """Run STORE's streaming job: Kafka -> state -> Delta changelog (+ dead letters)."""
    from deltastate.driver import client

    settings = load_settings()
    if mode == "once" and not in_process:  # in the home's resident driver when one serves it (deltastate/driver)
        code = client.send_command(settings, client.command_line(ctx))
        if code is not None:
            sys.exit(code)
    from deltastate.engine import run_store  # pyspark: imported by the command that runs it
    from deltastate.metrics import serve as serve_metrics
    from deltastate.stores.durations import parse_duration_ms

    interval = f"{parse_duration_ms(trigger)} milliseconds"
    from deltastate.stores import load_store

    load_store(settings, store, schema_version)  # an unknown store or version is refused before anything runs
    where = f" in the resident driver (pid {os.getpid()})" if client.in_driver() else ""
    click.echo(f"running {store} ({mode}) against {settings.kafka_bootstrap}{where}")
    if mode == "continuous":  # scraped while it runs; a --once run pushes (DELTASTATE_PUSHGATEWAY)
        click.echo(f"metrics on port {serve_metrics(settings)} (/metrics)")
    result = run_store(settings, store, once=(mode == "once"), trigger=interval, topic=topic,
                       max_offsets_per_trigger=max_offsets_per_trigger,
                       listener=None if quiet else _print_batch, version=schema_version)
    if result.stopped_by:
        click.echo(f"stopped: {result.stopped_by}")
    rate = result.records_in / result.seconds if result.seconds else 0.0
    if as_json:
        click.echo(json.dumps({"store": store, "records_in": result.records_in, "applied": result.applied,
                               "dead_lettered": result.dead_lettered, "late": result.late, "changelog_records": result.changelog_records,
                               "batches": result.batches, "seconds": round(result.seconds, 3),
                               "epoch": result.lineage.epoch, "stopped_by": result.stopped_by}))
        return
    click.echo(f"{store}: {result.records_in:,} records in = {result.applied:,} applied + "
               f"{result.dead_lettered:,} dead-lettered; {result.changelog_records:,} changelog records; "
               f"{result.seconds:.1f} s ({rate:,.0f} records/s); epoch {result.lineage.epoch}")
