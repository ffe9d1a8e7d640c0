"""Migration benchmark: the time to build the next value schema version of a store of `keys` keys, by
replay (the topic holds the whole history) and by seeding (it does not), and REST point-read latency
while each build runs, against the same load with no migration.

Two copies of player_stats (with its declared migration to v2) read one topic of `keys` events, one
per key, and are run once to the end. The first is migrated with the topic intact: v2 is rebuilt from
the earliest offsets. Then the first record of every partition is deleted (as the topic's retention
would) and the second is migrated: v2 is seeded from v1's state and its new aggregation defaults
going forward. Reads: `readers` threads asking `deltastate serve` for random keys of the first copy.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from deltastate.config import Settings

BASE = "player_stats"
COPIES = ("bench_replay", "bench_seed")


@dataclass(frozen=True)
class ReadFigures:
    label: str
    requests: int
    errors: int
    seconds: float
    p50_ms: float
    p99_ms: float

    def line(self) -> str:
        return (f"  reads {self.label:<22} {self.requests / self.seconds:>8,.0f} req/s  p50 {self.p50_ms:7.2f} ms  "
                f"p99 {self.p99_ms:7.2f} ms  errors {self.errors}")


@dataclass(frozen=True)
class MigrateFigures:
    keys: int
    cores: int
    v1_seconds: float
    builds: dict[str, float]  # build kind -> seconds of `migrate start`
    phases: dict[str, dict[str, float]]  # build kind -> seconds of start's plan, seed and run
    reads: list[ReadFigures]

    def lines(self) -> list[str]:
        out = [f"bench migrate {BASE}: {self.keys:,} keys, {self.cores} cores",
               f"  v1 run of each copy (untimed setup): {self.v1_seconds:8.1f} s"]
        out += [f"  migrate start, build by {kind:<7}      {seconds:8.1f} s  ("
                + ", ".join(f"{phase} {s:.1f} s" for phase, s in self.phases.get(kind, {}).items()) + ")"
                for kind, seconds in self.builds.items()]
        return out + [r.line() for r in self.reads]


def _schemas(settings: Settings, folder: Path, topic: str) -> Path:
    shutil.copytree(settings.schemas_dir, folder)
    raw = yaml.safe_load((settings.schemas_dir / "stores" / f"{BASE}.yaml").read_text())
    raw["source"]["topic"] = topic
    for copy in COPIES:
        (folder / "stores" / f"{copy}.yaml").write_text(yaml.safe_dump({**raw, "name": copy}))
    return folder


def _events(keys: int, seed: int) -> list[tuple[bytes, bytes]]:
    rng = random.Random(seed)
    return [(f"player-{i:09d}".encode(), json.dumps({"player_id": f"player-{i:09d}", "game_id": f"g-{i}",
                                                     "score": rng.randrange(0, 10_000), "ts": 1_700_000_000_000 + i}
                                                    ).encode()) for i in range(keys)]


def _read_load(base: str, store: str, keys: int, readers: int, stop: threading.Event, label: str) -> ReadFigures:
    import httpx

    latencies: list[float] = []
    errors = [0]

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        with httpx.Client(base_url=base, timeout=30) as client:
            while not stop.is_set():
                started = time.perf_counter()
                try:
                    ok = client.get(f"/stores/{store}/keys/player-{rng.randrange(keys):09d}").status_code == 200
                except httpx.HTTPError:
                    ok = False
                latencies.append(time.perf_counter() - started)
                errors[0] += 0 if ok else 1

    started = time.monotonic()
    threads = [threading.Thread(target=reader, args=(i,)) for i in range(readers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.monotonic() - started
    ordered = sorted(latencies) or [float("nan")]
    return ReadFigures(label, len(latencies), errors[0], seconds, statistics.median(ordered) * 1000,
                       ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000)


def _while(base: str, keys: int, readers: int, label: str, work: Callable[[], None] | float) -> ReadFigures | None:
    """Read load during `work` (a callable), or for that many seconds; no readers: the work alone."""
    if not readers:
        if callable(work):
            work()
        return None
    stop = threading.Event()
    result: list[ReadFigures] = []
    loader = threading.Thread(target=lambda: result.append(_read_load(base, COPIES[0], keys, readers, stop, label)))
    loader.start()
    try:
        if callable(work):
            work()
        else:
            time.sleep(work)
    finally:
        stop.set()
        loader.join()
    return result[0]


def run_migrate_bench(settings: Settings, keys: int, readers: int = 4, port: int = 18_791,
                      baseline_s: float = 20.0, echo: Callable[[str], None] = lambda line: None) -> MigrateFigures:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    from deltastate.bench.http_load import start_serve, stop
    from deltastate.engine import run_store
    from deltastate.infra.spark import get_spark
    from deltastate.ingest.producer import ensure_topic, produce_records
    from deltastate.migration import steps
    from deltastate.snapshot import publish_snapshot
    from deltastate.stores import load_store

    root = Path(settings.home) / "bench" / f"migrate-{uuid.uuid4().hex[:8]}"
    topic = f"bench-migrate-{uuid.uuid4().hex[:8]}"
    bench = dataclasses.replace(settings, storage_root=str(root / "data"),
                                schemas_dir=_schemas(settings, root / "schemas", topic))
    ensure_topic(bench.kafka_bootstrap, topic, 4)
    produced = produce_records(bench.kafka_bootstrap, topic, _events(keys, seed=7))
    echo(f"produced {produced.delivered:,} events to {topic}")
    spark = get_spark(bench, "deltastate-bench-migrate")
    started = time.monotonic()
    for copy in COPIES:
        run_store(bench, copy, once=True)
    v1_seconds = (time.monotonic() - started) / len(COPIES)
    publish_snapshot(spark, bench, [load_store(bench, c) for c in COPIES])
    echo(f"v1 of each copy built in {v1_seconds:.1f} s")

    server = start_serve(bench, port, workers=1)
    base = f"http://127.0.0.1:{port}"
    builds: dict[str, float] = {}
    phases: dict[str, dict[str, float]] = {}
    reads: list[ReadFigures] = []
    try:
        reads.append(_while(base, keys, readers, "no migration", baseline_s))

        def build(kind: str, copy: str) -> Callable[[], None]:
            def work() -> None:
                t0 = time.monotonic()
                report = steps.start(spark, bench, copy, 2)
                builds[kind] = time.monotonic() - t0
                phases[kind] = report.details["phases"]
                assert report.details["build"] == kind, report.details
            return work

        reads.append(_while(base, keys, readers, "during a replay build", build("replay", COPIES[0])))
        admin = AdminClient({"bootstrap.servers": bench.kafka_bootstrap})
        for future in admin.delete_records([TopicPartition(topic, p, 1) for p in range(4)]).values():
            future.result(timeout=60)
        reads.append(_while(base, keys, readers, "during a seed build", build("seed", COPIES[1])))
    finally:
        stop(server)
    return MigrateFigures(keys, os.cpu_count() or 1, v1_seconds, builds, phases, [r for r in reads if r])
