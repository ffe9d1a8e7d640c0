"""Kafka Streams' closing and retention rules through the real parts: a seeded randomized stream,
out of order, with events at and around the close time, late ones and deletes, produced to a real
broker, applied by Spark in several micro-batches over two runs, written to Delta, published to
DuckDB and cleaned up; everything is compared with tests/support/reference_windowed.py, a model of Kafka
Streams' aggregate processors and RocksDB stores that imports nothing from deltastate.

The stores are the reference ones with short settings, so that retention decides within a few
minutes of stream time: a session store with retention = gap + grace (Kafka Streams' default) and
one with no grace and retention = gap (the least it accepts); a hopping window store whose
retention is not a multiple of its advance (the window store counts it from its newest window
start, not from stream time)."""

from __future__ import annotations

import dataclasses
import json
import random
import shutil
from pathlib import Path

import pytest
from pyspark.sql import functions as F
from support.reference import ReferenceTopic
from support.reference_windowed import SPECS, Outcome, Spec, run, windows_for
from support.windowed import assert_state_equal, audit_totals, dead_letters, snapshot_rows

from deltastate.changelog.reader import latest_state
from deltastate.engine import run_store
from deltastate.engine.windowed.records import open_window_range
from deltastate.ingest.partitioner import partition_for
from deltastate.ingest.producer import ensure_topic, produce_records
from deltastate.maintenance import cleanup_store
from deltastate.snapshot import publish_snapshot
from deltastate.stores import load_store
from deltastate.stores.definition import WindowSpec

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1500)]
PARTITIONS = 4
T0 = 1_700_000_000_000

# (store, the store file's line replaced, the reference spec): gap/grace/retention or size/advance/grace/retention.
CASES = {
    "sessions_gap_plus_grace": ("user_sessions", "session: {gap: 10s, grace: 2s, retention: 12s}",
                                dataclasses.replace(SPECS["user_sessions"], gap=10_000, grace=2_000, retention=12_000)),
    "sessions_no_grace": ("user_sessions", "session: {gap: 10s, grace: 0ms, retention: 10s}",
                          dataclasses.replace(SPECS["user_sessions"], gap=10_000, grace=0, retention=10_000)),
    "windows_hopping": ("trade_stats", "window: {size: 5s, advance: 1s, grace: 1s, retention: 7500ms}",
                        dataclasses.replace(SPECS["trade_stats"], size=5_000, advance=1_000, grace=1_000,
                                            retention=7_500)),
}


def schemas_with(settings, folder: Path, store: str, line: str) -> Path:
    """A copy of the schemas with the store's window or session line replaced."""
    shutil.copytree(settings.schemas_dir, folder)
    path = folder / "stores" / f"{store}.yaml"
    prefix = line.split(":")[0] + ":"
    lines = path.read_text().splitlines()
    assert sum(x.startswith(prefix) for x in lines) == 1
    path.write_text("\n".join(line if x.startswith(prefix) else x for x in lines) + "\n")
    return folder


def stream(spec: Spec, n: int, rng: random.Random, clock: dict[int, int]) -> list[tuple[bytes, bytes | None]]:
    """Records whose event times follow a per-partition clock (advanced in place): most at the
    clock, some out of order within the close time, some at it (+-1 ms), some far behind (late, or
    reaching a later session), and a few deletes."""
    keys = [f"k{i:02d}" for i in range(30)]
    closing = spec.gap + spec.grace if spec.kind == "session" else spec.size + spec.grace
    out: list[tuple[bytes, bytes | None]] = []
    for _ in range(n):
        key = rng.choice(keys)
        p = partition_for(key, PARTITIONS)
        clock[p] += rng.choice((0, 50, 150, 400, 1_000, 2_500))
        u = rng.random()
        if u < 0.02:
            out.append((key.encode(), None))
            continue
        if u < 0.62:
            ts = clock[p]
        elif u < 0.82:
            ts = clock[p] - rng.randint(0, closing)
        elif u < 0.94:
            ts = clock[p] - closing + rng.choice((-1, 0, 1))
        else:
            ts = clock[p] - rng.randint(closing, 4 * closing)
        doc = ({"user_id": key, "page": f"/p{rng.randint(0, 99)}", "ts": ts} if spec.kind == "session"
               else {"symbol": key, "price": round(rng.uniform(1, 100), 2), "qty": rng.randint(1, 9), "ts": ts})
        out.append((key.encode(), json.dumps(doc).encode()))
    return out


def accepted_only_by_the_gap(spec: Spec, records, expected: Outcome) -> int:
    """Session events applied although older than stream time - grace: late under a close time
    without the gap."""
    late = {(r.partition, r.offset) for r in expected.late}
    st: dict[int, int] = {}
    count = 0
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        if r.value is None:
            continue
        ts = json.loads(r.value)["ts"]
        st[r.partition] = max(st.get(r.partition, ts), ts)
        count += (r.partition, r.offset) not in late and ts < st[r.partition] - spec.grace
    return count


# The suite runs one session and one window case; `pytest -m soak` adds the session store without grace.
SOAK_CASES = {"sessions_no_grace"}


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.soak) if c in SOAK_CASES else c
                                  for c in sorted(CASES)])
def test_stream_equals_kafka_streams_model(case, broker, spark, make_settings, topic, tmp_path):
    store, line, spec = CASES[case]
    base = make_settings()
    settings = dataclasses.replace(base, schemas_dir=schemas_with(base, tmp_path / "schemas", store, line))
    definition = load_store(settings, store)
    assert ensure_topic(broker, topic, PARTITIONS)
    ref = ReferenceTopic(PARTITIONS, partition_for)
    rng, clock = random.Random(7), dict.fromkeys(range(PARTITIONS), T0)
    # Two runs, the second resuming from the stream times the first carried: the first in two
    # micro-batches (stream times carried from batch to batch), the second in one (stream times
    # reloaded from the audit). Kafka's rate limit floors each partition's share, so a limit a little
    # over half the records leaves no trailing batch of a few records (and one batch needs a limit
    # above the record count).
    for n, limit in ((800, 420), (700, 800)):
        part = stream(spec, n, rng, clock)
        assert produce_records(broker, topic, part).delivered == len(part)
        ref.append(part)
        batches = run_store(settings, store, once=True, topic=topic, max_offsets_per_trigger=limit).batches
        assert batches == (2 if limit < n else 1)
        expected = run(spec, ref.records)
        publish_snapshot(spark, settings, [definition])
        assert len(expected.state) > 15
        assert_state_equal(snapshot_rows(settings, store), expected.state)
    assert dead_letters(spark, settings, store, "reason = 'late'") == {
        (r.partition, r.offset): (r.key, r.value) for r in expected.late}
    assert audit_totals(spark, settings, store) == {
        "records_in": len(ref.records), "applied": expected.applied, "dead_lettered": len(expected.late),
        "late": len(expected.late)}

    # The workload reaches what the rules decide.
    assert len(expected.late) > 20
    forever = run(dataclasses.replace(spec, retention=10**13), ref.records)
    if spec.kind == "session":
        assert accepted_only_by_the_gap(spec, ref.records, expected) > 20
        # Sessions that exist because retention hid an older session within the gap of an event.
        assert set(expected.state) - set(forever.state)
    else:  # windows a stream-time horizon (end > stream time - retention) would still show
        shown = {e for e in forever.state
                 if e[2] > expected.stream_time[partition_for(e[0], PARTITIONS)] - spec.retention}
        assert shown - set(expected.state)

    # Cleanup tombstones exactly what the store no longer retains: the changelog's state becomes
    # the reference's.
    report = cleanup_store(settings, store, spark=spark)
    assert report.tombstones_written > 0
    live = {(r["key"], r["window_start"], r["window_end"]) for r in latest_state(spark, settings, definition).collect()}
    assert live == set(expected.state)


def test_open_windows_in_spark_are_kafka_streams_windows(spark):
    """records.open_window_range (the Spark columns the first pass uses) against TimeWindows.windowsFor
    and KStreamWindowAggregate's close time, over event times around window edges and stream times
    around the close time."""
    spec = CASES["windows_hopping"][2]
    window = WindowSpec(spec.size, spec.advance, spec.grace, spec.retention)
    grid = [(ts, st) for st in (5_999, 6_000, 6_001, 20_000, 20_999, 21_000, 21_001)
            for ts in sorted({*range(max(0, st - 8_000), st + 1, 500), *[st - d for d in (5_999, 6_000, 6_001)
                                                                          if st - d >= 0], 0, 1})]
    df = spark.createDataFrame(grid, "ts bigint, st bigint")
    first, last = open_window_range(F.col("ts"), F.col("st"), window)
    got = {(r["ts"], r["st"]): (r["f"], r["l"]) for r in df.select("ts", "st", first.alias("f"), last.alias("l")).collect()}
    for ts, st in grid:
        taking = [s for s in windows_for(spec, ts) if s + spec.size > st - spec.grace]
        f, last_start = got[(ts, st)]
        if taking:
            assert (f, last_start) == (min(taking), max(taking)), (ts, st)
        else:
            assert f > last_start, (ts, st)  # late
    assert any(not [s for s in windows_for(spec, ts) if s + spec.size > st - spec.grace] for ts, st in grid)
