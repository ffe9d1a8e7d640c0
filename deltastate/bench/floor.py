"""Spark's own floor for a freshness run: a trivial stateful query at the same trigger and load.

`deltastate bench freshness --floor` measures it in the bench's process; `--against-floor` in a
process of its own (`python -m deltastate.bench.floor RATE SECONDS TRIGGER WARMUP_SECONDS`, which
prints its figures as one JSON line), then the store, and sets the two batch medians side by side.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
import uuid

from deltastate.bench.freshness import SPARK_DURATIONS, FreshnessFigures, SteadyLoad, percentile
from deltastate.config import Settings, load_settings
from deltastate.errors import InfraError
from deltastate.stores.durations import parse_duration_ms


def run_floor(settings: Settings, rate: int, seconds: float, trigger: str, partitions: int = 4,
              warmup_seconds: float = 60.0) -> FreshnessFigures:
    """Spark's own floor at this trigger and load: a trivial stateful query (a count per Kafka key
    in RocksDB state, update mode) whose batch writer only counts the changed keys, writing nothing.
    Its batches in the first warmup_seconds of load are not counted, as the store's are not."""
    from deltastate.infra.spark import get_spark
    from deltastate.ingest.producer import ensure_topic

    run_id = uuid.uuid4().hex[:8]
    topic = f"bench-floor-{run_id}"
    ensure_topic(settings.kafka_bootstrap, topic, partitions)
    spark = get_spark(settings)
    figures = FreshnessFigures("floor: count per key", "key_value", "none", rate, trigger, os.cpu_count() or 0)
    load = SteadyLoad(settings.kafka_bootstrap, topic, "player_stats", rate, "ts")
    counts = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", settings.kafka_bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest").load()
              .groupBy("key").count())
    query = (counts.writeStream.outputMode("update")
             .option("checkpointLocation", str(settings.home / "bench" / f"floor-{run_id}"))
             .trigger(processingTime=f"{parse_duration_ms(trigger)} milliseconds")
             .foreachBatch(lambda batch, _: batch.count()).start())
    load.start()
    try:
        time.sleep(warmup_seconds)
        warm = max((p["batchId"] for p in _progress(query)), default=-1)
        time.sleep(seconds)
    finally:
        load.stop.set()
        load.join()
        query.stop()
    figures.warmup_s, figures.warmup_batches = warmup_seconds, warm + 1
    progress = [p for p in _progress(query) if p.get("numInputRows") and p["batchId"] > warm]
    for p in progress[1 if warm < 0 else 0:]:  # without a warm-up, past the first batch's start-up
        for name in SPARK_DURATIONS:
            if name in p.get("durationMs", {}):
                figures.spark.setdefault(name, []).append(p["durationMs"][name] / 1000)
    figures.batch_s = figures.spark.get("triggerExecution", [])
    figures.produced = load.sent
    return figures


def run_floor_apart(settings: Settings, rate: int, seconds: float, trigger: str,
                    warmup_seconds: float) -> FreshnessFigures:
    """run_floor in a process of its own (`python -m deltastate.bench.floor`): a store measured after the floor in
    the same JVM runs slower for it, so the floor and the store share the machine, the broker and the
    load, not the JVM."""
    command = [sys.executable, "-m", "deltastate.bench.floor", str(rate), str(seconds), trigger,
               str(warmup_seconds)]
    done = subprocess.run(command, env={**os.environ, **settings.to_env()}, capture_output=True, text=True,
                          timeout=3600)
    if done.returncode != 0:
        raise InfraError(f"`python {' '.join(command[1:])}` failed (exit {done.returncode}): "
                         f"{done.stderr.strip()[-1500:]}")
    found = json.loads(done.stdout.strip().splitlines()[-1])
    found["slowest"] = []  # the floor has no probes
    return FreshnessFigures(**found)


def against_floor_line(figures: FreshnessFigures, floor: FreshnessFigures) -> str:
    """The store's micro-batch p50 over Spark's floor's, both measured in one run."""
    if not figures.batch_s or not floor.batch_s:
        return "  against the floor: no batches with records to compare"
    ours, bare = percentile(figures.batch_s, 50), percentile(floor.batch_s, 50)
    return (f"  against the floor: micro-batch p50 {ours:.3f} s = {ours / bare:.2f}x Spark's floor "
            f"(p50 {bare:.3f} s, measured just before in its own process)")


def _progress(query) -> list[dict]:  # noqa: ANN001 (a pyspark StreamingQuery)
    return [p if isinstance(p, dict) else dict(p) for p in query.recentProgress]


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print("usage: python -m deltastate.bench.floor RATE SECONDS TRIGGER WARMUP_SECONDS", file=sys.stderr)
        return 2
    rate, seconds, trigger, warmup = int(argv[0]), float(argv[1]), argv[2], float(argv[3])
    print(json.dumps(dataclasses.asdict(run_floor(load_settings(), rate, seconds, trigger, warmup_seconds=warmup))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
