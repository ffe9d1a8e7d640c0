"""A window or session store's batch that writes its state through runs one Spark job: its summary
(counts, offsets, stream times per partition) is observed while the write fills the batch's cache
(engine/windowed/summary.py). Checked through real runs of seeded stores: each batch of a
continuous run after its first runs one job; a window batch with tombstones after one without
writes again with the delete plan and leaves no file its commits do not name, and one after a batch
with tombstones plans for them at once, in its one job; a batch whose summary the observation cannot give (a record of a
partition it has no columns for) takes it from the cache in a second job. State, audit and dead
letters equal the reference computed from the same records (tests/support/reference_windowed.py)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.reference import ReferenceTopic
from support.reference_windowed import SPECS, run
from support.windowed import assert_state_equal, audit_totals, dead_letters, snapshot_rows, workload

from deltastate.changelog.layout import OFFSETS
from deltastate.engine import run_store
from deltastate.engine.common.report import BatchReport
from deltastate.engine.windowed import summary as summary_module
from deltastate.ingest.partitioner import partition_for
from deltastate.ingest.producer import ensure_topic, produce_records
from deltastate.ingest.timed_workloads import TimeShape, click_records, pulse_records, trade_records
from deltastate.snapshot import publish_snapshot
from deltastate.stores import load_store

pytestmark = pytest.mark.integration
PARTITIONS = 4


WRITE = "writeFiles at BatchAppend"  # the stage of a batch's changelog write (io.deltastate.BatchAppend)


def _files_named_by_commits(spark, path: str) -> set[str]:
    return {Path(f).name for f in spark.read.format("delta").load(path).inputFiles()}


def _ts_of(records) -> int:
    return max(int(v.split(b'"ts":')[1].split(b",")[0].rstrip(b"}")) for _, v in records if v)


def _in_order(store: str, n: int, seed: int, start: int, tombstones: float) -> list[tuple[bytes, bytes | None]]:
    """Records in event-time order, so none is late (no dead letters)."""
    shape = TimeShape(start_ts=start, step_ms={"trade_stats": 15, "pulse_counts": 400}.get(store, 60_000))
    if store == "trade_stats":
        return list(trade_records(n, 12, seed, shape, tombstones=tombstones))
    if store == "pulse_counts":
        return list(pulse_records(n, 15, seed, shape, tombstones=tombstones))
    return list(click_records(n, 25, seed, shape, tombstones=tombstones))


@dataclass
class Run:
    ref: ReferenceTopic
    # after the run's first batch: (its report, the report of the batch before, its jobs' stages as
    # "name [N tasks]")
    batches: list[tuple[BatchReport, BatchReport, list[list[str]]]]


Records = list[tuple[bytes, bytes | None]]
Chunk = Callable[[int, list[bytes]], Records]  # (first event time, the seeding's keys) -> records in order


def _shares(store: str, seed: int, tombstones: list[float]) -> list[Chunk]:
    """One chunk of 150 in-order records per entry of `tombstones`, its share of tombstones."""
    return [lambda start, _keys, c=c, share=share: _in_order(store, 150, seed + c, start, share)
            for c, share in enumerate(tombstones)]


def _seeded_then_continuous(spark, settings, broker, topic, store: str, seed: int, chunks: list[Chunk]) -> Run:
    """A store seeded by a run over a workload with late records, then a continuous run fed the
    chunks, each read before the next."""
    assert ensure_topic(broker, topic, PARTITIONS)
    ref = ReferenceTopic(PARTITIONS, partition_for)
    seeding = workload(store, 600, seed, 1_700_000_000_000)
    assert produce_records(broker, topic, seeding).delivered == len(seeding)
    ref.append(seeding)
    run_store(settings, store, once=True, topic=topic)

    tracker, reports, jobs_after = spark.sparkContext.statusTracker(), [], []

    def on_batch(report) -> None:  # on the stream's thread, at the end of the batch
        reports.append(report)
        jobs_after.append({j for q in spark.streams.active for j in tracker.getJobIdsForGroup(str(q.runId))})

    stop = threading.Event()
    runner = threading.Thread(target=run_store, args=(settings, store), daemon=True,
                              kwargs={"once": False, "trigger": "1 second", "topic": topic, "stop_event": stop,
                                      "listener": on_batch})
    runner.start()
    try:
        start = _ts_of(seeding) + 1
        keys = sorted({k for k, _ in seeding})
        for chunk in chunks:
            records = chunk(start, keys)
            start = _ts_of(records) + 1
            assert produce_records(broker, topic, records).delivered == len(records)
            ref.append(records)
            deadline = time.monotonic() + 120
            while sum(r.records_in for r in reports) < len(ref.records) - len(seeding) and time.monotonic() < deadline:
                time.sleep(0.2)
    finally:
        stop.set()
        runner.join(120)
    assert sum(r.records_in for r in reports) == len(ref.records) - len(seeding)

    def stages(job: int) -> list[str]:
        return [f"{info.name} [{info.numTasks} tasks]"
                for info in map(tracker.getStageInfo, sorted(tracker.getJobInfo(job).stageIds)) if info]

    batches = [(r, previous, [stages(j) for j in sorted(now - before)])
               for previous, r, before, now in zip(reports, reports[1:], jobs_after, jobs_after[1:]) if r.records_in]
    assert len(batches) >= 2 and all(r.dead_lettered == 0 for r, _, _ in batches)
    return Run(ref, batches)


def _assert_equals_reference(spark, settings, store: str, ref: ReferenceTopic) -> None:
    expected = run(SPECS[store], ref.records)
    publish_snapshot(spark, settings, [load_store(settings, store)])
    assert_state_equal(snapshot_rows(settings, store), expected.state)
    assert expected.late and dead_letters(spark, settings, store, "reason = 'late'") == {
        (r.partition, r.offset): (r.key, r.value) for r in expected.late}
    assert audit_totals(spark, settings, store) == {
        "records_in": len(ref.records), "applied": expected.applied, "dead_lettered": len(expected.late),
        "late": len(expected.late)}
    changelog = settings.table_path(store, "changelog")
    # A batch written twice deleted its first write's files.
    assert {p.name for p in Path(changelog).rglob("*.parquet")} == _files_named_by_commits(spark, changelog)


def _reads_once(job: list[str]) -> bool:
    """The job's first stage reads the batch once, however the step combines its events and
    tombstones: at most a task per source partition with records (a union of two reads has both
    reads' tasks)."""
    return int(job[0].rsplit("[", 1)[1].split()[0]) <= PARTITIONS


def _writes(jobs: list[list[str]]) -> int:
    return sum(any(WRITE in stage for stage in job) for job in jobs)


@pytest.mark.parametrize("store,seed", [("trade_stats", 21), ("pulse_counts", 22), ("user_sessions", 23)])
def test_a_batch_written_through_runs_one_job(store, seed, broker, spark, make_settings, topic):
    settings = make_settings()
    done = _seeded_then_continuous(spark, settings, broker, topic, store, seed,
                                   _shares(store, seed, [0.0, 0.0, 0.05, 0.05, 0.0]))
    windows = store != "user_sessions"
    if windows:  # each case below is met
        assert {(bool(r.tombstones), bool(previous.tombstones)) for r, previous, _ in done.batches} >= {
            (False, False), (True, False), (True, True), (False, True)}
    for report, previous, jobs in done.batches:
        if windows and report.tombstones and not previous.tombstones:
            # Staged without the delete plan: it writes again with it.
            assert _writes(jobs) == 2 and _writes(jobs[:1]) == 1 and _writes(jobs[-1:]) == 1, jobs
        else:
            assert len(jobs) == 1 and _writes(jobs) == 1, jobs
            # One shuffle: the lookups (or the session scan and merge), the state write and the
            # changelog's files share the second stage.
            assert len(jobs[0]) == 2, jobs
        assert all(_reads_once(job) for job in jobs), jobs
    _assert_equals_reference(spark, settings, store, done.ref)


def _pulse(key: bytes, ts: int, checkout: bool = False) -> tuple[bytes, bytes]:
    event = b',"event":"checkout"' if checkout else b""
    return key, b'{"patient_id":"%s","ts":%d%s}' % (key, ts, event)


def _tombstone_cases(start: int, keys: list[bytes]) -> Records:
    """One batch's worth of pulse_counts records, in event-time order, meeting each case of a
    tombstone applied in place: a key deleted and its window re-created after it (and a new window);
    a key deleted and nothing else; a key deleted twice with events between and after; a key with no
    entries deleted; a key deleted by a null value; a key only updated."""
    t = start - start % 60_000 + 60_000  # a fresh window
    recreated, deleted, twice, by_null, updated = keys[:5]
    return [
        _pulse(recreated, t), _pulse(updated, t), _pulse(twice, t + 1), _pulse(deleted, t + 2, checkout=True),
        _pulse(recreated, t + 3, checkout=True), _pulse(twice, t + 4, checkout=True), _pulse(twice, t + 5),
        _pulse(b"patient-never-seen", t + 6, checkout=True), (by_null, None), _pulse(recreated, t + 7),
        _pulse(twice, t + 8, checkout=True), _pulse(twice, t + 9), _pulse(recreated, t + 60_001),
        _pulse(updated, t + 60_002)]


def test_tombstones_applied_in_place_equal_the_reference(broker, spark, make_settings, topic):
    """Each case of a window batch's tombstones, applied where the state lies (no job but the write)."""
    settings = make_settings()
    chunks = [*_shares("pulse_counts", 41, [0.0]), _tombstone_cases, *_shares("pulse_counts", 42, [0.0])]
    done = _seeded_then_continuous(spark, settings, broker, topic, "pulse_counts", 41, chunks)
    deleting = [jobs for report, _, jobs in done.batches if report.tombstones]
    assert deleting and all(_writes([job]) == 1 for jobs in deleting for job in jobs), deleting
    assert all(_reads_once(job) for jobs in deleting for job in jobs), deleting
    _assert_equals_reference(spark, settings, "pulse_counts", done.ref)


@pytest.mark.parametrize("store,seed", [("trade_stats", 31), ("user_sessions", 33)])
def test_a_summary_the_observation_cannot_give_comes_from_the_cache(store, seed, broker, spark, make_settings, topic,
                                                                    monkeypatch):
    settings = make_settings()
    real = summary_module.PartitionSummary.partitions_for
    # As if partition 0 were one the topic grew that neither the store nor a stream time names.
    monkeypatch.setattr(summary_module.PartitionSummary, "partitions_for",
                        lambda self, known: tuple(p for p in real(self, known) if p))
    done = _seeded_then_continuous(spark, settings, broker, topic, store, seed, _shares(store, seed, [0.0, 0.0, 0.0]))
    # A chunk can span micro-batches, so a batch may hold no record of partition 0.
    from_0 = ["0" in json.loads(report.audit[OFFSETS]) for report, _, _ in done.batches]
    assert any(from_0)
    for (_, _, jobs), asks_the_cache in zip(done.batches, from_0):
        if asks_the_cache:  # the write, then the summary from the cache
            assert len(jobs) == 2 and _writes(jobs[:1]) == 1 and _writes(jobs[1:]) == 0, jobs
        else:
            assert len(jobs) == 1 and _writes(jobs) == 1, jobs
    _assert_equals_reference(spark, settings, store, done.ref)
