"""Ingest benchmark: events per second from Kafka to the committed Delta changelog, for one
`--once` run over a backlog on a fresh topic.

Untimed: producing the backlog, starting the Spark session and creating the store's empty Delta
tables (a one-off per store, which costs 10-14 s of Delta class loading in a fresh JVM). Timed: the
run itself, from the checkpoint check to the last committed batch. With warm-up events, a first
untimed run over a separate small backlog and store warms the JVM, giving the steady-state figure
of a long-running job instead of the first-run figure of a fresh process."""

from __future__ import annotations

import dataclasses
import os
import time
import uuid
from dataclasses import dataclass

from deltastate.config import Settings


@dataclass(frozen=True)
class IngestFigures:
    store: str
    events: int
    keys: int
    cores: int
    produce_seconds: float
    create_seconds: float
    warmup_events: int
    run_seconds: float
    records_in: int
    applied: int
    dead_lettered: int
    changelog_records: int
    spark_master: str
    shuffle_partitions: int

    @property
    def events_per_second(self) -> float:
        return self.records_in / self.run_seconds if self.run_seconds else 0.0

    @property
    def jvm(self) -> str:
        if self.warmup_events:
            return f"warm (an untimed run over {self.warmup_events:,} events first)"
        return "cold (the first run in this process)"

    def lines(self) -> list[str]:
        return [
            f"bench ingest {self.store}: {self.events:,} events, {self.keys:,} keys, "
            f"{self.cores} cores, master {self.spark_master}, {self.shuffle_partitions} shuffle partitions",
            f"  produce (untimed):   {self.produce_seconds:8.1f} s",
            f"  create tables (untimed): {self.create_seconds:4.1f} s",
            f"  jvm:                 {self.jvm}",
            f"  run --once:          {self.run_seconds:8.1f} s  (Spark session start excluded)",
            f"  records in:          {self.records_in:>12,}  = {self.applied:,} applied + {self.dead_lettered:,} dead-lettered",
            f"  changelog records:   {self.changelog_records:>12,}",
            f"  throughput:          {self.events_per_second:>12,.0f} events/s",
        ]


# Distinct keys when --keys is not given. Key-value stores: player_stats' 100,000 players. Window and
# session stores: 1,000 symbols, patients or users, a key count at which each batch updates a key's
# windows many times (every window-store figure in bench/results.md uses it).
DEFAULT_KEYS = {"key_value": 100_000, "window": 1_000, "session": 1_000}


def default_keys(store_type: str) -> int:
    try:
        return DEFAULT_KEYS[store_type]
    except KeyError:
        raise ValueError(f"no default key count for store type {store_type!r}") from None


def bench_records(store: str, events: int, keys: int, seed: int):
    """The seeded workload of each reference store (windowed ones with a little disorder)."""
    from deltastate.ingest import timed_workloads as tw
    from deltastate.ingest.generators import leaderboard_records

    if store == "player_stats":
        return leaderboard_records(events, keys, seed)
    if store == "trade_stats":
        return tw.trade_records(events, keys, seed, tw.TimeShape(step_ms=2, disorder=0.05, disorder_ms=1_500))
    if store == "pulse_counts":
        return tw.pulse_records(events, keys, seed, tw.TimeShape(step_ms=5, disorder=0.05, disorder_ms=3_000),
                                checkouts=0.001)
    if store == "user_sessions":
        return tw.click_records(events, keys, seed, tw.TimeShape(step_ms=100, disorder=0.05, disorder_ms=120_000))
    raise ValueError(f"no bench workload for store {store!r}")


def run_ingest_bench(settings: Settings, events: int, players: int | None, seed: int = 1,
                     max_offsets_per_trigger: int | None = None, store_name: str = "player_stats",
                     warmup_events: int = 0) -> IngestFigures:
    """players: distinct keys; None for the store type's default (DEFAULT_KEYS)."""
    from deltastate.infra.spark import get_spark
    from deltastate.stores import load_store

    if players is None:
        players = default_keys(load_store(settings, store_name).type)
    get_spark(settings)  # session start-up is not part of the figure
    if warmup_events:
        _timed_run(settings, store_name, warmup_events, min(players, warmup_events), seed + 1000, None)
    produced, create_seconds, seconds, result = _timed_run(settings, store_name, events, players, seed,
                                                           max_offsets_per_trigger)
    return IngestFigures(
        store=store_name, events=events, keys=players, cores=os.cpu_count() or 0,
        produce_seconds=produced.seconds, create_seconds=create_seconds, warmup_events=warmup_events,
        run_seconds=seconds, records_in=result.records_in,
        applied=result.applied, dead_lettered=result.dead_lettered,
        changelog_records=result.changelog_records, spark_master=settings.spark_master,
        shuffle_partitions=settings.shuffle_partitions,
    )


def _timed_run(settings: Settings, store_name: str, events: int, keys: int, seed: int,
               max_offsets_per_trigger: int | None):
    """One bench run on its own topic and storage root: (produced, create s, run s, RunResult)."""
    from deltastate.changelog.tables import ensure_tables
    from deltastate.engine import run_store
    from deltastate.infra.spark import get_spark
    from deltastate.ingest.producer import ensure_topic, produce_records
    from deltastate.stores import load_store

    run_id = uuid.uuid4().hex[:8]
    bench_settings = dataclasses.replace(settings, storage_root=str(settings.home / "bench" / run_id))
    store = load_store(settings, store_name)
    topic = f"bench-{store.name}-{run_id}"
    ensure_topic(settings.kafka_bootstrap, topic, store.source.partitions)
    produced = produce_records(settings.kafka_bootstrap, topic, bench_records(store.name, events, keys, seed))
    started = time.monotonic()
    ensure_tables(get_spark(bench_settings), bench_settings, store)
    create_seconds = time.monotonic() - started
    started = time.monotonic()
    result = run_store(bench_settings, store.name, once=True, topic=topic,
                       max_offsets_per_trigger=max_offsets_per_trigger)
    return produced, create_seconds, time.monotonic() - started, result
