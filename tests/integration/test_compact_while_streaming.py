"""Compaction and TTL cleanup, again and again, while a continuous player_stats stream appends
(real broker, Spark, Delta): the stream never fails, no record is lost, and the final state equals the
independent reference computed from every record the topic holds (the producer's events and
cleanup's ttl tombstones, in the order Kafka put them)."""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path

import pytest
from support.reference import expected
from support.store_checks import (
    STORE,
    assert_changelog_unique,
    assert_state,
    consume_positions,
    event,
    intake_totals,
    new_topic,
    produce,
    published_state,
    table,
)
from test_cleanup_ttl import ttl_schemas

from deltastate.changelog import layout
from deltastate.engine import run_store
from deltastate.maintenance import cleanup_store, compact_store

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]


def test_compact_and_cleanup_while_stream_appends(broker: str, spark, make_settings, topic: str, tmp_path,
                                                  monkeypatch) -> None:
    monkeypatch.setattr(layout, "BATCHES_PER_SEGMENT", 2)  # segments seal every two micro-batches
    # Audits reach the intake table a second after their batch commits, so the final catch-up
    # check (and compaction's view of audited batches) follows the stream closely.
    base = make_settings(audit_flush_seconds=1.0)
    # A short ttl, so that keys churning out of the producer's working set expire during the run.
    settings = dataclasses.replace(base, schemas_dir=ttl_schemas(base, tmp_path / "schemas", "4s"))
    changelog_files = Path(settings.table_path(STORE, "changelog"))
    new_topic(settings, broker, topic)
    stop = threading.Event()
    began = time.monotonic()

    def phase(what: str) -> None:
        print(f"[{time.monotonic() - began:6.1f}s] {what}", flush=True)

    outcome: dict[str, object] = {}

    def stream() -> None:
        try:
            # Bounded micro-batches: several batches (so sealed segments) however slow the machine is.
            outcome["result"] = run_store(settings, STORE, once=False, trigger="1 second", topic=topic,
                                          max_offsets_per_trigger=60, stop_event=stop)
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            outcome["error"] = exc

    def producer() -> None:
        # Chunks over a sliding window of keys: old keys stop getting events and go idle.
        try:
            for chunk in range(10):
                keys = [f"k{(chunk * 10 + i) % 400:03d}" for i in range(40)]
                records = [(k.encode(), event(k, chunk + i % 5, 1_000 * chunk + i)) for i, k in enumerate(keys)]
                if chunk % 3 == 2:
                    records.append((keys[0].encode(), None))
                produce(settings, topic, records)
                time.sleep(1.0)
        except BaseException as exc:  # noqa: BLE001
            outcome["producer_error"] = exc

    runner = threading.Thread(target=stream, name="stream")
    feeder = threading.Thread(target=producer, name="producer")
    runner.start()
    feeder.start()
    compactions, cleanups = [], []
    try:
        # The rounds start once the stream has committed records: a round before that only skips
        # ("no changelog table yet") while taking cores from the stream's start.
        deadline = time.monotonic() + 300
        while (not any(changelog_files.rglob("*.parquet")) and "error" not in outcome
               and time.monotonic() < deadline):
            time.sleep(0.2)
        phase("first changelog commit")
        # Until the producer is done and both have really acted on the moving stream (a rewrite, an
        # expiry, the one VACUUM), with a guard for loaded machines.
        loop_deadline = time.monotonic() + 600
        while (feeder.is_alive() or len(compactions) < 2 or not any(c.skipped is None for c in compactions)
               or not any(c.expired_keys for c in cleanups)
               or not any(c.vacuum_retention_hours is not None for c in compactions)) \
                and time.monotonic() < loop_deadline:
            if "error" in outcome:
                break
            # One VACUUM beside the stream is the case that matters (it must spare in-flight files):
            # the first round, whose changelog already holds data files (waited for above).
            vacuumed = any(c.vacuum_retention_hours is not None for c in compactions)
            compactions.append(compact_store(settings, STORE, spark=spark, vacuum=not vacuumed))
            cleanups.append(cleanup_store(settings, STORE, spark=spark, topic=topic))
            phase(f"round {len(compactions)}: compaction {compactions[-1].seconds:.1f}s "
                  f"({compactions[-1].skipped or 'rewrote'}), cleanup {cleanups[-1].seconds:.1f}s "
                  f"({cleanups[-1].expired_keys} expired); producer running {feeder.is_alive()}")
            # Back to back, the rounds took the cores from the stream (399 rounds, 164 s): a pause
            # lets micro-batches seal segments for the next round to compact.
            time.sleep(1.0)
        feeder.join()
        phase("loop done")
        # Let the stream apply everything the topic holds (the last tombstones included).
        total = None
        deadline = time.monotonic() + 600  # a guard for loaded machines; normally seconds
        while time.monotonic() < deadline and "error" not in outcome:
            from confluent_kafka import Consumer, TopicPartition

            c = Consumer({"bootstrap.servers": broker, "group.id": "wm"})
            total = sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(4))
            c.close()
            if intake_totals(spark, settings)["records_in"] == total:
                break
            time.sleep(0.25)
    finally:
        stop.set()
        runner.join(timeout=120)
    phase("stream stopped")
    assert "error" not in outcome and "producer_error" not in outcome, outcome
    records = consume_positions(broker, topic, total)
    exp = expected(records, settings.max_value_bytes)
    assert intake_totals(spark, settings)["records_in"] == len(records)  # nothing lost, nothing twice
    assert_changelog_unique(spark, settings)
    assert_state(published_state(spark, settings), exp)
    phase("checked")
    rewritten = [c for c in compactions if c.skipped is None]
    expired = sum(c.expired_keys for c in cleanups)
    print(f"\n{len(compactions)} compactions ({len(rewritten)} rewrote, "
          f"{sum(c.records_dropped for c in compactions)} records dropped, "
          f"{sum(c.attempts - 1 for c in compactions)} conflict retries); {len(cleanups)} cleanups, "
          f"{expired} keys expired, {sum(len(c.raced) for c in cleanups)} raced; "
          f"changelog {table(spark, settings, 'changelog').count()} records")
    assert rewritten and expired > 0  # both really ran against the moving stream
    assert sum(c.vacuum_retention_hours is not None for c in compactions) == 1
    assert sum(1 for r in records if r.value is None) >= expired
