"""`deltastate migrate plan|start|status|cutover|rollback|retire STORE`: evolve a store's value schema
beside the live version, then switch to it (deltastate/migration)."""

from __future__ import annotations

import json
from typing import Any

import click

from deltastate.cli.errors import reported, settings_of
from deltastate.config import Settings


def _spark(settings: Settings, store: str):
    from deltastate.infra.spark import get_spark

    return get_spark(settings, f"deltastate-migrate-{store}")


def _progress_line(line: str) -> None:
    """Per-batch progress on stderr: stdout stays the step's report (JSON with --json)."""
    click.echo(line, err=True)


def _emit(data: dict[str, Any], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(data, indent=1, default=str))
        return
    for key, value in data.items():
        click.echo(f"{key}: {json.dumps(value, default=str) if isinstance(value, (dict, list)) else value}")


@click.group()
def migrate() -> None:
    """Store migrations: a new value schema version built beside the live one, then a cutover."""


@migrate.command()
@click.argument("store")
@click.option("--to", "to_version", type=click.IntRange(min=1), required=True,
              help="The value schema version to build (the current version + 1).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
@reported
def plan(ctx: click.Context, store: str, to_version: int, as_json: bool) -> None:
    """What migrating STORE to version --to would do: the field diff, the strategy per field, the
    source topic's coverage; changes nothing."""
    from deltastate.migration.plan import check_target, plan_migration
    from deltastate.stores import load_store

    settings = settings_of(ctx)
    live = load_store(settings, store)
    check_target(live, to_version)  # a wrong --to is refused before Spark starts
    result = plan_migration(_spark(settings, store), settings, live, load_store(settings, store, to_version))
    if as_json:
        _emit(result.to_dict(), True)
        return
    click.echo(f"{store}: version {result.from_version} -> {result.to_version}, built by {result.build} "
               f"({result.live_rows:,} live rows, {result.topic_records:,} records in the topic)")
    for f in result.fields:
        click.echo(f"  {f.field:<16} {f.type:<7} {f.strategy:<8} {f.source}")
    for name in result.dropped:
        click.echo(f"  {name:<16} dropped")
    click.echo(f"coverage: {result.reason}")
    seconds = "unknown" if result.estimated_seconds is None else f"about {result.estimated_seconds:,.0f} s"
    click.echo(f"work: {result.work_records:,} records, {seconds} ({result.estimate_note})")


@migrate.command()
@click.argument("store")
@click.option("--to", "to_version", type=click.IntRange(min=1), required=True,
              help="The value schema version to build (the current version + 1).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
@reported
def start(ctx: click.Context, store: str, to_version: int, as_json: bool) -> None:
    """Build version --to beside the live version and run it to the topic's end."""
    from deltastate.migration.steps import progress_printer
    from deltastate.migration.steps import start as start_step

    settings = settings_of(ctx)
    progress = progress_printer(store, to_version, _progress_line)
    _emit(start_step(_spark(settings, store), settings, store, to_version, progress).to_dict(), as_json)


@migrate.command()
@click.argument("store")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
@reported
def status(ctx: click.Context, store: str, as_json: bool) -> None:
    """Phase, offsets of both versions per partition and the new version's lag."""
    from deltastate.migration.steps import started_migration
    from deltastate.migration.steps import status as status_step

    settings = settings_of(ctx)
    started_migration(settings, store)  # no migration started: said before Spark starts
    report = status_step(_spark(settings, store), settings, store)
    if as_json:
        _emit(report.to_dict(), True)
        return
    click.echo(f"{store}: version {report.from_version} -> {report.to_version}, phase {report.phase}")
    parts = report.details["partitions"]
    for p, row in parts.items():
        done = row["new"] or 0
        width = 30
        filled = width if not row["end"] else min(width, int(width * done / max(1, row["end"])))
        click.echo(f"  partition {p}: [{'#' * filled}{'.' * (width - filled)}] new {done:,} / end "
                   f"{row['end']:,}, behind the old version by {row['lag_behind_old']:,}")
    click.echo(f"lag: {report.details['lag']:,} records")


@migrate.command()
@click.argument("store")
@click.option("--wait", type=float, default=120.0, show_default=True,
              help="Seconds to wait for the old version's stream to stop.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
@reported
def cutover(ctx: click.Context, store: str, wait: float, as_json: bool) -> None:
    """Stop the old version, let the new one finish, check it, switch the current version, publish."""
    from deltastate.migration.steps import cutover as cutover_step
    from deltastate.migration.steps import progress_printer
    from deltastate.stores.current import read_record

    settings = settings_of(ctx)
    migration = read_record(settings, store).migration
    to_version = 0 if migration is None else migration.to_version
    progress = progress_printer(store, to_version, _progress_line)
    _emit(cutover_step(_spark(settings, store), settings, store, wait_s=wait, progress=progress).to_dict(), as_json)


@migrate.command()
@click.argument("store")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
@reported
def rollback(ctx: click.Context, store: str, as_json: bool) -> None:
    """Make the old version current again (until it is retired)."""
    from deltastate.migration.steps import rollback as rollback_step

    settings = settings_of(ctx)
    _emit(rollback_step(_spark(settings, store), settings, store).to_dict(), as_json)


@migrate.command()
@click.argument("store")
@click.option("--hold", type=float, default=None, help="Seconds the old version is kept after cutover "
                                                       "(default: the migration's retire_after).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
@reported
def retire(ctx: click.Context, store: str, hold: float | None, as_json: bool) -> None:
    """Delete the old version's tables and checkpoint once the hold period has passed."""
    from deltastate.migration.steps import retire as retire_step

    _emit(retire_step(settings_of(ctx), store, hold_s=hold).to_dict(), as_json)
