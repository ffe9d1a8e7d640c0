"""Peers benchmark: deltastate against Kafka Streams on the same backlog, one after the other.

One seeded backlog of a reference store (player_stats, trade_stats or user_sessions) is produced to
a fresh topic. Then, each as a new process:
- the store's Kafka Streams peer (bench/peers/src, built from bench/peers/pom.xml: Kafka Streams
  4.1.1, one stream thread, a 10 MB record cache, RocksDB stores logged to changelog topics; the
  same aggregation, windows, grace and retention as the store's definition) reads the whole topic
  and closes;
- `deltastate run <store> --once --topic T --json` reads it into a fresh storage root.
Each reports its processing time (Kafka Streams: first record to closed, offsets committed;
deltastate: the run from its checkpoint check to its last committed batch) and the wall clock from
process start; the bench prints both rates, both wall clocks and deltastate's ratio to the peer.

With warm-up events, a second seeded backlog of that many events goes to its own topic, and each
side reads it first, untimed, in the same process as the measured run (Kafka Streams under its own
application id; deltastate through `python -m deltastate.bench.warm_run` into its own storage): the
figures are then each side's steady state, with the JIT's compiling done, and the wall clocks count
from the measured run's start.
With --resident (and warm-up events), deltastate's side runs in a resident driver instead
(bench/resident_run.py): the driver first runs a copy of the store over the warm-up backlog, then
`deltastate run <store> --once` is timed from its client process's start; Kafka Streams is warm as
above.
With --against-floor, Spark's own floor (bench/backlog_floor.py: a count per Kafka key in the
state store, writing nothing) reads the same backlogs last, in a process of its own, and the bench
sets deltastate's rate and Kafka Streams' against it: what Spark alone costs on this machine.
Late records: deltastate counts each late record once (dead-lettered, reason late); Kafka Streams'
dropped-records-total counts a late record once per window it missed, so the two are not compared.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from deltastate.config import PROJECT_ROOT, Settings
from deltastate.errors import InfraError

PEER_SOURCES = PROJECT_ROOT / "bench" / "peers" / "src"
# The stores that have a Kafka Streams peer, and its main class.
PEERS = {
    "player_stats": "io.deltastate.peers.PlayerStatsPeer",
    "trade_stats": "io.deltastate.peers.TradeStatsPeer",
    "user_sessions": "io.deltastate.peers.UserSessionsPeer",
}


@dataclass(frozen=True)
class RunFigures:
    """records read; applied: records aggregated (deltastate: late ones excluded; Kafka Streams:
    valid records handed to the aggregation, which drops the late ones itself); late: deltastate's
    late records, Kafka Streams' dropped-records-total (once per window a late record missed)."""

    records: int
    applied: int
    late: int
    processing_seconds: float
    wall_seconds: float

    @property
    def rate(self) -> float:
        return self.records / self.processing_seconds if self.processing_seconds else 0.0


@dataclass(frozen=True)
class PeersFigures:
    store: str
    events: int
    keys: int
    cores: int
    kafka_streams: RunFigures
    deltastate: RunFigures
    warmup_events: int = 0
    floor: RunFigures | None = None  # Spark's own floor on the same backlog (--against-floor)
    resident: bool = False  # deltastate ran in a resident driver warmed by the warm-up backlog

    @property
    def rate_ratio(self) -> float:
        return self.deltastate.rate / self.kafka_streams.rate if self.kafka_streams.rate else 0.0

    @property
    def wall_ratio(self) -> float:
        """Kafka Streams' wall clock over deltastate's: above 1 when deltastate finishes sooner."""
        return self.kafka_streams.wall_seconds / self.deltastate.wall_seconds if self.deltastate.wall_seconds else 0.0

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out["rate_ratio"] = round(self.rate_ratio, 3)
        out["wall_ratio"] = round(self.wall_ratio, 3)
        return out

    def lines(self) -> list[str]:
        def row(name: str, r: RunFigures) -> str:
            return (f"  {name:<13} {r.records:>11,} records  processing {r.processing_seconds:7.1f} s "
                    f"({r.rate:>9,.0f} records/s)  wall {r.wall_seconds:7.1f} s")

        how = (f"each process warm from an untimed {self.warmup_events:,}-event backlog, wall from the measured run"
               if self.warmup_events else "each a new process, wall from process start")
        if self.resident:
            how = (f"Kafka Streams warm from an untimed {self.warmup_events:,}-event backlog, wall from the measured "
                   f"run; deltastate in a resident driver that ran that backlog first, wall from the client's start")
        out = [f"bench peers {self.store}: {self.events:,} events, {self.keys:,} keys, {self.cores} cores, "
               f"one after the other on one topic; {how}",
               row("kafka streams", self.kafka_streams), row("deltastate", self.deltastate)]
        if self.floor is not None:
            out.append(row("spark floor", self.floor))
        out.append(f"  deltastate / kafka streams: processing rate {self.rate_ratio:.2f}x, "
                   f"wall clock {1 / self.wall_ratio if self.wall_ratio else 0:.2f}x as long")
        if self.floor is not None and self.floor.rate:
            out.append(f"  deltastate / spark floor (a count per Kafka key, writing nothing): processing rate "
                       f"{self.deltastate.rate / self.floor.rate:.2f}x; kafka streams / spark floor "
                       f"{self.kafka_streams.rate / self.floor.rate:.2f}x")
        return out


def peer_classpath(settings: Settings) -> str:
    """The peer's jar and its dependencies, fetching and building them when missing."""
    from deltastate.infra.jars import ensure_peer_jars
    from deltastate.infra.javac import built_jar

    jars = ensure_peer_jars(settings)
    jar = built_jar(PEER_SOURCES, f"{jars}/*", settings.jars_dir / "bench-peers", "bench-peers",
                    "the Kafka Streams peer of `deltastate bench peers`")
    return f"{jar}:{jars}/*"


def run_peers_bench(settings: Settings, events: int, keys: int | None = None, seed: int = 1,
                    store_name: str = "player_stats", warmup_events: int = 0,
                    against_floor: bool = False, resident: bool = False) -> PeersFigures:
    """keys: distinct keys; None for the store type's default (bench ingest's). warmup_events: the
    size of the untimed backlog each side reads first in the measured run's process (0: none).
    against_floor: Spark's own floor (bench/backlog_floor.py) reads the same backlogs last, in a
    process of its own. resident: deltastate's run goes to a resident driver the warm-up backlog
    warmed (bench/resident_run.py; needs warmup_events)."""
    from deltastate.bench.ingest import default_keys
    from deltastate.stores import load_store

    if resident and not warmup_events:
        raise ValueError("a resident driver's run is measured warm: give warmup_events")
    if store_name not in PEERS:
        raise ValueError(f"no Kafka Streams peer for store {store_name!r}; peers exist for {', '.join(PEERS)}")
    keys = default_keys(load_store(settings, store_name).type) if keys is None else keys
    classpath = peer_classpath(settings)
    topic = produce_backlog(settings, store_name, events, keys, seed)
    warm_up = (produce_backlog(settings, store_name, warmup_events, min(keys, warmup_events), seed + 1000)
               if warmup_events else None)
    peer = run_peer(settings, store_name, topic, events, classpath, warm_up and (warm_up, warmup_events))
    ours = _deltastate_run(settings, store_name, topic, topic.rsplit("-", 1)[-1], warm_up, resident)
    floor = _timed_process(settings, [sys.executable, "-m", "deltastate.bench.backlog_floor", topic,
                                      *([warm_up] if warm_up else [])]) if against_floor else None
    return PeersFigures(store_name, events, keys, os.cpu_count() or 0, peer, ours, warmup_events,
                        floor and RunFigures(floor["records"], floor["records"], 0, float(floor["seconds"]),
                                             float(floor["wall_seconds"])), resident)


def produce_backlog(settings: Settings, store_name: str, events: int, keys: int, seed: int) -> str:
    """A fresh topic holding the store's seeded bench workload; returns its name."""
    from deltastate.bench.ingest import bench_records
    from deltastate.ingest.producer import ensure_topic, produce_records
    from deltastate.stores import load_store

    topic = f"bench-peers-{uuid.uuid4().hex[:8]}"
    ensure_topic(settings.kafka_bootstrap, topic, load_store(settings, store_name).source.partitions)
    produced = produce_records(settings.kafka_bootstrap, topic, bench_records(store_name, events, keys, seed))
    if produced.delivered != events:
        raise InfraError(f"produced {produced.delivered:,} of {events:,} records to {topic}")
    return topic


def run_peer(settings: Settings, store_name: str, topic: str, events: int, classpath: str,
             warm_up: tuple[str, int] | None = None) -> RunFigures:
    """The store's Kafka Streams peer over the first `events` records of topic, in a new JVM;
    warm_up: a (topic, records) it reads to the end first, untimed."""
    with tempfile.TemporaryDirectory(prefix="deltastate-peer-") as state_dir:
        command = ["java", "-cp", classpath, PEERS[store_name], settings.kafka_bootstrap, topic,
                   f"deltastate-peer-{uuid.uuid4().hex[:8]}", state_dir, str(events)]
        if warm_up:
            command += [warm_up[0], str(warm_up[1])]
        done = subprocess.run(command, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise InfraError(f"the Kafka Streams peer failed (exit {done.returncode}): {done.stderr.strip()[-1500:]}")
    found = json.loads(done.stdout.strip().splitlines()[-1])
    return RunFigures(int(found["records"]), int(found["applied"]), int(found["dropped"]),
                      float(found["processing_seconds"]), float(found["wall_seconds"]))


def _deltastate_run(settings: Settings, store: str, topic: str, run_id: str, warm_up: str | None,
                    resident: bool = False) -> RunFigures:
    """`deltastate run --once` over topic in a new process; with a warm_up topic, warm_run's two runs,
    or (resident) a resident driver's."""
    root = settings.home / "bench" / f"peers-{run_id}"
    if resident and warm_up:
        from deltastate.bench.resident_run import run_resident

        found = run_resident(settings, store, warm_up, topic, root)
        return RunFigures(int(found["records_in"]), int(found["applied"]), int(found["late"]), float(found["seconds"]),
                          float(found["wall_seconds"]))
    command = [str(Path(sys.executable).parent / "deltastate"), "run", store, "--once", "--topic", topic, "--quiet",
               "--json"]
    if warm_up:
        command = [sys.executable, "-m", "deltastate.bench.warm_run", store, warm_up, topic]
    found = _timed_process(settings, command, {"DELTASTATE_STORAGE": str(root)})
    return RunFigures(int(found["records_in"]), int(found["applied"]), int(found["late"]), float(found["seconds"]),
                      float(found["wall_seconds"]))


def _timed_process(settings: Settings, command: list[str], env: dict[str, str] | None = None) -> dict:
    """The JSON line a bench process prints last; wall_seconds defaults to the process's own wall clock."""
    started = time.monotonic()
    done = subprocess.run(command, env={**os.environ, **settings.to_env(), **(env or {})}, capture_output=True,
                          text=True, timeout=3600)
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise InfraError(f"`{' '.join(command[1:])}` failed (exit {done.returncode}): {done.stderr.strip()[-1500:]}")
    return {"wall_seconds": wall, **json.loads(done.stdout.strip().splitlines()[-1])}
