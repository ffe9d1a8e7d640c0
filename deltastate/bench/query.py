"""Query benchmark on a generated player_stats-shaped snapshot of --keys keys:

  direct      single-thread read-index latencies through Queries (get, top 100, rank) and the
              multi-key get's keys per second;
  in-process  get, top and range through the service's read path (lease, freshness, read) from
              client threads, without HTTP;
  wrk         point gets over HTTP from wrk against `deltastate serve --workers N` (its fast path for
              point reads on, and off: DELTASTATE_FAST_PATH=0, every request through FastAPI) and
              against a bare FastAPI app of the same worker count (the floor of the web stack), with
              the ratios, the server CPU time per request and the server's resident size; and the
              top 100 (a leaderboard read, which FastAPI routes) against both serves;
  spark-sql   the same point gets answered by Spark SQL reading a Delta table of the same rows (the
              "ask the database" approach interactive queries replace), and the ratio.

The snapshot is built from generated rows by the production publisher (snapshot/generated.py), not by
Spark, so a million keys take seconds. Everything lives under <home>/bench-query, never touching the
home's own snapshots. Figures are printed, never asserted.
"""

from __future__ import annotations

import dataclasses
import os
import random
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from deltastate.bench.http_load import LoadCell
from deltastate.config import Settings

OPS = ("get", "top", "range")


@dataclass(frozen=True)
class Cell:
    mode: str  # in-process | http | spark
    op: str
    concurrency: int
    requests: int
    errors: int
    seconds: float
    latencies_ms: tuple[float, ...] = field(repr=False)

    def pct(self, p: float) -> float:
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] if ordered else float("nan")

    @property
    def throughput(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    def line(self) -> str:
        return (f"  {self.mode:<10} {self.op:<6} c={self.concurrency:<3} {self.requests:>8,} req "
                f"{self.throughput:>9,.0f} req/s  p50 {self.pct(50):8.2f} ms  p95 {self.pct(95):8.2f} ms  "
                f"p99 {self.pct(99):8.2f} ms" + (f"  errors {self.errors}" if self.errors else ""))


def bench_settings(settings: Settings) -> Settings:
    home = settings.home / "bench-query"
    home.mkdir(parents=True, exist_ok=True)
    return dataclasses.replace(settings, home=home, storage_root=str(home / "data"), snapshot_keep=1)


def build_snapshot(settings: Settings, keys: int) -> float:
    """Publish a snapshot of `keys` generated player_stats rows; returns the seconds it took."""
    from deltastate.snapshot.generated import GeneratedStore, player_stats_sql, publish_generated
    from deltastate.stores import load_store

    started = time.perf_counter()
    store = load_store(settings, "player_stats")
    publish_generated(settings, [GeneratedStore(store, lambda con: con.execute(
        f"INSERT INTO player_stats {player_stats_sql(keys)}"))])
    return time.perf_counter() - started


def key_of(i: int) -> str:
    return f"player-{i:09d}"


def drive(mode: str, op: str, concurrency: int, seconds: float, call: Callable[[random.Random], bool]) -> Cell:
    """Run `call` from `concurrency` threads for `seconds`; each call returns False on an error."""
    stop = threading.Event()
    latencies: list[list[float]] = [[] for _ in range(concurrency)]
    errors = [0] * concurrency

    def worker(i: int) -> None:
        rng = random.Random(i)
        mine = latencies[i]
        while not stop.is_set():
            t0 = time.perf_counter()
            ok = call(rng)
            mine.append((time.perf_counter() - t0) * 1000)
            errors[i] += 0 if ok else 1

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(concurrency)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    flat = tuple(x for part in latencies for x in part)
    return Cell(mode, op, concurrency, len(flat), sum(errors), elapsed, flat)


def in_process_calls(settings: Settings, keys: int) -> tuple[dict[str, Callable[[random.Random], bool]], Callable[[], None]]:
    from deltastate.service.options import ServiceOptions
    from deltastate.service.state import ReadOptions, ServiceState

    state = ServiceState(settings, ServiceOptions())
    plain = ReadOptions()

    def get(rng: random.Random) -> bool:
        with state.reading(["player_stats"], plain) as r:
            return len(r.queries.get("player_stats", key_of(rng.randrange(keys))).rows) == 1

    def top(rng: random.Random) -> bool:
        with state.reading(["player_stats"], plain) as r:
            return len(r.queries.top("player_stats", n=10).rows) == 10

    def key_range(rng: random.Random) -> bool:
        i = rng.randrange(max(1, keys - 100))
        with state.reading(["player_stats"], plain) as r:
            return len(r.queries.range("player_stats", key_of(i), key_of(i + 99), limit=100).rows) == min(100, keys)

    return {"get": get, "top": top, "range": key_range}, state.close


def spark_point_gets(settings: Settings, keys: int, gets: int) -> tuple[Cell, float]:
    """Write the snapshot's rows to a Delta table once (reused while --keys is the same), then time
    `gets` point lookups through spark.read.format("delta").where(key = ...). Returns the cell and
    the seconds the one-time Delta write took (0 when reused)."""
    import duckdb
    from pyspark.sql import functions as F

    from deltastate.infra.spark import get_spark
    from deltastate.snapshot.catalog import current_snapshot

    spark = get_spark(settings, "deltastate-bench-query")
    path = f"{settings.storage_root}/bench/player_stats_{keys}"
    marker = Path(settings.storage_root) / "bench" / f"player_stats_{keys}.done"
    written = 0.0
    if not marker.exists():
        started = time.perf_counter()
        staging = Path(settings.storage_root) / "bench" / f"staging_{keys}.parquet"
        staging.parent.mkdir(parents=True, exist_ok=True)
        con = duckdb.connect(str(current_snapshot(settings)), read_only=True)
        try:
            con.execute(f"COPY player_stats TO '{staging}' (FORMAT parquet)")
        finally:
            con.close()
        spark.read.parquet(str(staging)).write.format("delta").mode("overwrite").save(path)
        staging.unlink()
        marker.write_text("ok\n")
        written = time.perf_counter() - started
    rng = random.Random(99)
    table = spark.read.format("delta").load(path)
    table.where(F.col("key") == key_of(0)).collect()  # warm-up: JIT, Delta log, file listing
    latencies, errors = [], 0
    started = time.perf_counter()
    for _ in range(gets):
        key = key_of(rng.randrange(keys))
        t0 = time.perf_counter()
        rows = spark.read.format("delta").load(path).where(F.col("key") == key).collect()
        latencies.append((time.perf_counter() - t0) * 1000)
        errors += 0 if len(rows) == 1 else 1
    return Cell("spark-sql", "get", 1, gets, errors, time.perf_counter() - started, tuple(latencies)), written


@dataclass
class QueryBench:
    keys: int
    cores: int
    build_seconds: float
    cells: list[Cell] = field(default_factory=list)
    delta_write_seconds: float | None = None
    direct: list[str] = field(default_factory=list)  # single-thread read-index figures
    load: list[LoadCell] = field(default_factory=list)
    workers: int = 1
    serve_rss_mb: float | None = None

    def lines(self) -> list[str]:
        out = [f"bench query: {self.keys:,} keys (player_stats shape), {self.cores} cores; snapshot and read "
               f"index built in {self.build_seconds:.1f} s (DuckDB, no Spark)"]
        out += self.direct
        out += [c.line() for c in self.cells]
        out += [c.line() for c in self.load]
        for serve in (c for c in self.load if c.target.startswith("serve") and c.op == "get"):
            floor = next((c for c in self.load if c.target == "floor" and c.connections == serve.connections), None)
            if floor and floor.requests_per_s:
                path = "fast path" if serve.target == "serve" else "FastAPI only"
                out.append(f"  c={serve.connections}: deltastate serve --workers {self.workers} ({path}) at "
                           f"{serve.requests_per_s / floor.requests_per_s:.2f}x the bare FastAPI floor")
        if self.serve_rss_mb is not None:
            out.append(f"  deltastate serve --workers {self.workers} resident size: {self.serve_rss_mb:,.0f} MB")
        if self.delta_write_seconds:
            out.append(f"  (Delta table for the Spark gets written once in {self.delta_write_seconds:.1f} s, untimed)")
        spark = next((c for c in self.cells if c.mode == "spark-sql"), None)
        for mode in ("in-process", "http"):
            mine = next((c for c in self.cells if c.mode == mode and c.op == "get" and c.concurrency == 1), None)
            if spark and mine and mine.requests:
                out.append(f"  point get p50, Spark SQL on Delta / {mode} snapshot: "
                           f"{spark.pct(50) / mine.pct(50):,.0f}x ({spark.pct(50):.1f} ms vs {mine.pct(50):.3f} ms)")
        return out


def _warm(calls: dict[str, Callable[[random.Random], bool]]) -> None:
    """One untimed call per op: the first opens the snapshot and fills caches."""
    rng = random.Random(0)
    for call in calls.values():
        call(rng)


def direct_reads(settings: Settings, keys: int, reads: int = 20_000) -> list[str]:
    """Single-thread latencies of the read index through Queries (no service, no HTTP), and the
    multi-key get's keys per second."""
    from deltastate.query.reads import Queries

    rng = random.Random(5)
    out = []
    with Queries(settings) as queries:
        queries.get("player_stats", key_of(0))
        for name, call in (("get", lambda: queries.get("player_stats", key_of(rng.randrange(keys)))),
                           ("top 100", lambda: queries.top("player_stats", n=100)),
                           ("rank", lambda: queries.rank("player_stats", key_of(rng.randrange(keys))))):
            samples = []
            for _ in range(reads if name != "top 100" else reads // 10):
                t0 = time.perf_counter()
                call()
                samples.append((time.perf_counter() - t0) * 1e6)
            samples.sort()
            out.append(f"  direct     {name:<7} p50 {samples[len(samples) // 2]:8.1f} us  "
                       f"p99 {samples[int(len(samples) * 0.99)]:8.1f} us  ({len(samples):,} reads, one thread)")
        batch = [key_of(rng.randrange(keys)) for _ in range(1_000)]
        started, rounds = time.perf_counter(), 50
        for _ in range(rounds):
            queries.get_many("player_stats", batch)
        rate = rounds * len(batch) / (time.perf_counter() - started)
        out.append(f"  direct     batchGet 1,000 keys: {rate:,.0f} keys/s")
    return out


def _warm_http(target: str, port: int, keys: int, rounds: int = 20, op: str = "get") -> None:
    """Untimed wrk rounds of op until one answers every request: every worker opens its snapshot and
    maps its index first (and, for the top, its ordering files), which on a busy machine takes longer
    than one round."""
    from deltastate.bench import http_load as load

    for _ in range(rounds):
        cell = load.run_wrk(target, port, keys, 16, 3, op=op)
        if cell.requests_per_s > 0 and not cell.errors:
            return


def http_load(settings: Settings, keys: int, concurrency: tuple[int, ...], seconds: float, port: int,
              workers: int, figures: QueryBench, echo: Callable[[str], None]) -> None:
    """wrk against deltastate serve (fast path on and off) and the bare FastAPI floor, same worker
    count, same machine, on ports port, port + 1 and port + 2."""
    from deltastate.bench import http_load as load

    if not load.wrk_available():
        echo("  wrk not installed (apt-get install wrk, or `DELTASTATE_WRK=1 bash scripts/setup.sh`): no wrk cells")
        return
    figures.workers = workers
    # All three servers run at once and each concurrency level asks them one after the other, so a
    # machine busy with other work weighs on the three alike.
    targets = ("serve", "serve-fastapi", "floor")
    procs: dict[str, subprocess.Popen] = {}
    try:
        for offset, target in enumerate(targets):
            if target == "floor":
                procs[target] = load.start_floor(port + offset, workers, keys)
            else:
                procs[target] = load.start_serve(settings, port + offset, workers, fast_path=target == "serve")
        asked = {t: keys if t != "floor" else min(keys, load.FLOOR_KEYS) for t in targets}
        for offset, target in enumerate(targets):
            _warm_http(target, port + offset, asked[target])
        for c in concurrency:
            for offset, target in enumerate(targets):
                figures.load.append(load.run_wrk(target, port + offset, asked[target], c, seconds,
                                                 pid=procs[target].pid))
                echo(figures.load[-1].line())
        # The top's first requests in a worker open its ordering files and touch its rows' pages:
        # warmed like the gets above, so the cells measure answers, not first touches.
        for offset, target in enumerate(targets[:2]):
            _warm_http(target, port + offset, keys, op="top100")
        for c in sorted({1, 16} & set(concurrency)) or [concurrency[0]]:
            for offset, target in enumerate(targets[:2]):
                figures.load.append(load.run_wrk(target, port + offset, keys, c, seconds, op="top100",
                                                 pid=procs[target].pid))
                echo(figures.load[-1].line())
        figures.serve_rss_mb = load.tree_rss_mb(procs["serve"].pid)
    finally:
        for proc in procs.values():
            load.stop(proc)


def run_query_bench(settings: Settings, keys: int, concurrency: tuple[int, ...], seconds: float,
                    http: bool = True, spark_gets: int = 20, port: int = 18765,
                    echo: Callable[[str], None] = print, workers: int | None = None) -> QueryBench:
    home = bench_settings(settings)
    figures = QueryBench(keys, os.cpu_count() or 1, build_snapshot(home, keys))
    echo(figures.lines()[0])
    figures.direct = direct_reads(home, keys)
    for line in figures.direct:
        echo(line)
    calls, close = in_process_calls(home, keys)
    try:
        _warm(calls)
        for op in OPS:
            for c in concurrency:
                figures.cells.append(drive("in-process", op, c, seconds, calls[op]))
                echo(figures.cells[-1].line())
    finally:
        close()
    if http:
        http_load(home, keys, concurrency, seconds, port, workers or figures.cores, figures, echo)
    if spark_gets:
        cell, written = spark_point_gets(home, keys, spark_gets)
        figures.cells.append(cell)
        figures.delta_write_seconds = written
        echo(cell.line())
    return figures


__all__ = ["Cell", "QueryBench", "run_query_bench"]
