"""`deltastate bench ...`: benchmarks that print figures (never pass/fail)."""

from __future__ import annotations

import dataclasses
import json

import click

from deltastate.cli.errors import reported
from deltastate.config import load_settings


def _emit(figures, as_json: bool) -> None:
    """A bench's figures: one JSON object, or its printed lines."""
    if as_json:
        click.echo(json.dumps(figures.to_dict()))
        return
    for line in figures.lines():
        click.echo(line)


@click.group()
def bench() -> None:
    """Benchmarks; results are printed figures."""


@bench.command("ingest")
@click.option("--events", default=2_000_000, show_default=True)
@click.option("--players", "--keys", "players", type=click.IntRange(min=1), default=None,
              help="Distinct keys [default: 100,000 for key-value stores, 1,000 for window and session stores].")
@click.option("--seed", default=1, show_default=True)
@click.option("--max-offsets-per-trigger", type=int, default=None, help="Bound each micro-batch.")
@click.option("--store", default="player_stats", show_default=True,
              help="player_stats, trade_stats, pulse_counts or user_sessions.")
@click.option("--warmup-events", type=click.IntRange(min=0), default=0, show_default=True,
              help="First an untimed run over this many events (separate topic and store): steady-state JIT.")
def ingest(events: int, players: int | None, seed: int, max_offsets_per_trigger: int | None, store: str,
           warmup_events: int) -> None:
    """Events/s from Kafka to the committed changelog for a --once run over a backlog."""
    from deltastate.bench.ingest import run_ingest_bench
    from deltastate.infra.broker import LocalBroker

    settings = load_settings()
    if settings.uses_local_broker:
        LocalBroker(settings).up()
    figures = run_ingest_bench(settings, events, players, seed, max_offsets_per_trigger, store, warmup_events)
    for line in figures.lines():
        click.echo(line)


@bench.command("peers")
@click.option("--store", "store", default="player_stats", show_default=True,
              type=click.Choice(["player_stats", "trade_stats", "user_sessions"]),
              help="The store, and its Kafka Streams topology.")
@click.option("--events", default=2_000_000, show_default=True, type=click.IntRange(min=1))
@click.option("--keys", default=None, type=click.IntRange(min=1),
              help="Distinct keys [default: 100,000 key-value, 1,000 window and session].")
@click.option("--seed", default=1, show_default=True)
@click.option("--warmup-events", default=0, show_default=True, type=click.IntRange(min=0),
              help="Each side first reads an untimed backlog of this many events in the measured run's process: "
                   "both rates at the JIT's steady state.")
@click.option("--against-floor", is_flag=True,
              help="Spark's own floor (a count per Kafka key, writing nothing) reads the same backlog last, "
                   "in its own process: both rates against it.")
@click.option("--resident", is_flag=True,
              help="deltastate's run goes to a resident driver (`deltastate driver start`) that has run the warm-up "
                   "backlog through a copy of the store; needs --warmup-events.")
@click.option("--json", "as_json", is_flag=True, help="The figures as JSON.")
@reported
def peers(store: str, events: int, keys: int | None, seed: int, warmup_events: int, against_floor: bool,
          resident: bool, as_json: bool) -> None:
    """A store in Kafka Streams 4.1.1 and in `deltastate run --once` on one backlog: both rates,
    both wall clocks from process start, and the ratios."""

    from deltastate.bench.peers import run_peers_bench
    from deltastate.infra.broker import LocalBroker

    if resident and not warmup_events:
        raise click.UsageError("--resident measures a warm driver: give it --warmup-events N (N > 0) to warm it with")
    settings = load_settings()
    if settings.uses_local_broker:
        LocalBroker(settings).up()
    _emit(run_peers_bench(settings, events, keys, seed, store, warmup_events, against_floor, resident), as_json)


@bench.command("restore")
@click.option("--keys", default=1_000_000, show_default=True)
@click.option("--updates", default=10, show_default=True, help="Changelog records per key before compaction.")
def restore(keys: int, updates: int) -> None:
    """Restore seconds on a long changelog history, before and after compaction, and the ratio."""
    from deltastate.bench.restore import run_restore_bench

    for line in run_restore_bench(load_settings(), keys, updates, progress=lambda s: click.echo(f"  .. {s}")).lines():
        click.echo(line)


@bench.command("migrate")
@click.option("--keys", default=1_000_000, show_default=True, type=click.IntRange(min=100), help="Keys in the store.")
@click.option("--readers", default=4, show_default=True, type=click.IntRange(min=0),
              help="Reader threads; 0 times the builds without read load.")
def migrate(keys: int, readers: int) -> None:
    """Time to build a store's next version by replay and by seeding, and read latency during each."""
    from deltastate.bench.migrate import run_migrate_bench
    from deltastate.infra.broker import LocalBroker

    settings = load_settings()
    if settings.uses_local_broker:
        LocalBroker(settings).up()
    for line in run_migrate_bench(settings, keys, readers, echo=lambda s: click.echo(f"  .. {s}")).lines():
        click.echo(line)


@bench.command("memory")
@click.option("--keys", default=10_000_000, show_default=True, type=click.IntRange(min=1), help="Keys in the store.")
@click.option("--max-memory", "budget_mb", default=512, show_default=True, type=click.IntRange(min=1),
              help="The store's state.max_memory, in MB.")
def memory(keys: int, budget_mb: int) -> None:
    """A key-value store of --keys keys under a RocksDB memory budget: state rows and resident size."""
    from deltastate.bench.memory import run_memory_bench
    from deltastate.infra.broker import LocalBroker

    settings = load_settings()
    if settings.uses_local_broker:
        LocalBroker(settings).up()
    for line in run_memory_bench(settings, keys, budget_mb, echo=click.echo).lines():
        click.echo(line)


@bench.command("query")
@click.option("--keys", default=1_000_000, show_default=True, help="Keys in the generated snapshot (10000000 for 10M).")
@click.option("--concurrency", default="1,16,64", show_default=True, help="Comma-separated client thread counts.")
@click.option("--seconds", default=3.0, show_default=True, help="Duration of each (op, concurrency) cell.")
@click.option("--no-http", is_flag=True, help="Skip the HTTP measurements.")
@click.option("--spark-gets", default=20, show_default=True, help="Point gets through Spark SQL on Delta (0: skip).")
@click.option("--port", default=18765, show_default=True, help="Port of the benchmarked `deltastate serve`.")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Server processes of `deltastate serve` and of the floor app [default: the core count].")
def query(keys: int, concurrency: str, seconds: float, no_http: bool, spark_gets: int, port: int,
          workers: int | None) -> None:
    """Read-index latencies, get/top/range in-process, wrk against `serve` and the bare FastAPI floor,
    and Spark SQL point gets for comparison."""
    from deltastate.bench.query import run_query_bench

    levels = tuple(int(x) for x in concurrency.split(",") if x.strip())
    figures = run_query_bench(load_settings(), keys, levels, seconds, http=not no_http, spark_gets=spark_gets,
                              port=port, echo=click.echo, workers=workers)
    click.echo("summary:")
    for line in figures.lines():
        click.echo(line)


@bench.command("freshness")
@click.option("--store", "store_name", default="player_stats", show_default=True, help="The store to run.")
@click.option("--rate", default=2_000, show_default=True, type=click.IntRange(min=1), help="Load, events per second.")
@click.option("--probes", default=50, show_default=True, type=click.IntRange(min=1), help="Probe records, one per second.")
@click.option("--trigger", default="1s", show_default=True, help="The run's commit interval.")
@click.option("--consistency", type=click.Choice(["committed", "latest"]), default="committed", show_default=True,
              help="The read the probes poll.")
@click.option("--idle-seconds", default=20.0, show_default=True, help="How long to measure an idle store's CPU (0: skip).")
@click.option("--warmup-seconds", default=60.0, show_default=True, type=click.FloatRange(min=0),
              help="Load before the first probe (or the floor's measured batches); its micro-batches are not counted.")
@click.option("--port", default=18766, show_default=True, help="Port of the benchmarked `deltastate serve`.")
@click.option("--floor", is_flag=True, help="Measure a floor instead: a stateful query at this trigger and load "
                                            "for --probes seconds after the warm-up (see --floor-sink).")
@click.option("--floor-sink", type=click.Choice(["none", "delta", "plan", "plan-delta"]), default="none",
              show_default=True,
              help="Which floor --floor measures: a count per Kafka key whose batches count the changed keys "
                   "(Spark's floor) or append them to a Delta table (Spark and Delta's floor), or player_stats' "
                   "own query whose batches count the changed rows (the store plan's floor) or append them to "
                   "a Delta table (the store plan's Delta floor).")
@click.option("--against-floor", is_flag=True, help="Measure the four floors first (as --floor, each in a process "
                                                    "of its own), then the store, and print the store's batch p50 "
                                                    "against theirs.")
@click.option("--json", "as_json", is_flag=True, help="The figures as JSON.")
def freshness(store_name: str, rate: int, probes: int, trigger: str, consistency: str, idle_seconds: float,
              warmup_seconds: float, port: int, floor: bool, floor_sink: str, against_floor: bool,
              as_json: bool) -> None:
    """Produce -> visible latency of a continuously running store under steady load, with the
    micro-batch breakdown and an idle store's CPU."""
    from deltastate.bench.floor import SINKS as FLOOR_SINKS
    from deltastate.bench.floor import against_floor_lines, run_floor, run_floor_apart
    from deltastate.bench.freshness import run_freshness_bench
    from deltastate.infra.broker import LocalBroker

    if floor and against_floor:
        raise click.UsageError("--floor measures one floor alone and --against-floor the four floors then the store: "
                               "give one of them")
    if floor_sink != "none" and not floor:
        raise click.UsageError("--floor-sink chooses what --floor measures: give --floor with it")
    settings = load_settings()
    if settings.uses_local_broker:
        LocalBroker(settings).up()
    if floor:
        figures = run_floor(settings, rate, probes, trigger, warmup_seconds=warmup_seconds, sink=floor_sink)
        click.echo(json.dumps(dataclasses.asdict(figures)) if as_json else "\n".join(figures.lines()))
        return
    floors = {sink: run_floor_apart(settings, rate, probes, trigger, warmup_seconds, sink)
              for sink in (FLOOR_SINKS if against_floor else ())}
    figures = run_freshness_bench(settings, store_name, rate, probes, trigger, consistency, port, idle_seconds,
                                  echo=click.echo, warmup_seconds=warmup_seconds)
    if as_json:
        click.echo(json.dumps({**dataclasses.asdict(figures),
                               **({"floor": dataclasses.asdict(floors["none"]),
                                   "delta_floor": dataclasses.asdict(floors["delta"]),
                                   "plan_floor": dataclasses.asdict(floors["plan"]),
                                   "plan_delta_floor": dataclasses.asdict(floors["plan-delta"])} if floors else {})}))
        return
    for line in [*(line for f in floors.values() for line in f.lines()), *figures.lines()]:
        click.echo(line)
    if floors:
        for line in against_floor_lines(figures, floors):
            click.echo(line)


@bench.command("commit")
@click.option("--appends", default=25, show_default=True, type=click.IntRange(min=10), help="Appends per variant.")
@click.option("--log-files", "log_files", multiple=True, type=click.IntRange(min=1),
              help="Also append to a table whose log folder holds this many more files (repeatable).")
def commit(appends: int, log_files: tuple[int, ...]) -> None:
    """What one small Delta append costs, with and without the idempotent-write options, and as the
    log folder grows."""
    from deltastate.bench.commit import run_commit_bench

    for line in run_commit_bench(load_settings(), appends, log_files).lines():
        click.echo(line)


@bench.command("cli")
@click.option("--store", default="player_stats", show_default=True, help="A key-value store in the snapshot.")
@click.option("--key", default=None, help="The key get and rank ask for (default: the snapshot's top key).")
@click.option("--runs", default=7, show_default=True, type=click.IntRange(min=1), help="Runs per read.")
@click.option("--json", "as_json", is_flag=True, help="The figures as JSON.")
@reported
def cli_reads(store: str, key: str | None, runs: int, as_json: bool) -> None:
    """Wall time of `deltastate get|top|rank` as new processes on the current snapshot."""

    from deltastate.bench.cli_reads import run_cli_read_bench
    from deltastate.query.reads import Queries

    settings = load_settings()
    if key is None:
        with Queries(settings) as queries:
            found = queries.top(store, 1)
        if not found.rows:
            raise click.ClickException(f"store {store!r} is empty in the current snapshot; pass --key")
        key = str(found.rows[0]["key"])
    _emit(run_cli_read_bench(settings, store, key, runs), as_json)
