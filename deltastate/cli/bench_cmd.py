"""`deltastate bench ...`: benchmarks that print figures (never pass/fail)."""

from __future__ import annotations

import click

from deltastate.config import load_settings


@click.group()
def bench() -> None:
    """Benchmarks; results are printed figures."""


@bench.command("ingest")
@click.option("--events", default=2_000_000, show_default=True)
@click.option("--players", default=100_000, show_default=True)
@click.option("--seed", default=1, show_default=True)
@click.option("--max-offsets-per-trigger", type=int, default=None, help="Bound each micro-batch.")
def ingest(events: int, players: int, seed: int, max_offsets_per_trigger: int | None) -> None:
    """Events/s from Kafka to the committed changelog for a --once run over a backlog."""
    from deltastate.bench.ingest import run_ingest_bench
    from deltastate.infra.broker import LocalBroker

    settings = load_settings()
    if settings.uses_local_broker:
        LocalBroker(settings).up()
    figures = run_ingest_bench(settings, events, players, seed, max_offsets_per_trigger)
    for line in figures.lines():
        click.echo(line)
