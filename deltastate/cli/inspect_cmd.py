"""`deltastate inspect STORE [--json]`: what a store is on disk (deltastate.maintenance.inspect)."""

from __future__ import annotations

import json

import click

from deltastate.cli.errors import reported, settings_of


@click.command()
@click.argument("store")
@click.option("--json", "as_json", is_flag=True, help="Print the inspection as one JSON object.")
@click.pass_context
@reported
def inspect(ctx: click.Context, store: str, as_json: bool) -> None:
    """Show STORE's state settings, checkpoint, source lag, state shards, changelog, snapshots,
    dead letters and a restore-time estimate."""
    from deltastate.infra.spark import get_spark
    from deltastate.maintenance.inspect import inspect_store

    settings = settings_of(ctx)
    report = inspect_store(get_spark(settings, f"deltastate-inspect-{store}"), settings, store).to_dict()
    if as_json:
        click.echo(json.dumps(report, default=str))
        return
    click.echo(f"{report['store']} ({report['store_type']}, topic {report['topic']})")
    for section in ("state", "checkpoint", "source", "changelog", "restore"):
        click.echo(f"  {section}:")
        for key, value in report[section].items():
            click.echo(f"    {key}: {value}")
    click.echo("  state shards:" + ("" if report["state_shards"] else " -"))
    for shard in report["state_shards"]:
        click.echo(f"    shard {shard['shard']}: {shard['rows']:,} rows, {shard['bytes']:,} bytes")
    click.echo("  snapshots:" + ("" if report["snapshots"] else " -"))
    for snap in report["snapshots"]:
        mark = " (current)" if snap["current"] else ""
        click.echo(f"    {snap['snapshot_version']}{mark}: changelog version {snap['changelog_version']}, {snap['rows']} rows")
    click.echo("  dead letters: " + (", ".join(f"{r}={n:,}" for r, n in sorted(report["dead_letters"].items())) or "none"))
