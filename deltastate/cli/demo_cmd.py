"""`deltastate demo`: the leaderboard end to end on the real parts, with progress output.

infra up -> produce game results -> run player_stats --once -> snapshot publish -> top 10 and one
player's stats, read from the published DuckDB snapshot."""

from __future__ import annotations

import time

import click

from deltastate.cli.output import format_table
from deltastate.config import load_settings


def _step(text: str) -> None:
    click.secho(f"==> {text}", bold=True)


@click.command()
@click.option("--events", default=100_000, show_default=True, help="Game results to produce.")
@click.option("--players", default=5_000, show_default=True)
@click.option("--seed", default=7, show_default=True)
@click.option("--tombstones", default=0.01, show_default=True, help="Fraction of records that delete a player.")
def demo(events: int, players: int, seed: int, tombstones: float) -> None:
    """Run the leaderboard demo from scratch on a local broker, Spark, Delta and DuckDB."""
    from deltastate.engine import run_store
    from deltastate.infra.broker import LocalBroker
    from deltastate.infra.spark import get_spark
    from deltastate.ingest.generators import leaderboard_records
    from deltastate.ingest.producer import ensure_topic, produce_records
    from deltastate.query import Queries
    from deltastate.snapshot import publish_snapshot
    from deltastate.stores import load_store

    settings = load_settings()
    started = time.monotonic()
    store = load_store(settings, "player_stats")
    if settings.uses_local_broker:
        _step("starting the local Kafka broker (KRaft)")
        click.echo(f"    broker at {LocalBroker(settings).up()}, data under {settings.kafka_dir}")
    _step(f"producing {events:,} game results for {players:,} players to {store.source.topic}")
    ensure_topic(settings.kafka_bootstrap, store.source.topic, store.source.partitions)
    produced = produce_records(settings.kafka_bootstrap, store.source.topic,
                               leaderboard_records(events, players, seed, tombstones=tombstones))
    click.echo(f"    {produced.delivered:,} records ({produced.tombstones:,} tombstones) in {produced.seconds:.1f} s")

    _step("running player_stats once over the backlog (Spark Structured Streaming -> Delta changelog)")
    result = run_store(settings, "player_stats", once=True,
                       listener=lambda r: click.echo(f"    {r.describe()}"))
    click.echo(f"    {result.records_in:,} in = {result.applied:,} applied + {result.dead_lettered:,} dead-lettered; "
               f"{result.changelog_records:,} changelog records in {result.seconds:.1f} s")

    _step("publishing the DuckDB snapshot")
    info = publish_snapshot(get_spark(settings), settings)
    click.echo(f"    snapshot v{info.version} at {info.path}")

    with Queries(settings) as queries:
        top = queries.top("player_stats", n=10)
        _step(f"top 10 players by total_score (snapshot v{top.snapshot_version})")
        click.echo(format_table(top.columns, top.rows))
        leader = top.rows[0]["key"]
        stats = queries.get("player_stats", leader)
        rank = queries.rank("player_stats", leader)
        _step(f"stats of {leader} (rank {rank.row['rank']})")
        click.echo(format_table(stats.columns, stats.rows))
    click.echo(f"\ndemo done in {time.monotonic() - started:.0f} s. Try: deltastate top player_stats --n 5, "
               f"deltastate get player_stats {leader}, deltastate sql \"SELECT count(*) FROM player_stats\"")
