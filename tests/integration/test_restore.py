"""Restore after a lost checkpoint, in process (real broker, Spark, Delta, DuckDB): the run refuses
the lost checkpoint, restore rebuilds it from the changelog, and later runs continue from the
recorded offsets, compared with the independent reference (tests/reference.py)."""


import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from support.reference import category, expected
from support.store_checks import (
    STORE,
    assert_changelog_unique,
    assert_counts,
    assert_state,
    event,
    generated,
    new_topic,
    produce,
    published_state,
    table,
)

from deltastate.changelog.reader import changelog_version
from deltastate.config import PROJECT_ROOT
from deltastate.engine import run_store
from deltastate.errors import CheckpointMismatchError
from deltastate.maintenance.listener import RecordingListener
from deltastate.maintenance.restore import restore_store

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]


def test_restore_after_lost_checkpoint(broker: str, spark, make_settings, topic: str) -> None:
    settings = make_settings()
    ref = new_topic(settings, broker, topic)
    first = generated(6_000, 500, seed=5, tombstones=0.03)
    # Dead letters last: on their partitions they are the highest offsets read, past every applied one,
    # so a resume after the last applied offset would dead-letter them twice.
    bad = [(b"player-000001", b"{not json"), (b"player-000002", event("player-000003", 1, 1)),
           (b"player-000004", event("player-000004", -5, 1))]
    produce(settings, topic, first + bad, ref)
    run_store(settings, STORE, once=True, topic=topic)
    exp_first = expected(ref.records, settings.max_value_bytes)
    assert exp_first.dead_lettered == 3 and exp_first.tombstones > 50

    checkpoint = Path(settings.checkpoint_path(STORE))
    shutil.rmtree(checkpoint)
    with pytest.raises(CheckpointMismatchError, match=f"deltastate restore {STORE}"):
        run_store(settings, STORE, once=True, topic=topic)

    version = changelog_version(spark, settings.table_path(STORE, "changelog"))
    events = RecordingListener()
    report = restore_store(settings, STORE, listener=events, spark=spark)
    live = len(exp_first.state)
    assert (report.mode, report.changelog_version, report.epoch, report.records_restored) == ("full", version, 1, live)
    assert events.events[0] == ("start", STORE, version, "full")
    assert events.events[-1][:2] == ("end", live) and sum(events.batches) == live and len(events.batches) > 1
    # One batch per source partition, each the live keys whose latest record sits in that partition.
    where = {r.key.decode(): r.partition for r in ref.records if r.key is not None}
    per_partition = Counter(where[key] for key in exp_first.state)
    assert dict(zip(events.partitions, events.batches, strict=True)) == dict(per_partition)
    applied_hi: dict[int, int] = {}  # per partition: one past the highest applied offset
    seen_hi: dict[int, int] = {}  # per partition: one past the highest offset read
    for r in ref.records:
        seen_hi[r.partition] = max(seen_hi.get(r.partition, 0), r.offset + 1)
        if category(r.key, r.value, settings.max_value_bytes) is None:
            applied_hi[r.partition] = max(applied_hi.get(r.partition, 0), r.offset + 1)
    assert report.starting_offsets == seen_hi and seen_hi != applied_hi

    second = generated(3_000, 700, seed=6, tombstones=0.03)  # old players and new ones
    produce(settings, topic, second, ref)
    result = run_store(settings, STORE, once=True, topic=topic)
    assert result.lineage.epoch == 1 and result.records_in == len(second)  # read only what came after
    exp = expected(ref.records, settings.max_value_bytes)
    assert_counts(exp, None, spark, settings)
    assert_changelog_unique(spark, settings)
    assert table(spark, settings, "deadletter").count() == 3
    assert_state(published_state(spark, settings), exp)
    # A key only the seed touched is not written again: the new epoch holds the keys `second` changed.
    touched = {k.decode() for k, _ in second}
    rows = table(spark, settings, "changelog").where("epoch = 1").select("key").collect()
    assert sorted(r["key"] for r in rows) == sorted(touched)

    # The restored checkpoint restarts like any other (the saved plan rebuilds the same queries).
    third = generated(1_000, 900, seed=7, tombstones=0.05)
    produce(settings, topic, third, ref)
    result = run_store(settings, STORE, once=True, topic=topic)
    assert result.lineage.epoch == 1 and result.records_in == len(third)
    exp = expected(ref.records, settings.max_value_bytes)
    assert_counts(exp, None, spark, settings)
    assert_changelog_unique(spark, settings)
    assert_state(published_state(spark, settings), exp)


def test_restore_redoes_a_batch_whose_audit_row_never_landed(broker: str, spark, make_settings,
                                                             topic: str) -> None:
    """A micro-batch appends its changelog rows and dead letters, then its audit row. A crash before
    the audit row, with the checkpoint lost too: restore removes the batch's changelog rows and dead
    letters, and the batch runs again from the audited offsets, counted once."""
    from delta.tables import DeltaTable

    settings = make_settings()
    ref = new_topic(settings, broker, topic)
    records = generated(4_000, 300, seed=23, tombstones=0.03)
    records += [(b"player-000007", b"[1, 2]"), (b"player-000008", event("player-000008", "x", 1))]
    produce(settings, topic, records, ref)
    first = run_store(settings, STORE, once=True, topic=topic, max_offsets_per_trigger=1_000)
    assert first.batches >= 3
    intake = table(spark, settings, "intake")
    newest = intake.agg({"batch_id": "max"}).first()[0]
    unaudited = table(spark, settings, "changelog").where(f"batch_id = {newest}").count()
    assert unaudited > 0
    DeltaTable.forPath(spark, settings.table_path(STORE, "intake")).delete(f"batch_id = {newest}")
    shutil.rmtree(settings.checkpoint_path(STORE))

    report = restore_store(settings, STORE, spark=spark)
    assert report.orphans >= unaudited, (report.orphans, unaudited)
    assert table(spark, settings, "changelog").where(f"epoch = 0 AND batch_id = {newest}").count() == 0
    more = generated(1_000, 400, seed=24, tombstones=0.03)
    produce(settings, topic, more, ref)
    run_store(settings, STORE, once=True, topic=topic)
    exp = expected(ref.records, settings.max_value_bytes)
    assert exp.dead_lettered == 2
    assert_counts(exp, None, spark, settings)
    assert table(spark, settings, "deadletter").count() == 2
    assert_changelog_unique(spark, settings)
    assert_state(published_state(spark, settings), exp)


def test_compaction_before_restore_keeps_what_an_unaudited_batch_superseded(broker: str, spark, make_settings,
                                                                             topic: str, monkeypatch) -> None:
    """Crash after a batch's changelog rows, before its audit row; compaction runs before the
    restore. Those rows are not state yet (restore removes them), so compaction must not drop the
    records they would supersede: otherwise their keys come back without their history."""
    from delta.tables import DeltaTable

    from deltastate.changelog import layout
    from deltastate.maintenance import compact_store
    from deltastate.maintenance.stats import now_ms

    monkeypatch.setattr(layout, "BATCHES_PER_SEGMENT", 1)  # one segment per micro-batch: sealed ones to clean
    settings = make_settings()
    ref = new_topic(settings, broker, topic)
    produce(settings, topic, generated(3_000, 40, seed=27, tombstones=0.02), ref)
    run_store(settings, STORE, once=True, topic=topic, max_offsets_per_trigger=600)
    newest = table(spark, settings, "intake").agg({"batch_id": "max"}).first()[0]
    changelog = table(spark, settings, "changelog")
    pending = {r["key"] for r in changelog.where(f"batch_id = {newest}").select("key").collect()}
    older = {r["key"] for r in changelog.where(f"batch_id < {newest}").select("key").collect()}
    assert pending & older  # keys whose earlier records the unaudited batch would supersede
    DeltaTable.forPath(spark, settings.table_path(STORE, "intake")).delete(f"batch_id = {newest}")
    shutil.rmtree(settings.checkpoint_path(STORE))

    report = compact_store(settings, STORE, spark=spark, now_ms=now_ms() + 7 * 24 * 3600 * 1000, vacuum=False)
    assert report.skipped is None and report.records_dropped > 0, report
    restore_store(settings, STORE, spark=spark)
    run_store(settings, STORE, once=True, topic=topic)
    exp = expected(ref.records, settings.max_value_bytes)
    assert_counts(exp, None, spark, settings)
    assert_changelog_unique(spark, settings)
    assert_state(published_state(spark, settings), exp)


# A long variant (about 100 s): `make soak` runs it. The suite keeps a lost checkpoint restored
# (test_restore_after_lost_checkpoint, the windowed test_window_store_restored_after_lost_checkpoint,
# and through the CLI in test_cli_e2e).
@pytest.mark.soak
def test_checkpoint_deleted_mid_stream_then_restored(broker: str, spark, make_settings, topic: str,
                                                     tmp_path: Path) -> None:
    """A continuous CLI run loses its checkpoint folder while micro-batches are in flight; the run
    is killed, `deltastate restore` (the CLI) rebuilds the checkpoint, producing continues, and the
    state after catching up equals the reference."""
    from test_continuous_restart import CliRun, _cli_env, _commits, _in_flight, _wait_for

    settings = make_settings()
    ref = new_topic(settings, broker, topic)
    stream = generated(8_000, 700, seed=17, tombstones=0.03)
    chunks = [stream[i:i + 500] for i in range(0, len(stream), 500)]
    produce(settings, topic, chunks.pop(0), ref)
    run = CliRun(settings, topic, tmp_path / "run.log")
    try:
        _wait_for("a first changelog commit", lambda: _commits(settings) >= 1, run, timeout=240)
        deadline = time.monotonic() + 120
        while not _in_flight(settings, "stream"):
            assert time.monotonic() < deadline, run.tail()
            produce(settings, topic, chunks.pop(0), ref)
            time.sleep(0.2)
        shutil.rmtree(settings.checkpoint_path(STORE), ignore_errors=True)  # mid-batch
        for _ in range(3):  # keep feeding the stream that lost its checkpoint
            produce(settings, topic, chunks.pop(0), ref)
            time.sleep(0.5)
    finally:
        run.crash()

    restored = subprocess.run([sys.executable, "-m", "deltastate.cli.main", "restore", STORE],
                              cwd=PROJECT_ROOT, env=_cli_env(settings), capture_output=True, text=True, timeout=600)
    assert restored.returncode == 0, restored.stdout + restored.stderr
    assert f"restoring {STORE} (full)" in restored.stdout and "done:" in restored.stdout
    produce(settings, topic, [rec for chunk in chunks for rec in chunk], ref)
    run_store(settings, STORE, once=True, topic=topic)
    exp = expected(ref.records, settings.max_value_bytes)
    assert_counts(exp, None, spark, settings)
    assert_changelog_unique(spark, settings)
    assert_state(published_state(spark, settings), exp)
