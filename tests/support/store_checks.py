"""Shared steps and checks of the player_stats end-to-end tests: produce into a reference topic,
read the store's Delta tables, compare the published snapshot with tests/reference.py."""


import json
import time
import uuid
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from deltastate.config import Settings
from deltastate.engine import RunResult
from deltastate.ingest.generators import encode, leaderboard_events
from deltastate.ingest.partitioner import partition_for
from deltastate.ingest.producer import ensure_topic, produce_records
from deltastate.query import Queries
from deltastate.snapshot import publish_snapshot
from support.reference import VALUE_FIELDS, Expected, Record, ReferenceTopic

STORE = "player_stats"
PARTITIONS = 4
KV = tuple[bytes | None, bytes | None]


# -- helpers -------------------------------------------------------------------------------------
def event(player: str, score: Any, ts: Any, game: str | None = None, **extra: Any) -> bytes:
    game_id = f"g-{player}-{ts}" if game is None else game
    doc = {"player_id": player, "game_id": game_id, "score": score, "ts": ts, **extra}
    return json.dumps(doc).encode()


def generated(events: int, players: int, seed: int, tombstones: float = 0.0) -> list[KV]:
    return [(key.encode(), None if ev is None else encode(ev))
            for key, ev in leaderboard_events(events, players, seed, tombstones=tombstones)]


def new_topic(settings: Settings, broker: str, topic: str) -> ReferenceTopic:
    assert settings.kafka_bootstrap == broker, "make_settings() must point at the session broker"
    assert ensure_topic(broker, topic, PARTITIONS) is True
    return ReferenceTopic(PARTITIONS, partition_for)


def produce(settings: Settings, topic: str, records: list[KV], ref: ReferenceTopic | None = None) -> None:
    result = produce_records(settings.kafka_bootstrap, topic, records)
    assert (result.delivered, result.failed) == (len(records), 0)
    if ref is not None:
        ref.append(records)


def table(spark, settings: Settings, name: str):
    return spark.read.format("delta").load(settings.table_path(STORE, name))


def row_counts(spark, settings: Settings) -> dict[str, int]:
    return {name: table(spark, settings, name).count() for name in ("changelog", "deadletter", "intake")}


def intake_totals(spark, settings: Settings) -> dict[str, int]:
    row = table(spark, settings, "intake").selectExpr(
        "coalesce(sum(records_in), 0) AS records_in", "coalesce(sum(applied), 0) AS applied",
        "coalesce(sum(dead_lettered), 0) AS dead_lettered", "coalesce(sum(tombstones), 0) AS tombstones",
        "count(*) AS batches").first()
    return {k: int(row[k]) for k in ("records_in", "applied", "dead_lettered", "tombstones", "batches")}


def assert_counts(exp: Expected, result: RunResult | None, spark, settings: Settings) -> None:
    """Audit: records in = applied + dead-lettered, from the intake table (cumulative) and, for a
    run over everything, from its RunResult."""
    assert exp.records_in == exp.applied + exp.dead_lettered
    totals = intake_totals(spark, settings)
    assert {k: totals[k] for k in ("records_in", "applied", "dead_lettered", "tombstones")} == {
        "records_in": exp.records_in, "applied": exp.applied, "dead_lettered": exp.dead_lettered,
        "tombstones": exp.tombstones}
    if result is not None:
        assert (result.records_in, result.applied, result.dead_lettered) == (
            exp.records_in, exp.applied, exp.dead_lettered)


def assert_changelog_unique(spark, settings: Settings) -> None:
    dupes = (table(spark, settings, "changelog").groupBy("epoch", "batch_id", "key").count()
             .where("count > 1").limit(5).collect())
    assert not dupes, f"changelog records repeated per (epoch, batch_id, key): {dupes}"


def published_state(spark, settings: Settings) -> dict[str, dict[str, int]]:
    """Publish a snapshot and read the whole store back through the query layer."""
    info = publish_snapshot(spark, settings)
    with Queries(settings) as queries:
        result = queries.all(STORE)
    assert result.snapshot_version == info.version
    assert info.store(STORE) is not None and info.store(STORE).row_count == len(result.rows)
    return {row["key"]: {f: row[f] for f in VALUE_FIELDS} for row in result.rows}


def assert_state(actual: dict[str, dict[str, int]], exp: Expected) -> None:
    missing, extra = sorted(set(exp.state) - set(actual)), sorted(set(actual) - set(exp.state))
    wrong = {k: (actual[k], exp.state[k]) for k in exp.state.keys() & actual.keys() if actual[k] != exp.state[k]}
    assert not missing and not extra and not wrong, (
        f"{len(missing)} missing {missing[:5]}, {len(extra)} extra {extra[:5]}, "
        f"{len(wrong)} wrong {dict(list(wrong.items())[:5])}")
    assert actual == exp.state


def consume_positions(bootstrap: str, topic: str, expected_count: int, timeout: float = 60) -> list[Record]:
    """Every record of the topic with its real (partition, offset), read by assignment."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    got: list[Record] = []
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        deadline = time.monotonic() + timeout
        while len(got) < expected_count and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=10_000, timeout=1.0):
                assert msg.error() is None, msg.error()
                got.append(Record(msg.partition(), msg.offset(), msg.key(), msg.value()))
        for msg in consumer.consume(num_messages=100, timeout=1.0):  # anything more is a duplicate
            got.append(Record(msg.partition(), msg.offset(), msg.key(), msg.value()))
    finally:
        consumer.close()
    assert len(got) == expected_count
    return sorted(got, key=lambda r: (r.partition, r.offset))


def interleave(base: list[KV], extra: list[KV]) -> list[KV]:
    """extra spread evenly through base, each list's own order kept."""
    out, step = [], max(1, len(base) // (len(extra) + 1))
    pending = list(extra)
    for i, rec in enumerate(base):
        if pending and i and i % step == 0:
            out.append(pending.pop(0))
        out.append(rec)
    return out + pending




def move_older_audit_files(spark, settings: Settings, store: str, keep_batch: int, away) -> list:
    """Moves every intake data file but the one holding keep_batch's rows; returns (away, original)
    pairs for restore_files."""
    from pathlib import Path

    from pyspark.sql import functions as F

    path = settings.table_path(store, "intake")
    keep = {Path(r[0].removeprefix("file:")).name for r in spark.read.format("delta").load(path)
            .where(F.col("batch_id") == keep_batch).select(F.input_file_name()).collect()}
    assert len(keep) == 1
    moved = []
    for data in Path(path).glob("*.parquet"):
        if data.name not in keep:
            target = Path(away) / data.name
            target.parent.mkdir(parents=True, exist_ok=True)
            data.rename(target)
            moved.append((target, data))
    return moved


def restore_files(moved: list) -> None:
    for target, data in moved:
        target.rename(data)


def newest_audited_batch(spark, settings: Settings, store_name: str) -> int:
    """The newest batch the store's lineage wrote an audit row for, as the Delta log names it."""
    from deltastate.changelog.txn_log import txn_versions
    from deltastate.engine.common.lineage import load_or_create
    from deltastate.stores import load_store

    lineage = load_or_create(spark, settings, load_store(settings, store_name))
    return txn_versions(spark, settings.table_path(store_name, "intake"))[lineage.app_id("intake")]


def ledger_fields(ledger) -> tuple:
    """What a loaded ledger says, for comparing two of them."""
    return ledger.next_batch, ledger.counts, ledger.hi, ledger.audited


def assert_resumes_from_newest_audit_row(spark, settings: Settings, store_name: str, away) -> None:
    """A run's start (the ledger of a key-value store, the stream times of a window or session
    store) equals the scan of the whole audit history, for the next batch and for a replay of the
    newest one, and still answers with every older audit file moved away."""
    from deltastate.engine.common.lineage import load_or_create
    from deltastate.engine.keyvalue.audit import load_ledger, scan_ledger
    from deltastate.engine.windowed.stream_time import load_stream_times, scan_stream_times
    from deltastate.stores import load_store
    from deltastate.stores.backends import backend_of

    store = load_store(settings, store_name)
    lineage = load_or_create(spark, settings, store)
    newest = newest_audited_batch(spark, settings, store_name)
    if backend_of(store).engine == "keyvalue":  # the key-value engine keeps a ledger, the windowed one stream times
        def fast(b):
            return ledger_fields(load_ledger(spark, settings, store, lineage, b))

        def scanned(b):
            return ledger_fields(scan_ledger(spark, settings, store, lineage, b))
    else:
        def fast(b):
            return load_stream_times(spark, settings, store, lineage, b)

        def scanned(b):
            return scan_stream_times(spark, settings, store, lineage, b)
    expected = {b: scanned(b) for b in (newest, newest + 1)}
    assert {b: fast(b) for b in expected} == expected
    assert expected[newest + 1] != expected[newest]
    moved = move_older_audit_files(spark, settings, store_name, newest, away)
    assert moved  # the lineage wrote earlier batches
    try:
        spark.catalog.clearCache()
        assert {b: fast(b) for b in expected} == expected
    finally:
        restore_files(moved)
