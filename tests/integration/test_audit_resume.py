"""A run starts from its lineage's newest audit row, not from the whole audit history (real broker,
Spark and Delta).

Each audit row carries what its writer started the batch from (totals_before). A run's first batch
(or a replay) reads the row of the batch the Delta log names as the lineage's newest, so its start
costs one row however long the store has run. Checked against the full-history scan, against a
reference computed from the produced records, and with every older audit row's file moved away.
"""

import json
from pathlib import Path

import pytest
from reference import expected
from store_checks import STORE, assert_counts, assert_state, generated, new_topic, produce, published_state

from deltastate.changelog.layout import INTAKE
from deltastate.changelog.txn_log import txn_versions
from deltastate.engine.audit import load_ledger, scan_ledger
from deltastate.engine.lineage import load_or_create
from deltastate.engine.runner import run_store
from deltastate.engine.stream_time import load_stream_times, scan_stream_times
from deltastate.ingest.partitioner import partition_for
from deltastate.ingest.producer import ensure_topic, produce_records
from deltastate.ingest.timed_workloads import TimeShape, trade_records
from deltastate.stores import load_store

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]

PARTITIONS = 4


def _newest_batch(spark, settings, store) -> int:
    lineage = load_or_create(spark, settings, store)
    return txn_versions(spark, settings.table_path(store.name, INTAKE))[lineage.app_id(INTAKE)]


def _move_older_audit_files(spark, settings, store, keep_batch: int, away: Path) -> list[tuple[Path, Path]]:
    """Moves every intake data file but the one holding keep_batch's row; returns (away, original)."""
    from pyspark.sql import functions as F

    path = settings.table_path(store.name, INTAKE)
    keep = {Path(r[0].removeprefix("file:")).name for r in spark.read.format("delta").load(path)
            .where(F.col("batch_id") == keep_batch).select(F.input_file_name()).collect()}
    assert len(keep) == 1
    moved = []
    for data in Path(path).glob("*.parquet"):
        if data.name not in keep:
            target = away / data.name
            target.parent.mkdir(parents=True, exist_ok=True)
            data.rename(target)
            moved.append((target, data))
    return moved


def _restore(moved: list[tuple[Path, Path]]) -> None:
    for target, data in moved:
        target.rename(data)


def test_a_key_value_run_starts_from_the_newest_audit_row(broker: str, spark, make_settings, topic: str,
                                                          tmp_path: Path) -> None:
    settings = make_settings()
    store = load_store(settings, STORE)
    ref = new_topic(settings, broker, topic)
    stream = generated(4_000, 400, seed=61, tombstones=0.03)
    bad = [(b"p-bad", b"{not json"), (b"p-bad", b'{"player_id": "p-bad", "game_id": "g", "score": -1, "ts": 1}')]
    produce(settings, topic, stream[:2_000] + bad, ref)
    run_store(settings, STORE, once=True, topic=topic, max_offsets_per_trigger=700)
    produce(settings, topic, stream[2_000:3_000], ref)
    run_store(settings, STORE, once=True, topic=topic, max_offsets_per_trigger=700)

    lineage = load_or_create(spark, settings, store)
    newest = _newest_batch(spark, settings, store)
    assert newest >= 4  # several batches, over two runs
    after = load_ledger(spark, settings, store, lineage, newest + 1)
    replay = load_ledger(spark, settings, store, lineage, newest)
    # The same as summing the history, both for the next batch and for a replay of the newest one.
    for fast, before_batch in ((after, newest + 1), (replay, newest)):
        scanned = scan_ledger(spark, settings, store, lineage, before_batch)
        assert (fast.next_batch, fast.counts, fast.hi, fast.audited) == (
            scanned.next_batch, scanned.counts, scanned.hi, scanned.audited)
    assert replay.audited and not after.audited
    # And the same as the produced records say: every partition's counts and highest offset.
    exp = expected(ref.records, settings.max_value_bytes)
    totals = [sum(c[i] for c in after.counts.values()) for i in range(4)]
    assert totals == [exp.records_in, exp.applied, exp.dead_lettered, exp.tombstones]
    assert exp.dead_lettered == 2
    highest = {}
    for r in ref.records:
        highest[r.partition] = max(highest.get(r.partition, -1), r.offset)
    assert after.hi == highest
    per_partition = {p: sum(1 for r in ref.records if r.partition == p) for p in highest}
    assert {p: c[0] for p, c in after.counts.items()} == per_partition

    moved = _move_older_audit_files(spark, settings, store, newest, tmp_path / "away")
    assert len(moved) >= newest  # one file per earlier batch
    try:
        spark.catalog.clearCache()
        again = load_ledger(spark, settings, store, lineage, newest + 1)
        assert (again.counts, again.hi) == (after.counts, after.hi)
        with pytest.raises(Exception, match="FILE_NOT_EXIST|does not exist|FileNotFound"):
            scan_ledger(spark, settings, store, lineage, newest + 1)
    finally:
        _restore(moved)

    # The next run starts from that row and the store still equals the reference.
    produce(settings, topic, stream[3_000:], ref)
    run_store(settings, STORE, once=True, topic=topic, max_offsets_per_trigger=700)
    exp = expected(ref.records, settings.max_value_bytes)
    assert_counts(exp, None, spark, settings)
    assert_state(published_state(spark, settings), exp)


def test_a_window_run_starts_from_the_newest_audit_rows_stream_times(broker: str, spark, make_settings,
                                                                     topic: str, tmp_path: Path) -> None:
    settings = make_settings()
    store = load_store(settings, "trade_stats")
    assert ensure_topic(broker, topic, PARTITIONS)
    shape = TimeShape(start_ts=1_700_000_000_000, step_ms=15, disorder=0.2, disorder_ms=1_900, late=0.03,
                      late_ms=8_000)
    records = list(trade_records(2_400, 12, 71, shape))
    for part in (records[:1_200], records[1_200:]):
        assert produce_records(broker, topic, part).delivered == len(part)
        run_store(settings, "trade_stats", once=True, topic=topic, max_offsets_per_trigger=500)

    lineage = load_or_create(spark, settings, store)
    newest = _newest_batch(spark, settings, store)
    assert newest >= 4
    after = load_stream_times(spark, settings, store, lineage, newest + 1)
    replay = load_stream_times(spark, settings, store, lineage, newest)
    assert after == scan_stream_times(spark, settings, store, lineage, newest + 1)
    assert replay == scan_stream_times(spark, settings, store, lineage, newest)
    assert replay != after  # the replayed batch moved stream time on
    # Stream time per partition is the newest event time of its records (every one valid here).
    reference: dict[int, int] = {}
    for key, value in records:
        p = partition_for(key, PARTITIONS)
        reference[p] = max(reference.get(p, 0), json.loads(value)["ts"])
    assert after == reference

    moved = _move_older_audit_files(spark, settings, store, newest, tmp_path / "away")
    try:
        spark.catalog.clearCache()
        assert load_stream_times(spark, settings, store, lineage, newest + 1) == after
        assert load_stream_times(spark, settings, store, lineage, newest) == replay
    finally:
        _restore(moved)
