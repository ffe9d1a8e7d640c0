"""Window and session stores end to end: seeded streams with out-of-order, late, deleting and
merging records -> run --once (twice, with more records in between) -> publish -> the snapshot
equals tests/support/reference_windowed.py (Kafka Streams' rules) computed from the same records; late records are dead letters
with reason 'late' and bad records of each kind with their own reason, each with its raw bytes; and
records in = applied + dead-lettered. Between the runs, window fetch and findSessions answer over
REST and the CLI as the reference does (tests/window_reads.py), and fresh reads see the second run
before it is published."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from support.reference import ReferenceTopic
from support.reference_windowed import SPECS, Outcome, run
from support.window_reads import changed_keys, key_reads, ranged_reads
from support.windowed import assert_state_equal, audit_totals, dead_letters, snapshot_rows, workload

from deltastate.engine import run_store
from deltastate.ingest.partitioner import partition_for
from deltastate.ingest.producer import ensure_topic, produce_records
from deltastate.service import create_app
from deltastate.snapshot import publish_snapshot
from deltastate.stores import load_store

pytestmark = pytest.mark.integration
PARTITIONS = 4


Produced = list[tuple[bytes, bytes | None]]


def with_bad_records(good: Produced, max_value_bytes: int) -> tuple[Produced, dict[tuple[bytes, bytes], str]]:
    """good with one bad record of each kind spread through it, made from its first event; and the
    bad ones -> the category of their dead-letter reason."""
    key, value = next((k, v) for k, v in good if v and b"checkout" not in v)
    doc = json.loads(value)
    other = next(k for k, _ in good if k != key)
    bad = {
        (key, value[:-1]): "unparseable_json",
        (other, value): "key_mismatch",
        (key, json.dumps({f: v for f, v in doc.items() if f != "ts"}).encode()): "schema",
        (key, json.dumps({**doc, "ts": str(doc["ts"])}).encode()): "schema",
        (key, json.dumps({**doc, "pad": "x" * max_value_bytes}).encode()): "oversized",
    }
    out = list(good)
    for i, record in enumerate(bad):
        out.insert((i + 1) * len(good) // (len(bad) + 1), record)
    return out, bad


def audit_and_late(spark, settings, store: str) -> tuple[dict, dict[tuple[int, int], tuple[bytes, bytes]]]:
    """The audit's totals, and the late dead letters: (partition, offset) -> raw (key, value)."""
    return audit_totals(spark, settings, store), dead_letters(spark, settings, store, "reason = 'late'")


def produced_late(expected: Outcome) -> dict[tuple[int, int], tuple[bytes, bytes]]:
    return {(r.partition, r.offset): (r.key, r.value) for r in expected.late}


@pytest.mark.parametrize("store,seed", [("trade_stats", 11), ("pulse_counts", 12), ("user_sessions", 13)])
def test_store_equals_reference_over_two_runs(store, seed, broker, spark, make_settings, topic):
    settings = make_settings()
    assert ensure_topic(broker, topic, PARTITIONS)
    ref = ReferenceTopic(PARTITIONS, partition_for)
    definition = load_store(settings, store)
    good = workload(store, 1_500, seed, 1_700_000_000_000)
    later_start = max(int(v.split(b'"ts":')[1].split(b",")[0].rstrip(b"}")) for _, v in good if v) + 1
    first, bad = with_bad_records(good, settings.max_value_bytes)
    second = workload(store, 1_000, seed + 100, later_start)

    def run_batch(batch: Produced) -> Outcome:
        assert produce_records(broker, topic, batch).delivered == len(batch)
        ref.append(batch)
        run_store(settings, store, once=True, topic=topic)
        return run(SPECS[store], [r for r in ref.records if (r.key, r.value) not in bad])

    published = run_batch(first).state
    publish_snapshot(spark, settings, [definition])
    with TestClient(create_app(settings)) as client:
        # Reads of the published first run, over REST and the CLI.
        ranged_reads(client, settings, store, definition.type, published, seed)
        # The second run is committed but not published: fresh reads see it (tombstones of merged
        # sessions and deleted windows included), plain reads still answer from the snapshot.
        expected = run_batch(second)
        changed = changed_keys(published, expected.state)
        assert changed
        for key in changed[:6]:
            key_reads(client, store, definition.type, key, published)
            key_reads(client, store, definition.type, key, expected.state, fresh=True)
    publish_snapshot(spark, settings, [definition])
    assert expected.late and len(expected.state) > 10  # the workload exercises lateness
    assert_state_equal(snapshot_rows(settings, store), expected.state)
    audit, late = audit_and_late(spark, settings, store)
    assert late == produced_late(expected)  # positions and raw bytes
    failed = dead_letters(spark, settings, store, "reason != 'late'")
    assert failed == {(r.partition, r.offset): (r.key, r.value) for r in ref.records if (r.key, r.value) in bad}
    reasons = {(bytes(r["key"]), bytes(r["value"])): r["reason"] for r in spark.read.format("delta")
               .load(settings.table_path(store, "deadletter")).where("reason != 'late'").collect()}
    assert {kv: reason.split(":")[0] for kv, reason in reasons.items()} == bad
    assert audit == {"records_in": len(ref.records), "applied": expected.applied,
                     "dead_lettered": len(bad) + len(expected.late), "late": len(expected.late)}


def test_window_store_restored_after_lost_checkpoint(broker, spark, make_settings, topic):
    """Checkpoint deleted between runs -> restore (offsets from the audit; the state is the changelog)
    -> more records -> the snapshot equals the reference over everything, nothing counted twice."""
    import shutil

    from deltastate.maintenance.restore import restore_store

    store = "pulse_counts"
    settings = make_settings()
    assert ensure_topic(broker, topic, PARTITIONS)
    ref = ReferenceTopic(PARTITIONS, partition_for)
    first = workload(store, 600, 21, 1_700_000_000_000)
    assert produce_records(broker, topic, first).delivered == len(first)
    ref.append(first)
    run_store(settings, store, once=True, topic=topic)
    shutil.rmtree(settings.checkpoint_path(store))
    report = restore_store(settings, store)
    assert report.mode == "partial"
    second = workload(store, 400, 22, 1_700_000_300_000)
    assert produce_records(broker, topic, second).delivered == len(second)
    ref.append(second)
    run_store(settings, store, once=True, topic=topic)
    publish_snapshot(spark, settings, [load_store(settings, store)])
    expected = run(SPECS[store], ref.records)
    assert_state_equal(snapshot_rows(settings, store), expected.state)
    audit, late = audit_and_late(spark, settings, store)
    assert audit["records_in"] == len(ref.records)
    assert late == produced_late(expected)
