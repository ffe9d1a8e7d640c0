"""`deltastate produce <workload>`: fill a store's source topic with a synthetic, seeded workload.

Why a CLI: benchmarks, demos and Airflow tasks need one reproducible command that puts N known
records on the topic a store reads, partitioned exactly like Java producers would. Each workload is
a sibling command (leaderboard today; trades, pulses, clicks later) that only builds its record
iterator; topic creation, producing, progress and the summary line are shared (`_run_workload`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import click

from deltastate.cli.errors import reported as _reported
from deltastate.cli.errors import settings_of as _settings

F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["produce"]


def workload_options(func: F) -> F:
    """Options every workload shares: how many records, the seed, and where they go."""
    for option in reversed((
        click.option("--events", "-n", type=click.IntRange(min=0), required=True, help="Number of records to produce."),
        click.option("--seed", type=int, default=1, show_default=True, help="Seed; same seed, same records."),
        click.option("--tombstones", type=click.FloatRange(0.0, 1.0, max_open=True), default=0.0, show_default=True,
                     help="Fraction of records that are tombstones (null value) for a live key."),
        click.option("--topic", default=None, help="Topic; default: the store's source topic."),
        click.option("--partitions", type=click.IntRange(min=1), default=None,
                     help="Partitions when creating the topic; default: the store's source.partitions."),
    )):
        func = option(func)
    return func


def _run_workload(ctx: click.Context, store: str, topic: str | None, partitions: int | None, total: int,
                  records: Callable[[], Iterable[tuple[bytes | None, bytes | None]]]) -> None:
    """Create the topic if missing, produce the records with progress every ~10%, print a summary."""
    from deltastate.ingest.producer import ensure_topic, produce_records  # the Kafka client: on use
    from deltastate.stores import load_store

    settings = _settings(ctx)
    source = load_store(settings, store).source
    topic = topic or source.topic
    partitions = partitions or source.partitions
    bootstrap = settings.kafka_bootstrap
    if ensure_topic(bootstrap, topic, partitions):
        click.echo(f"created topic {topic} with {partitions} partitions at {bootstrap}", err=True)
    step = max(1, total // 10)
    started = time.monotonic()
    next_report = [step]

    def progress(sent: int) -> None:
        if sent >= next_report[0] and sent < total:
            elapsed = time.monotonic() - started
            click.echo(f"  {sent:,}/{total:,} records ({100 * sent // total}%), "
                       f"{sent / elapsed if elapsed else 0:,.0f} records/s", err=True)
            next_report[0] = (sent // step + 1) * step

    result = produce_records(bootstrap, topic, records(), progress=progress, progress_every=min(step, 10_000))
    rate = result.delivered / result.seconds if result.seconds > 0 else 0.0
    click.echo(f"produced {result.delivered} records ({result.tombstones} tombstones) to {topic} "
               f"in {result.seconds:.1f} s ({rate:.0f} records/s)")


@click.group("produce")
def produce() -> None:
    """Produce synthetic, seeded workloads to a store's source topic (keys partitioned like Java)."""


@produce.command("leaderboard")
@workload_options
@click.option("--players", "-p", type=click.IntRange(min=1), default=10_000, show_default=True,
              help="Distinct players; popularity is Zipf-like, so a few play most games.")
@click.pass_context
@_reported
def leaderboard(ctx: click.Context, events: int, seed: int, tombstones: float, topic: str | None,
                partitions: int | None, players: int) -> None:
    """game_result.v1 events for the player_stats store, keyed by player_id."""
    from deltastate.ingest.generators import leaderboard_records  # numpy only when used

    _run_workload(ctx, "player_stats", topic, partitions, events,
                  lambda: leaderboard_records(events, players, seed, tombstones))


def time_options(default_step_ms: int) -> Callable[[F], F]:
    """Event-time shape shared by the windowed workloads (see deltastate.ingest.timed_workloads)."""
    def wrap(func: F) -> F:
        for option in reversed((
            click.option("--keys", "-k", type=click.IntRange(min=1), default=100, show_default=True,
                         help="Distinct keys (Zipf-like popularity)."),
            click.option("--start", "start_ts", default="1700000000000", show_default=True,
                         help="Event time of the first record: epoch ms or ISO-8601 (UTC when no zone)."),
            click.option("--step-ms", type=click.IntRange(min=0), default=default_step_ms, show_default=True,
                         help="Mean event-time step between records."),
            click.option("--out-of-order", "disorder", type=click.FloatRange(0.0, 1.0, max_open=True), default=0.0,
                         show_default=True, help="Fraction of records moved back in time by up to --disorder-ms."),
            click.option("--disorder-ms", type=click.IntRange(min=1), default=1_000, show_default=True),
            click.option("--late", type=click.FloatRange(0.0, 1.0, max_open=True), default=0.0, show_default=True,
                         help="Fraction of records moved back by --late-ms..2x (beyond grace: late)."),
            click.option("--late-ms", type=click.IntRange(min=1), default=60_000, show_default=True),
        )):
            func = option(func)
        return func
    return wrap


def _shape(start_ts: str, step_ms: int, disorder: float, disorder_ms: int, late: float, late_ms: int):
    from deltastate.ingest.timed_workloads import TimeShape
    from deltastate.query.times import parse_time

    return TimeShape(parse_time(start_ts, "start"), step_ms, disorder, disorder_ms, late, late_ms)


@produce.command("trades")
@workload_options
@time_options(20)
@click.pass_context
@_reported
def trades(ctx: click.Context, events: int, seed: int, tombstones: float, topic: str | None, partitions: int | None,
           keys: int, start_ts: str, step_ms: int, disorder: float, disorder_ms: int, late: float, late_ms: int) -> None:
    """trade.v1 events for the trade_stats window store, keyed by symbol."""
    from deltastate.ingest.timed_workloads import trade_records

    shape = _shape(start_ts, step_ms, disorder, disorder_ms, late, late_ms)
    _run_workload(ctx, "trade_stats", topic, partitions, events, lambda: trade_records(events, keys, seed, shape, tombstones))


@produce.command("pulses")
@workload_options
@time_options(100)
@click.option("--checkouts", type=click.FloatRange(0.0, 1.0, max_open=True), default=0.0, show_default=True,
              help="Fraction of records that are checkouts (delete the patient's windows).")
@click.pass_context
@_reported
def pulses(ctx: click.Context, events: int, seed: int, tombstones: float, topic: str | None, partitions: int | None,
           keys: int, start_ts: str, step_ms: int, disorder: float, disorder_ms: int, late: float, late_ms: int,
           checkouts: float) -> None:
    """pulse.v1 events (and checkouts) for the pulse_counts window store, keyed by patient_id."""
    from deltastate.ingest.timed_workloads import pulse_records

    shape = _shape(start_ts, step_ms, disorder, disorder_ms, late, late_ms)
    _run_workload(ctx, "pulse_counts", topic, partitions, events,
                  lambda: pulse_records(events, keys, seed, shape, checkouts, tombstones))


@produce.command("clicks")
@workload_options
@time_options(2_000)
@click.pass_context
@_reported
def clicks(ctx: click.Context, events: int, seed: int, tombstones: float, topic: str | None, partitions: int | None,
           keys: int, start_ts: str, step_ms: int, disorder: float, disorder_ms: int, late: float, late_ms: int) -> None:
    """click.v1 events for the user_sessions session store, keyed by user_id."""
    from deltastate.ingest.timed_workloads import click_records

    shape = _shape(start_ts, step_ms, disorder, disorder_ms, late, late_ms)
    _run_workload(ctx, "user_sessions", topic, partitions, events,
                  lambda: click_records(events, keys, seed, shape, tombstones))
