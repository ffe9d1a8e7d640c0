"""`deltastate infra up|down|status`: run the local JVM infrastructure (Kafka broker, jars).

Why a CLI: developers and Airflow tasks need one command to bring a broker up before streaming and
one to see what runs where, without knowing Maven or Kafka's command lines.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from deltastate.cli.errors import reported as _reported
from deltastate.cli.errors import settings_of as _settings
from deltastate.errors import InfraError
from deltastate.infra.broker import LocalBroker
from deltastate.infra.jars import PROFILES, ensure_jars, is_fetched, profile_dir

F = TypeVar("F", bound=Callable[..., Any])


@click.group("infra")
def infra() -> None:
    """Start, stop and inspect the local Kafka broker and the JVM jars."""


@infra.command("setup")
@click.pass_context
@_reported
def setup(ctx: click.Context) -> None:
    """Fetch every jar folder (Maven), build deltastate's Spark functions and the JVM class archive
    Spark processes start from: nothing is downloaded later."""
    from deltastate.infra.class_archive import build_archive
    from deltastate.infra.spark import driver_jars
    from deltastate.infra.udaf import udaf_jar

    settings = _settings(ctx)
    for profile, folder in ensure_jars(settings).items():
        click.echo(f"  {profile:<12} {len(list(folder.glob('*.jar')))} jars in {folder}")
    click.echo(f"  functions    {udaf_jar(settings)}")
    try:
        archive = build_archive(settings, driver_jars(settings))
    except InfraError as e:  # Spark runs without the archive: setup goes on, and says so
        click.echo(f"  classes      {e}", err=True)
    else:
        click.echo(f"  classes      {archive or 'no java on PATH: no class archive'}")


@infra.command("up")
@click.option("--timeout", default=90.0, show_default=True, help="Seconds to wait for the broker to be ready.")
@click.pass_context
@_reported
def up(ctx: click.Context, timeout: float) -> None:
    """Fetch the broker jars if needed and start the local broker (no-op when it already runs)."""
    settings = _settings(ctx)
    if not is_fetched(settings, "broker"):
        click.echo(f"fetching broker jars into {profile_dir(settings, 'broker')} (Maven) ...", err=True)
    ensure_jars(settings, ("broker",))
    broker = LocalBroker(settings)
    bootstrap = broker.up(timeout=timeout)
    status = broker.status()
    click.echo(f"kafka broker running: pid {status.pid}, bootstrap {bootstrap}")
    click.echo(f"  data: {status.data_dir}")
    click.echo(f"  log:  {status.log_file}")
    if not settings.uses_local_broker:
        click.echo(f"note: KAFKA_BOOTSTRAP is {settings.kafka_bootstrap}, not this local broker", err=True)


@infra.command("down")
@click.pass_context
@_reported
def down(ctx: click.Context) -> None:
    """Stop the local broker (clean shutdown)."""
    if LocalBroker(_settings(ctx)).down():
        click.echo("kafka broker stopped")
    else:
        click.echo("kafka broker was not running")


@infra.command("status")
@click.pass_context
@_reported
def status(ctx: click.Context) -> None:
    """Show what runs where: broker pid, bootstrap, data, log, and the jar folders."""
    settings = _settings(ctx)
    st = LocalBroker(settings).status()
    if st.running:
        topics = "unreachable" if st.topics is None else str(st.topics)
        click.echo(f"kafka broker: running, pid {st.pid}, bootstrap {st.bootstrap}, topics {topics}")
    else:
        click.echo(f"kafka broker: stopped (would listen on {st.bootstrap})")
    click.echo(f"  data: {st.data_dir}")
    click.echo(f"  log:  {st.log_file}")
    click.echo(f"kafka bootstrap in use: {settings.kafka_bootstrap}")
    click.echo(f"jars: {settings.jars_dir}")
    for profile in PROFILES:
        folder = profile_dir(settings, profile)
        if is_fetched(settings, profile):
            state = f"fetched, {len(list(folder.glob('*.jar')))} jars"
        elif folder.exists():
            state = "stale (pom.xml changed or fetch incomplete)"
        else:
            state = "missing"
        click.echo(f"  {profile:<12} {state}")


__all__ = ["infra"]


if __name__ == "__main__":  # pragma: no cover - convenience for `python -m`
    sys.exit(infra())
