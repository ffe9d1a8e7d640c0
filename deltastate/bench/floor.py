"""Floors for a freshness run: a stateful query at the same trigger and load, four ways.

  * Spark's floor (sink "none"): a count per Kafka key; its batch writer counts the changed keys and
    writes nothing: what Spark's micro-batch costs alone;
  * Spark and Delta's floor (sink "delta"): the same query, its batch writer appending the changed
    keys to a Delta table, one plain append per batch (as a store's batches after a run's first
    are): the least a batch that lands in Delta costs, without decoding, folding, a changelog's
    columns or an audit;
  * the store plan's floor (sink "plan"): player_stats' own streaming query (the store's Kafka
    source, the records' decoding and classification, the fold and the audit groups in Spark's
    state store), its batch writer counting the rows the batch changed and writing nothing: what
    Spark's micro-batch costs for the store's computation, before the store writes a changelog;
  * the store plan's Delta floor (sink "plan-delta"): the same query, its batch writer appending
    the rows the batch changed to a Delta table, one plain append per batch: the store's
    computation landed in Delta without the changelog's bookkeeping columns, the audit or the
    summary.

`deltastate bench freshness --floor [--floor-sink delta|plan|plan-delta]` measures one in the
bench's process; `--against-floor` measures all four, each in a process of its own (`python -m
deltastate.bench.floor RATE SECONDS TRIGGER WARMUP_SECONDS SINK`, which prints its figures as one
JSON line), then the store, and sets the batch medians side by side.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from deltastate.bench.freshness import SPARK_DURATIONS, FreshnessFigures, SteadyLoad, percentile
from deltastate.config import Settings, load_settings
from deltastate.errors import InfraError
from deltastate.stores.durations import parse_duration_ms

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

SINKS = ("none", "delta", "plan", "plan-delta")
_NAMES = {"none": "floor: count per key", "delta": "floor: count per key, appended to Delta",
          "plan": "floor: player_stats' plan, its changed rows counted",
          "plan-delta": "floor: player_stats' plan, its changed rows appended to Delta"}


def floor_table(settings: Settings, run_id: str) -> str:
    """Where the Delta floor of run run_id appends its batches."""
    return str(settings.home / "bench" / f"floor-{run_id}-table")


def run_floor(settings: Settings, rate: int, seconds: float, trigger: str, partitions: int = 4,
              warmup_seconds: float = 60.0, sink: str = "none") -> FreshnessFigures:
    """A floor at this trigger and load: a trivial stateful query (a count per Kafka key in RocksDB
    state, update mode) whose batch writer counts the changed keys (sink "none") or appends them to a
    Delta table (sink "delta", at floor_table), or player_stats' own query whose batch writer counts
    its changed rows (sink "plan") or appends them to the Delta table (sink "plan-delta"). Its
    batches in the first warmup_seconds of load are not counted, as the store's are not. When the load stops, the query reads what is left (a batch,
    counted) before it stops, so `processed` is every record produced."""
    if sink not in SINKS:
        raise ValueError(f"floor sink {sink!r}: expected one of {', '.join(SINKS)}")
    from deltastate.infra.spark import get_spark
    from deltastate.ingest.producer import ensure_topic

    run_id = uuid.uuid4().hex[:8]
    topic = f"bench-floor-{run_id}"
    ensure_topic(settings.kafka_bootstrap, topic, partitions)
    spark = get_spark(settings)
    figures = FreshnessFigures(_NAMES[sink], "key_value", "none", rate, trigger, os.cpu_count() or 0)
    load = SteadyLoad(settings.kafka_bootstrap, topic, "player_stats", rate, "ts")
    counts = _store_plan(spark, settings, topic) if sink.startswith("plan") else (
        spark.readStream.format("kafka").option("kafka.bootstrap.servers", settings.kafka_bootstrap)
        .option("subscribe", topic).option("startingOffsets", "earliest").load().groupBy("key").count())
    query = (counts.writeStream.outputMode("update")
             .option("checkpointLocation", str(settings.home / "bench" / f"floor-{run_id}"))
             .trigger(processingTime=f"{parse_duration_ms(trigger)} milliseconds")
             .foreachBatch(_writer(sink, floor_table(settings, run_id))).start())
    load.start()
    measured, drained = False, False
    try:
        time.sleep(warmup_seconds)
        warm = max((p["batchId"] for p in _progress(query)), default=-1)
        time.sleep(seconds)
        measured = True
    finally:
        load.stop.set()
        load.join()
        try:
            if measured:
                # Every record produced is read before the query stops: a query stopped inside a
                # batch may have committed that batch's append without Spark reporting the batch.
                query.processAllAvailable()
                drained = True
        finally:
            query.stop()
    figures.warmup_s, figures.warmup_batches = warmup_seconds, warm + 1
    progress = [p for p in _progress(query) if p.get("numInputRows") and p["batchId"] > warm]
    for p in progress[1 if warm < 0 else 0:]:  # without a warm-up, past the first batch's start-up
        for name in SPARK_DURATIONS:
            if name in p.get("durationMs", {}):
                figures.spark.setdefault(name, []).append(p["durationMs"][name] / 1000)
    figures.batch_s = figures.spark.get("triggerExecution", [])
    figures.produced = load.sent
    figures.processed = load.sent if drained else 0  # the query read every record before it stopped
    return figures


def _store_plan(spark, settings: Settings, topic: str) -> DataFrame:  # noqa: ANN001 (a SparkSession)
    """player_stats' streaming query over topic, as `deltastate run` builds it before its batch writer."""
    from deltastate.engine.common.source import source_stream
    from deltastate.engine.keyvalue.fold import register_fold
    from deltastate.engine.keyvalue.plan import classified_stream, store_stream
    from deltastate.stores import load_store

    store = load_store(settings, "player_stats")
    return store_stream(classified_stream(source_stream(spark, settings, topic), settings, store), store,
                        register_fold(spark, store))


def _writer(sink: str, table: str) -> Callable[[DataFrame, int], object]:
    """The floor's batch writer: count the changed keys (or rows), or append them to the Delta table."""
    if sink in ("none", "plan"):
        return lambda batch, _: batch.count()
    return lambda batch, _: batch.write.format("delta").mode("append").save(table)


def run_floor_apart(settings: Settings, rate: int, seconds: float, trigger: str,
                    warmup_seconds: float, sink: str = "none") -> FreshnessFigures:
    """run_floor in a process of its own (`python -m deltastate.bench.floor`): a store measured after the floor in
    the same JVM runs slower for it, so the floor and the store share the machine, the broker and the
    load, not the JVM."""
    command = [sys.executable, "-m", "deltastate.bench.floor", str(rate), str(seconds), trigger,
               str(warmup_seconds), sink]
    done = subprocess.run(command, env={**os.environ, **settings.to_env()}, capture_output=True, text=True,
                          timeout=3600)
    if done.returncode != 0:
        raise InfraError(f"`python {' '.join(command[1:])}` failed (exit {done.returncode}): "
                         f"{done.stderr.strip()[-1500:]}")
    found = json.loads(done.stdout.strip().splitlines()[-1])
    found["slowest"] = []  # the floor has no probes
    return FreshnessFigures(**found)


def against_floor_lines(figures: FreshnessFigures, floors: dict[str, FreshnessFigures]) -> list[str]:
    """The store's micro-batch p50 over each floor's, all measured in one run: over Spark's floor,
    over Spark and Delta's (Delta's plain append and the store's own work above it), over the store
    plan's (the store's computation in Spark's micro-batch, and its write above it), and over the
    store plan's Delta floor (a plain append of the plan's rows, and the store's bookkeeping above
    it: the changelog's columns, the summary, the audit and the commit that carries it)."""
    if not figures.batch_s or any(not floors[sink].batch_s for sink in SINKS):
        return ["  against the floors: no batches with records to compare"]
    ours = percentile(figures.batch_s, 50)
    bare, landed, plan, plan_landed = (percentile(floors[sink].batch_s, 50) for sink in SINKS)
    return [f"  against the floors (each measured just before, in its own process): micro-batch p50 {ours:.3f} s",
            f"    = {ours / bare:.2f}x Spark's floor (p50 {bare:.3f} s)",
            f"    = {ours / landed:.2f}x Spark and Delta's floor (p50 {landed:.3f} s; Delta's append "
            f"{landed - bare:+.3f} s, the store's own work {ours - landed:+.3f} s)",
            f"    = {ours / plan:.2f}x the store plan's floor (p50 {plan:.3f} s; the store's computation "
            f"{plan - bare:+.3f} s over Spark's floor, its changelog write and commit {ours - plan:+.3f} s)",
            f"    = {ours / plan_landed:.2f}x the store plan's Delta floor (p50 {plan_landed:.3f} s; Delta's append "
            f"of the plan's rows {plan_landed - plan:+.3f} s, the store's bookkeeping {ours - plan_landed:+.3f} s)"]


def _progress(query) -> list[dict]:  # noqa: ANN001 (a pyspark StreamingQuery)
    return [p if isinstance(p, dict) else dict(p) for p in query.recentProgress]


def main(argv: list[str]) -> int:
    if len(argv) != 5 or argv[4] not in SINKS:
        print(f"usage: python -m deltastate.bench.floor RATE SECONDS TRIGGER WARMUP_SECONDS {'|'.join(SINKS)}",
              file=sys.stderr)
        return 2
    rate, seconds, trigger, warmup, sink = int(argv[0]), float(argv[1]), argv[2], float(argv[3]), argv[4]
    figures = run_floor(load_settings(), rate, seconds, trigger, warmup_seconds=warmup, sink=sink)
    print(json.dumps(dataclasses.asdict(figures)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
