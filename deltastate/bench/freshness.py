"""Freshness benchmark: how long a produced record takes to become visible to a REST read.

A continuous run of one store (in this process) on its own topic, storage root and definitions; the
REST service (`deltastate serve`, a subprocess) over a snapshot published after the first batch; a
steady load at --rate events/s of the store's bench workload; and every second one probe: a record
for a key nobody else writes, produced with no linger, then a read of that key at the asked
consistency polled every 50 ms until the key is there. Printed: produce -> visible
percentiles, the micro-batch durations with the batch writer's phases and Spark's own durations, the
input and processing rates and the backlog left at the end, the CPU an idle trigger costs, and the
machine's core count.
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
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from deltastate.bench.probe_trace import BatchTiming, ProbeBreakdown, ProbeTiming, slowest
from deltastate.changelog.layout import OFFSETS
from deltastate.config import Settings
from deltastate.stores.durations import parse_duration_ms

# A probe's read is polled every 50 ms: a visible figure is at most that late. The service's answers
# share the two cores with the store they measure, and polled every 10 ms they took about a quarter
# of a core from it, which Spark's floors, measured without a service, do not pay.
POLL_S = 0.05
PROBE_TIMEOUT_S = 30.0
PROBE_SEED = 20_000  # the pauses between probes: the same for every run of the benchmark
BEHIND_AFTER = 3  # probes missed in a row: the store is not keeping up, and probing stops
READ_TIMEOUT_S = 10.0
SPARK_DURATIONS = ("latestOffset", "queryPlanning", "walCommit", "addBatch", "commitOffsets", "triggerExecution")


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))]


@dataclass
class FreshnessFigures:
    store: str
    store_type: str
    consistency: str
    rate: int
    trigger: str
    cores: int
    visible_s: list[float] = field(default_factory=list)  # per probe that became visible
    missed: int = 0  # probes not visible within PROBE_TIMEOUT_S
    fell_behind_at: int | None = None  # the probe after which BEHIND_AFTER misses in a row stopped probing
    slow_reads: int = 0  # probe reads that got no answer within READ_TIMEOUT_S (polled again)
    batch_s: list[float] = field(default_factory=list)  # triggerExecution of batches that read records
    phases: dict[str, list[float]] = field(default_factory=dict)  # the batch writer's phases
    spark: dict[str, list[float]] = field(default_factory=dict)  # Spark's durationMs, seconds
    input_rate: float = 0.0
    processing_rate: float = 0.0
    produced: int = 0
    processed: int = 0
    idle_seconds: float = 0.0
    idle_triggers: int = 0
    idle_cpu_s: float = 0.0  # driver JVM + this process over the idle period
    warmup_s: float = 0.0  # load running before the first probe
    warmup_batches: int = 0  # micro-batches in the warm-up, left out of every figure
    slowest: list[ProbeBreakdown] = field(default_factory=list)  # the slowest probes, split (probe_trace.py)

    def lines(self) -> list[str]:
        out = [f"bench freshness {self.store} ({self.store_type}): consistency={self.consistency}, "
               f"{self.rate:,} events/s, trigger {self.trigger}, {self.cores} cores"]
        if self.warmup_batches:
            out.append(f"  warm-up: {self.warmup_s:.0f} s of load before the measured batches ({self.warmup_batches} "
                       "micro-batches: the JVM's start and JIT, not counted)")
        if self.visible_s:
            v = self.visible_s
            out.append(f"  produce -> visible:  p50 {percentile(v, 50):.3f} s  p95 {percentile(v, 95):.3f} s  "
                       f"p99 {percentile(v, 99):.3f} s  max {max(v):.3f} s  ({len(v)} probes, {self.missed} missed, "
                       f"{self.slow_reads} reads over {READ_TIMEOUT_S:.0f} s)")
        if self.slowest:
            out.append("  slowest probes (wait for a batch + the batch + read after its commit):")
            out.extend(f"    {b.describe()}" for b in self.slowest)
        if self.fell_behind_at is not None:
            out.append(f"  fell behind: {BEHIND_AFTER} probes in a row were not visible within "
                       f"{PROBE_TIMEOUT_S:.0f} s; probing stopped after probe {self.fell_behind_at + 1}. "
                       "The store does not keep up with this rate on this machine")
        if self.batch_s:
            b = self.batch_s
            out.append(f"  micro-batch:         p50 {percentile(b, 50):.3f} s  p99 {percentile(b, 99):.3f} s  "
                       f"({len(b)} batches with records)")
        for name, values in {**self.spark, **{f"writer.{k}": v for k, v in self.phases.items()}}.items():
            if values:
                out.append(f"    {name:<24} p50 {percentile(values, 50):.3f} s  p99 {percentile(values, 99):.3f} s")
        if self.visible_s or self.missed:  # a store run (the floor has no probes)
            out.append(f"  input {self.input_rate:,.0f} events/s, processed {self.processing_rate:,.0f} events/s; "
                       f"backlog at the end {self.produced - self.processed:,} of {self.produced:,} produced")
        if self.idle_triggers:
            out.append(f"  idle: {self.idle_cpu_s:.2f} CPU s over {self.idle_seconds:.0f} s "
                       f"({self.idle_triggers} triggers): {1000 * self.idle_cpu_s / self.idle_triggers:.1f} ms "
                       "CPU per idle trigger")
        return out


class SteadyLoad(threading.Thread):
    """Produces the store's bench workload at `rate` events/s, in 10 ms slices, remembering the
    newest event time so that probes are not late for window and session stores."""

    def __init__(self, bootstrap: str, topic: str, store: str, rate: int, time_field: str) -> None:
        super().__init__(daemon=True)
        from deltastate.bench.ingest import bench_records

        self.records = bench_records(store, 10**9, 100_000 if store == "player_stats" else 1_000, seed=7)
        self.bootstrap, self.topic, self.rate, self.time_field = bootstrap, topic, rate, time_field
        self.stop = threading.Event()
        self.sent = 0
        self.newest_ts = 0

    def run(self) -> None:
        from confluent_kafka import Producer

        from deltastate.ingest.producer import producer_config

        producer = Producer(producer_config(self.bootstrap, **{"linger.ms": 5}))
        started = time.monotonic()
        while not self.stop.is_set():
            due = int((time.monotonic() - started) * self.rate)
            while self.sent < due:
                key, value = next(self.records)
                producer.produce(self.topic, key=key, value=value)
                if value is not None:
                    self.newest_ts = max(self.newest_ts, int(json.loads(value).get(self.time_field, 0)))
                self.sent += 1
            producer.poll(0)
            time.sleep(0.01)
        producer.flush(30)


def _probe_path(store_type: str, store: str, key: str) -> str:
    suffix = {"key_value": "", "window": "/windows", "session": "/sessions"}[store_type]
    return f"/stores/{store}/keys/{key}{suffix}"


def _visible(response, store_type: str) -> bool:
    if response.status_code != 200:
        return False
    return store_type == "key_value" or bool(response.json()["rows"])


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_freshness_bench(settings: Settings, store_name: str, rate: int, probes: int, trigger: str,
                        consistency: str = "committed", port: int = 18766, idle_seconds: float = 20.0,
                        echo: Callable[[str], None] = print, warmup_seconds: float = 60.0) -> FreshnessFigures:
    """Probes a continuously running store under steady load. The first warmup_seconds of load
    (at least 5 s after the service starts) are not measured: a fresh driver JVM spends its first
    minute compiling Spark's code, and its batches then say how a process starts, not how a running
    store keeps up."""
    import httpx
    from confluent_kafka import Producer

    from deltastate.bench.http_load import start_serve, stop
    from deltastate.bench.ingest import bench_records
    from deltastate.engine import run_store
    from deltastate.infra.spark import get_spark
    from deltastate.ingest.producer import ensure_topic, producer_config
    from deltastate.snapshot import publish_snapshot
    from deltastate.stores import load_store

    run_id = uuid.uuid4().hex[:8]
    home = settings.home / "bench" / f"freshness-{run_id}"
    schemas = home / "schemas"
    shutil.copytree(settings.schemas_dir, schemas)
    topic = f"bench-freshness-{store_name}-{run_id}"
    path = schemas / "stores" / f"{store_name}.yaml"
    definition = yaml.safe_load(path.read_text())
    definition["source"]["topic"] = topic  # the service, the run and the probes all read the bench topic
    path.write_text(yaml.safe_dump(definition))
    bench = dataclasses.replace(settings, storage_root=str(home / "data"), schemas_dir=schemas)
    store = load_store(bench, store_name)
    ensure_topic(settings.kafka_bootstrap, topic, store.source.partitions)
    figures = FreshnessFigures(store.name, store.type, consistency, rate, trigger, os.cpu_count() or 0)

    reports, first_batch = [], threading.Event()
    timings: list[BatchTiming] = []
    probed: list[ProbeTiming] = []

    def on_batch(report) -> None:
        ended = time.monotonic()
        reports.append(report)
        timings.append(BatchTiming.of(report.batch_id, ended, report.phases, (report.audit or {}).get(OFFSETS),
                                      report.phases.get("live", 0.0)))
        first_batch.set()

    spark = get_spark(bench)
    stop_run = threading.Event()
    outcome: dict = {}
    runner = threading.Thread(target=lambda: outcome.update(result=run_store(
        bench, store.name, once=False, trigger=f"{parse_duration_ms(trigger)} milliseconds", listener=on_batch, stop_event=stop_run)), daemon=True)
    load = SteadyLoad(settings.kafka_bootstrap, topic, store.name, rate, store.event_time_field)
    load.start()
    loading = time.monotonic()
    runner.start()
    if not first_batch.wait(300):
        raise RuntimeError(f"store {store.name!r}: no micro-batch within 300 s")
    publish_snapshot(spark, bench, [store])
    # Delivery reports for every probe: its partition and offset place it in a batch (probe_trace.py).
    probe_producer = Producer(producer_config(settings.kafka_bootstrap,
                                              **{"linger.ms": 0, "delivery.report.only.error": False}))
    params = {"fresh": "true"} if consistency == "committed" else {"consistency": consistency}
    template = json.loads(next(iter(bench_records(store.name, 1, 1, seed=8)))[1])
    service, warm = None, set()
    try:
        service = start_serve(bench, port, workers=1)
        time.sleep(max(5.0, warmup_seconds - (time.monotonic() - loading)))
        figures.warmup_s = time.monotonic() - loading
        warm = {r.batch_id for r in reports}  # every batch so far is the warm-up's
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=READ_TIMEOUT_S) as client:
            def probe(i: int) -> float | None:
                key = f"probe-{run_id}-{i:05d}"
                event = {**template, store.key_field: key, store.event_time_field: load.newest_ts or
                         template[store.event_time_field]}
                produced_at, landed = time.monotonic(), []
                probe_producer.produce(topic, key=key.encode(), value=json.dumps(event).encode(),
                                       on_delivery=lambda err, msg: landed.append(msg) if err is None else None)
                probe_producer.flush(10)
                while time.monotonic() - produced_at < PROBE_TIMEOUT_S:
                    try:
                        response = client.get(_probe_path(store.type, store.name, key), params=params)
                    except httpx.TimeoutException:
                        # A read the service has not answered in time is a slow answer, not the end of
                        # the bench: it is counted, and the probe is polled again until its deadline.
                        figures.slow_reads += 1
                        continue
                    if _visible(response, store.type):
                        visible_at = time.monotonic()
                        if landed:
                            probed.append(ProbeTiming(landed[0].partition(), landed[0].offset(), produced_at, visible_at))
                        return visible_at - produced_at
                    time.sleep(POLL_S)
                return None

            probe_each_second(figures, probes, probe)
        figures.processed = sum(r.records_in for r in reports)
        load.stop.set()
        load.join()
        figures.produced = load.sent + len(figures.visible_s) + figures.missed  # probes sent
        _measure_idle(figures, spark, reports, trigger, idle_seconds)
    finally:
        load.stop.set()
        if service is not None:
            stop(service)
        stop_run.set()
        runner.join(120)
    figures.warmup_batches = len(warm)
    figures.slowest = slowest(probed, timings)
    _batch_figures(figures, outcome.get("result"), [r for r in reports if r.batch_id not in warm],
                   after=max(warm, default=-1))
    return figures


def probe_each_second(figures: FreshnessFigures, probes: int, probe: Callable[[int], float | None]) -> None:
    """Runs probe(i) about once a second and records how long each took to become visible (None:
    not within PROBE_TIMEOUT_S). BEHIND_AFTER misses in a row end the probing: the store is not
    keeping up, and every further probe would wait out its timeout behind a growing backlog.

    Each probe waits a random part of a second more before the next: a probe that took over a
    second would otherwise send the next one the moment a commit became visible, always at the same
    point of the stream's batch cycle (just before or just after the next batch takes its offsets),
    where a real result arrives at any point of it."""
    rng = random.Random(PROBE_SEED)
    in_a_row = 0
    for i in range(probes):
        tick = time.monotonic()
        seconds = probe(i)
        if seconds is None:
            figures.missed += 1
            in_a_row += 1
            if in_a_row == BEHIND_AFTER:
                figures.fell_behind_at = i
                return
            continue
        in_a_row = 0
        figures.visible_s.append(seconds)
        time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)) + rng.random())


def _measure_idle(figures: FreshnessFigures, spark, reports: list, trigger: str, idle_seconds: float) -> None:
    """CPU of the driver JVM and this process while the caught-up store has nothing to read."""
    if idle_seconds <= 0:
        return
    deadline = time.monotonic() + 180
    while sum(r.records_in for r in reports) < figures.produced and time.monotonic() < deadline:
        time.sleep(0.5)  # until the stream has read everything produced
    time.sleep(2 * parse_duration_ms(trigger) / 1000 + 1)  # and its last batch has ended
    jvm_pid = int(spark._jvm.java.lang.ProcessHandle.current().pid())
    before = _cpu_seconds(jvm_pid) + _cpu_seconds(os.getpid())
    time.sleep(idle_seconds)
    figures.idle_cpu_s = _cpu_seconds(jvm_pid) + _cpu_seconds(os.getpid()) - before
    figures.idle_seconds = idle_seconds
    figures.idle_triggers = max(1, int(1000 * idle_seconds / parse_duration_ms(trigger)))


def _batch_figures(figures: FreshnessFigures, result, reports: list, after: int = -1) -> None:
    """The figures of the batches that read records, those numbered after `after` (the warm-up's last)."""
    busy = [r for r in reports if r.records_in]
    for report in busy:
        for name, seconds in report.phases.items():
            figures.phases.setdefault(name, []).append(seconds)
    progress = [] if result is None else [p for p in result.progress
                                          if p.get("numInputRows") and int(p.get("batchId", 0)) > after]
    for p in progress:
        for name in SPARK_DURATIONS:
            if name in p.get("durationMs", {}):
                figures.spark.setdefault(name, []).append(p["durationMs"][name] / 1000)
    figures.batch_s = figures.spark.get("triggerExecution", [])
    if progress:
        figures.input_rate = statistics.fmean(p.get("inputRowsPerSecond") or 0.0 for p in progress)
        figures.processing_rate = statistics.fmean(p.get("processedRowsPerSecond") or 0.0 for p in progress)
