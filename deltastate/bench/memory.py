"""Memory benchmark: a key-value store of many keys under a RocksDB memory budget
(`state.max_memory`), and what the process holds afterwards.

One `--once` run of player_stats (one event per key, so every key is state) on its own topic,
storage root and store definitions, with the budget applied to the store's query. Printed: the
store's state rows (Spark's state data source), the budget, the driver JVM's peak and current
resident size (/proc), and its heap (committed and max), so that what is outside the heap can be
held against the budget. Spark runs locally, so the driver JVM also holds the executor's RocksDB."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

from deltastate.config import Settings

STORE = "player_stats"
BUDGET_KEY = "spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB"


@dataclass(frozen=True)
class MemoryFigures:
    keys: int
    budget_mb: int
    cores: int
    run_seconds: float
    state_rows: int
    peak_rss_mb: float
    rss_mb: float
    heap_committed_mb: float
    heap_max_mb: float
    query_budget_mb: str | None  # maxMemoryUsageMB as the store's query started with it

    def lines(self) -> list[str]:
        outside_heap = self.rss_mb - self.heap_committed_mb
        return [
            f"bench memory {STORE}: {self.keys:,} keys, state.max_memory {self.budget_mb} MB "
            f"(the query started with {self.query_budget_mb} MB), {self.cores} cores",
            f"  run --once:            {self.run_seconds:8.1f} s",
            f"  state rows:            {self.state_rows:>12,}",
            f"  driver JVM peak RSS:   {self.peak_rss_mb:>10,.0f} MB",
            f"  driver JVM RSS:        {self.rss_mb:>10,.0f} MB (heap committed {self.heap_committed_mb:,.0f} MB, "
            f"max {self.heap_max_mb:,.0f} MB)",
            f"  RSS outside the heap:  {outside_heap:>10,.0f} MB  (budget {self.budget_mb} MB + JVM and Python overhead)",
        ]


def one_event_per_key(keys: int) -> Iterator[tuple[bytes, bytes]]:
    for i in range(keys):
        key = f"player-{i:09d}"
        yield key.encode(), json.dumps({"player_id": key, "game_id": f"g{i}", "score": i % 1000,
                                        "ts": 1_700_000_000_000 + i}).encode()


def _proc_mb(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def run_memory_bench(settings: Settings, keys: int, budget_mb: int,
                     echo: Callable[[str], None] = print) -> MemoryFigures:
    from deltastate.engine import run_store
    from deltastate.infra.spark import get_spark
    from deltastate.ingest.producer import ensure_topic, produce_records

    run_id = uuid.uuid4().hex[:8]
    home = settings.home / "bench" / f"memory-{run_id}"
    schemas = home / "schemas"
    shutil.copytree(settings.schemas_dir, schemas)
    definition = yaml.safe_load((schemas / "stores" / f"{STORE}.yaml").read_text())
    definition["state"] = {"provider": "rocksdb", "max_memory": f"{budget_mb}MB"}
    (schemas / "stores" / f"{STORE}.yaml").write_text(yaml.safe_dump(definition))
    bench = dataclasses.replace(settings, storage_root=str(home / "data"), schemas_dir=schemas)
    topic = f"bench-memory-{run_id}"
    ensure_topic(settings.kafka_bootstrap, topic, definition["source"]["partitions"])
    produced = produce_records(settings.kafka_bootstrap, topic, one_event_per_key(keys))
    echo(f"  .. produced {produced.delivered:,} events in {produced.seconds:.1f} s")
    spark = get_spark(bench)
    started = time.monotonic()
    result = run_store(bench, STORE, once=True, topic=topic)
    seconds = time.monotonic() - started
    rows = spark.read.format("statestore").load(f"{result.lineage.checkpoint}/stream").count()
    jvm = spark._jvm
    pid = int(jvm.java.lang.ProcessHandle.current().pid())
    runtime = jvm.java.lang.Runtime.getRuntime()
    return MemoryFigures(keys=keys, budget_mb=budget_mb, cores=os.cpu_count() or 0, run_seconds=seconds,
                         state_rows=int(rows), peak_rss_mb=_proc_mb(pid, "VmHWM"), rss_mb=_proc_mb(pid, "VmRSS"),
                         heap_committed_mb=runtime.totalMemory() / 2**20, heap_max_mb=runtime.maxMemory() / 2**20,
                         query_budget_mb=result.state_conf.get(BUDGET_KEY))
