"""player_stats end to end against the real broker, Spark, Delta and DuckDB, compared with the
independent pure-Python reference in tests/reference.py: a large skewed backlog, incremental runs,
tombstones within and across micro-batches, every kind of bad record, a replayed micro-batch, and a
continuous CLI run stopped (SIGTERM) and crashed (SIGKILL) mid-stream and restarted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from deltastate.config import PROJECT_ROOT, Settings, load_settings
from deltastate.engine.runner import RunResult, run_store
from deltastate.ingest.generators import encode, leaderboard_events
from deltastate.ingest.partitioner import partition_for
from deltastate.ingest.producer import ensure_topic, produce_records
from deltastate.query import Queries
from deltastate.snapshot import publish_snapshot

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for the reference
from reference import VALUE_FIELDS, Expected, Record, ReferenceTopic, expected  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

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


# -- backlog -------------------------------------------------------------------------------------
def test_large_backlog_matches_reference(broker: str, spark, make_settings, topic: str) -> None:
    settings = make_settings()
    ref = new_topic(settings, broker, topic)
    records = generated(20_000, 2_000, seed=11, tombstones=0.02)
    produce(settings, topic, records, ref)
    exp = expected(ref.records, settings.max_value_bytes)
    # The workload is what the test claims: skewed, repeated players on every partition, ~2% tombstones.
    assert {r.partition for r in ref.records} == set(range(PARTITIONS))
    players = Counter(r.key for r in ref.records)
    assert len(players) < 2_000 and players.most_common(1)[0][1] > 100
    assert 250 <= exp.tombstones <= 550 and exp.dead_lettered == 0

    result = run_store(settings, STORE, once=True, topic=topic)

    assert_counts(exp, result, spark, settings)
    if result.batches.get("changelog") == 1:  # one record per key the batch touched
        assert result.changelog_records == len(players)
    assert_changelog_unique(spark, settings)
    assert table(spark, settings, "deadletter").count() == 0
    assert_state(published_state(spark, settings), exp)


# -- incremental runs and tombstones -------------------------------------------------------------
def test_incremental_runs_and_tombstones(broker: str, spark, make_settings, topic: str) -> None:
    settings = make_settings()
    ref = new_topic(settings, broker, topic)
    T = None  # a tombstone's value
    # Within one micro-batch (run 1's backlog): delete then start afresh, end on a delete, delete an
    # unknown player, delete before the first event. Event times are out of order on purpose.
    first_hand: list[KV] = [
        (b"tomb-a", event("tomb-a", 50, 300)), (b"tomb-a", event("tomb-a", 70, 100)), (b"tomb-a", T),
        (b"tomb-a", event("tomb-a", 5, 50)), (b"tomb-a", event("tomb-a", 9, 40)),
        (b"tomb-b", event("tomb-b", 10, 10)), (b"tomb-b", event("tomb-b", 20, 20)), (b"tomb-b", T),
        (b"tomb-ghost", T),
        (b"tomb-f", T), (b"tomb-f", event("tomb-f", 4, 4)),
        (b"tomb-c", event("tomb-c", 30, 30)), (b"tomb-c", event("tomb-c", 40, 20)),
        (b"tomb-d", event("tomb-d", 8, 8)),
        (b"tomb-e", event("tomb-e", 6, 6)),
    ]
    run1 = interleave(generated(3_000, 300, seed=21, tombstones=0.02), first_hand)
    produce(settings, topic, run1, ref)
    exp1 = expected(ref.records, settings.max_value_bytes)
    # The reference agrees with the hand-computed values.
    assert exp1.state["tomb-a"] == {"games": 2, "total_score": 14, "best_score": 9, "last_played": 50}
    assert exp1.state["tomb-f"] == {"games": 1, "total_score": 4, "best_score": 4, "last_played": 4}
    assert exp1.state["tomb-c"] == {"games": 2, "total_score": 70, "best_score": 40, "last_played": 30}
    assert "tomb-b" not in exp1.state and "tomb-ghost" not in exp1.state

    result1 = run_store(settings, STORE, once=True, topic=topic)
    assert_counts(exp1, result1, spark, settings)
    assert_state(published_state(spark, settings), exp1)
    latest_b = (table(spark, settings, "changelog").where("key = 'tomb-b'")
                .orderBy("epoch", "batch_id", ascending=False).first())
    assert latest_b is not None and latest_b["op"] == "delete"

    # Across micro-batches: run 2 deletes players created in run 1, re-creates some, and extends others.
    survivors = sorted(k for k in exp1.state if k.startswith("player-"))[:6]
    assert len(survivors) == 6
    second_hand: list[KV] = [
        (b"tomb-c", T),
        (b"tomb-d", T), (b"tomb-d", event("tomb-d", 11, 7)),
        (b"tomb-e", event("tomb-e", 1, 1)), (b"tomb-e", T),
        (b"tomb-a", event("tomb-a", 100, 10)),
        (b"tomb-b", event("tomb-b", 3, 3)),
        (b"tomb-ghost", T),
    ]
    # Generated players live after run 1: deleted at the end of run 2's backlog, three re-created.
    last_words: list[KV] = [*[(k.encode(), T) for k in survivors],
                            *[(k.encode(), event(k, 1_000 + i, 5)) for i, k in enumerate(survivors[:3])]]
    run2 = interleave(generated(2_000, 300, seed=22, tombstones=0.02), second_hand) + last_words
    produce(settings, topic, run2, ref)
    exp2 = expected(ref.records, settings.max_value_bytes)
    assert exp2.state["tomb-a"] == {"games": 3, "total_score": 114, "best_score": 100, "last_played": 50}
    assert exp2.state["tomb-d"] == {"games": 1, "total_score": 11, "best_score": 11, "last_played": 7}
    assert exp2.state["tomb-b"] == {"games": 1, "total_score": 3, "best_score": 3, "last_played": 3}
    assert not {"tomb-c", "tomb-e", "tomb-ghost"} & exp2.state.keys()

    result2 = run_store(settings, STORE, once=True, topic=topic)
    # Incremental: the second run reads only what was produced after the first.
    assert (result2.records_in, result2.applied, result2.dead_lettered) == (len(run2), len(run2), 0)
    assert result2.lineage == result1.lineage
    assert_counts(exp2, None, spark, settings)
    assert_changelog_unique(spark, settings)
    state = published_state(spark, settings)
    assert_state(state, exp2)
    for i, k in enumerate(survivors):
        if i < 3:
            assert state[k] == {"games": 1, "total_score": 1_000 + i, "best_score": 1_000 + i, "last_played": 5}
        else:
            assert k not in state


# -- bad records, then a replayed micro-batch ----------------------------------------------------
def _drop_newest_commit(settings: Settings, query: str) -> int:
    """Delete the query's newest checkpoint commit, as if the process died between the batch's Delta
    appends and its checkpoint commit; returns that batch id."""
    commits = Path(settings.checkpoint_path(STORE)) / query / "commits"
    newest = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    (commits / str(newest)).unlink()
    (commits / f".{newest}.crc").unlink(missing_ok=True)
    return newest


def _delta_version(spark, settings: Settings, name: str) -> int:
    from delta.tables import DeltaTable

    return int(DeltaTable.forPath(spark, settings.table_path(STORE, name)).history(1).first()["version"])


def test_bad_records_dead_lettered_and_replayed_batch_written_once(broker: str, spark, make_settings,
                                                                    topic: str) -> None:
    """Every kind of bad record lands in the deadletter table with its reason and exact source
    position and bytes, valid records around them are applied; then the micro-batch is replayed
    (its checkpoint commits deleted) and Delta's idempotent appends skip all of it."""
    settings = make_settings(max_value_bytes=2048)
    new_topic(settings, broker, topic)
    big = event("bad-big", 1, 1, pad="x" * 3000)
    assert len(big) > 3 * 1024
    at_limit = event("bad-limit", 2, 2, pad="")
    at_limit = event("bad-limit", 2, 2, pad="y" * (2048 - len(at_limit)))
    assert len(at_limit) == 2048
    # (key, value, expected reason: exact, or a prefix when it ends with '*')
    bad: list[tuple[bytes | None, bytes | None, str]] = [
        (b"bad-json", b'{"player_id": "bad-json", "score": ', "unparseable_json"),
        (b"bad-json2", b"not json at all", "unparseable_json"),
        (b"bad-json3", b"", "unparseable_json"),
        (b"bad-array", b"[1, 2, 3]", "schema: not a JSON object"),
        (b"bad-string", b'"bad-string"', "schema: not a JSON object"),
        (b"bad-number", b"42", "schema: not a JSON object"),
        (b"bad-nulljson", b"null", "schema: not a JSON object"),
        (b"bad-missing", json.dumps({"player_id": "bad-missing", "game_id": "g", "score": 1}).encode(),
         "schema: field 'ts' missing"),
        (b"bad-empty", b"{}", "schema: field 'player_id' missing"),
        (b"bad-null", event("bad-null", None, 5), "schema: field 'score' is null"),
        (b"bad-str", event("bad-str", "12", 5), "schema: field 'score' must be integer, got string"),
        (b"bad-dec", event("bad-dec", 12.5, 5), "schema: field 'score' must be integer, got decimal*"),
        (b"bad-float", event("bad-float", 12.0, 5), "schema: field 'score' must be integer, got *"),
        (b"bad-bool", event("bad-bool", True, 5), "schema: field 'score' must be integer, got boolean"),
        (b"bad-tsstr", event("bad-tsstr", 1, "2024-01-01"), "schema: field 'ts' must be integer, got string"),
        (b"bad-pid", json.dumps({"player_id": 7, "game_id": "g", "score": 1, "ts": 1}).encode(),
         "schema: field 'player_id' must be string, got *"),
        (b"bad-exp", b'{"player_id": "bad-exp", "game_id": "g", "score": 1e2, "ts": 5}',
         "schema: field 'score' must be integer, got *"),
        (b"bad-huge", event("bad-huge", 2**63, 5), "schema: field 'score' *"),  # beyond a 64-bit integer
        (b"bad-neg", event("bad-neg", -5, 5), "schema: field 'score' must be >= 0"),
        (b"bad-negts", event("bad-negts", 5, -1), "schema: field 'ts' must be >= 0"),
        (b"bad-gid", event("bad-gid", 5, 5, game=""), "schema: field 'game_id' *"),
        (None, event("bad-nokey", 5, 5), "missing_key: the Kafka key is null"),
        (None, None, "missing_key: the Kafka key is null"),
        (b"bad-key", event("bad-other", 5, 5), "key_mismatch: kafka key 'bad-key' != player_id 'bad-other'"),
        (b"bad-big", big, f"oversized: {len(big)} bytes > limit 2048"),
    ]
    good: list[KV] = [
        (b"ok-1", event("ok-1", 10, 100)),
        (b"ok-extra", event("ok-extra", 7, 70, note="extra fields are allowed")),
        (b"bad-limit", at_limit),  # exactly at the size limit: applied
        (b"ok-unicode", event("ok-unicode", 3, 30, game="spiel-ü-🎮")),
        (b"ok-tomb", event("ok-tomb", 1, 1)), (b"ok-tomb", None), (b"ok-tomb", event("ok-tomb", 2, 2)),
        (b"ok-zero", event("ok-zero", 0, 0)),  # the minimums are inclusive
        (b"ok-bigint", event("ok-bigint", 2**53 + 1, 2**53 + 3)),  # exact beyond a double's precision
        (b"ok-space", b'  \n {"player_id": "ok-space", "game_id": "g", "score": 1, "ts": 1} \n'),
        ("spieler-ü".encode(), event("spieler-ü", 5, 5)),
    ]
    # Valid records around the bad ones, including for the same keys before and after.
    records: list[KV] = []
    for i, (key, value, _) in enumerate(bad):
        records.append(good[i] if i < len(good) else (b"ok-1", event("ok-1", i, 100 + i)))
        if key is not None and i % 2 == 0:
            records.append((key, event(key.decode(), i, i)))  # valid, before the bad record
        records.append((key, value))
        if key is not None and i % 2 == 1:
            records.append((key, event(key.decode(), i, i)))  # valid, after the bad record
    assert len(bad) > len(good)
    reasons = {(key, value): reason for key, value, reason in bad}
    assert len(reasons) == len(bad)  # each bad record is unique, so positions map back to it
    produce(settings, topic, records)

    # Positions as stored (null keys land on a random partition); keyed records are where murmur2 says.
    stored = consume_positions(settings.kafka_bootstrap, topic, len(records))
    assert Counter((r.key, r.value) for r in stored) == Counter(records)
    for partition in range(PARTITIONS):
        in_order = [(r.key, r.value) for r in stored if r.partition == partition and r.key is not None]
        assert in_order == [(k, v) for k, v in records if k is not None and partition_for(k, PARTITIONS) == partition]
    exp = expected(stored, settings.max_value_bytes)
    assert exp.dead_lettered == len(bad)
    assert set(exp.categories) == {"missing_key", "oversized", "unparseable_json", "schema", "key_mismatch"}

    result = run_store(settings, STORE, once=True, topic=topic)
    assert_counts(exp, result, spark, settings)

    dead = {(row["partition"], row["offset"]): row for row in table(spark, settings, "deadletter").collect()}
    assert set(dead) == set(exp.dead_letters)
    by_position = {(r.partition, r.offset): r for r in stored}
    for position, row in dead.items():
        rec = by_position[position]
        want = reasons[(rec.key, rec.value)]
        assert row["reason"].split(":")[0] == exp.dead_letters[position], (row["reason"], rec)
        if want.endswith("*"):
            assert row["reason"].startswith(want[:-1]), (row["reason"], want)
        else:
            assert row["reason"] == want, (row["reason"], want)
        assert row["topic"] == topic
        assert (None if row["key"] is None else bytes(row["key"])) == rec.key
        assert (None if row["value"] is None else bytes(row["value"])) == rec.value
        assert row["value_size"] == (None if rec.value is None else len(rec.value))
        assert row["batch_id"] is not None and row["query_id"] == result.lineage.lineage_id
    assert_changelog_unique(spark, settings)
    state = published_state(spark, settings)
    assert_state(state, exp)
    assert state["ok-tomb"] == {"games": 1, "total_score": 2, "best_score": 2, "last_played": 2}
    assert "bad-limit" in state and "bad-other" not in state
    assert state["ok-bigint"] == {"games": 1, "total_score": 2**53 + 1, "best_score": 2**53 + 1,
                                  "last_played": 2**53 + 3}
    assert state["ok-zero"] == {"games": 1, "total_score": 0, "best_score": 0, "last_played": 0}
    assert "ok-space" in state and "spieler-ü" in state

    # Replay: Spark runs the last micro-batch again with the same offsets; nothing new may land.
    counts = row_counts(spark, settings)
    assert counts["deadletter"] == len(bad) and counts["changelog"] > 0 and counts["intake"] >= 1
    versions = {name: _delta_version(spark, settings, name) for name in counts}
    replayed = {query: _drop_newest_commit(settings, query) for query in ("changelog", "intake")}
    again = run_store(settings, STORE, once=True, topic=topic)
    assert again.lineage == result.lineage
    # Spark did run the batch again (otherwise this proves nothing) ...
    assert again.batches.get("intake", 0) >= 1 and again.batches.get("changelog", 0) >= 1, (replayed, again.batches)
    # ... and Delta skipped every append of it: same rows, no new table version.
    assert row_counts(spark, settings) == counts
    assert {name: _delta_version(spark, settings, name) for name in counts} == versions
    assert_counts(exp, None, spark, settings)
    assert_changelog_unique(spark, settings)
    assert_state(published_state(spark, settings), exp)


# -- known bug -------------------------------------------------------------------------------------
MAX_TIMESTAMP_MS = (2**63 - 1) // 1000  # the largest epoch-millis a Spark timestamp (micros, long) can hold


def test_event_time_beyond_the_timestamp_range_does_not_kill_the_stream(broker: str, spark, make_settings,
                                                                       topic: str) -> None:
    settings = make_settings()
    ref = new_topic(settings, broker, topic)
    records: list[KV] = [(b"far-future", event("far-future", 1, MAX_TIMESTAMP_MS + 1)), (b"ok", event("ok", 2, 2))]
    produce(settings, topic, records, ref)
    exp = expected(ref.records, settings.max_value_bytes)
    assert exp.dead_lettered == 0  # an integer ts >= 0 is valid by game_result.v1 (no maximum)

    result = run_store(settings, STORE, once=True, topic=topic)  # today: StreamingQueryException

    assert result.records_in == len(records) == result.applied + result.dead_lettered
    state = published_state(spark, settings)
    assert state["ok"] == exp.state["ok"]
    if result.dead_lettered:  # a fix may dead-letter it instead (e.g. the schema gains a maximum) ...
        [row] = table(spark, settings, "deadletter").collect()
        assert row["reason"].startswith("schema: field 'ts'") and "far-future" not in state
    else:  # ... or apply it as is
        assert state["far-future"] == exp.state["far-future"]


# -- continuous CLI run: stop, crash, restart ------------------------------------------------------
def _cli_env(settings: Settings) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DELTASTATE_", "KAFKA_"))}
    env.update(DELTASTATE_HOME=str(settings.home), DELTASTATE_STORAGE=settings.storage_root,
               DELTASTATE_BROKER_PORT=str(settings.broker_port),
               DELTASTATE_CONTROLLER_PORT=str(settings.controller_port),
               DELTASTATE_SHUFFLE_PARTITIONS=str(settings.shuffle_partitions),
               DELTASTATE_MAX_VALUE_BYTES=str(settings.max_value_bytes),
               DELTASTATE_DRIVER_MEMORY="1g",
               # Spark's scratch space (and RocksDB's working copies): a killed JVM leaves it behind.
               SPARK_LOCAL_DIRS=str(settings.home / "spark-local"))
    assert load_settings(env) == settings  # the subprocess sees exactly this test's settings
    return env


def _group_alive(pgid: int) -> bool:
    """Any non-zombie process left in the process group (the CLI's Python and its Spark JVM)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False


class CliRun:
    """`deltastate run player_stats --continuous` as a subprocess in its own process group."""

    def __init__(self, settings: Settings, topic: str, log: Path) -> None:
        self.log = log
        self._fh = open(log, "wb")
        # The venv's interpreter directly (what `uv run python` resolves to): signals reach the CLI
        # process itself, and no uv sync runs while other work edits the project.
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "deltastate.cli.main", "run", STORE, "--continuous", "--trigger", "1s",
             "--topic", topic],
            cwd=PROJECT_ROOT, env=_cli_env(settings), stdout=self._fh, stderr=subprocess.STDOUT,
            start_new_session=True)
        self.pgid = self.proc.pid

    def tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:]

    def check_running(self) -> None:
        if self.proc.poll() is not None:
            raise AssertionError(f"the run exited early with {self.proc.returncode}:\n{self.tail()}")

    def _wait_group(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while _group_alive(self.pgid):
            if time.monotonic() > deadline:
                os.killpg(self.pgid, signal.SIGKILL)
                raise AssertionError(f"process group {self.pgid} still alive after {timeout}s:\n{self.tail()}")
            time.sleep(0.2)

    def terminate(self, timeout: float = 120) -> int:
        """SIGTERM the CLI process: it stops its queries and exits cleanly."""
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=timeout)
        self._wait_group(60)
        self._fh.close()
        return code

    def crash(self) -> None:
        """SIGKILL the CLI and its JVM at once: no shutdown of anything."""
        os.killpg(self.pgid, signal.SIGKILL)
        self.proc.wait(timeout=60)
        self._wait_group(60)
        self._fh.close()

    def cleanup(self) -> None:
        if _group_alive(self.pgid):
            os.killpg(self.pgid, signal.SIGKILL)
            self._wait_group(30)
        if not self._fh.closed:
            self._fh.close()


def _batch_ids(settings: Settings, query: str, log: str) -> list[int]:
    folder = Path(settings.checkpoint_path(STORE)) / query / log
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit()) if folder.is_dir() else []


def _commits(settings: Settings, query: str = "changelog") -> int:
    return len(_batch_ids(settings, query, "commits"))


def _in_flight(settings: Settings, query: str = "changelog") -> bool:
    """A micro-batch is planned (offsets log written) but not committed yet: mid-stream."""
    offsets, commits = _batch_ids(settings, query, "offsets"), _batch_ids(settings, query, "commits")
    return bool(offsets) and (not commits or offsets[-1] > commits[-1])


def _committed_offsets(settings: Settings, query: str, topic: str) -> dict[int, int]:
    """Next offset per partition after the query's latest committed micro-batch ({} before any)."""
    done = _batch_ids(settings, query, "commits")
    if not done:
        return {}
    path = Path(settings.checkpoint_path(STORE)) / query / "offsets" / str(done[-1])
    lines = path.read_text().splitlines()  # v1, batch metadata, then one line per source
    return {int(p): int(o) for p, o in json.loads(lines[-1])[topic].items()}


def _wait_for(what: str, condition, run: CliRun, timeout: float, every: float = 0.25) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        run.check_running()
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}:\n{run.tail()}")
        time.sleep(every)


@pytest.fixture()
def cli_runs() -> Iterator[list[CliRun]]:
    runs: list[CliRun] = []
    yield runs
    for run in runs:
        run.cleanup()


def test_continuous_run_stopped_crashed_and_restarted(broker: str, spark, make_settings, topic: str,
                                                      tmp_path: Path, cli_runs: list[CliRun]) -> None:
    """`deltastate run --continuous` in a subprocess, fed while it runs: SIGTERM while a micro-batch
    is in flight, restart and catch up (compare), then SIGKILL of the CLI and its JVM while a
    micro-batch is in flight, restart from that checkpoint and catch up (compare again)."""
    settings = make_settings()
    ref = new_topic(settings, broker, topic)
    stream = generated(12_000, 800, seed=41, tombstones=0.02)
    chunks = [stream[i:i + 1_000] for i in range(0, len(stream), 1_000)]
    began = time.monotonic()

    def phase(what: str) -> None:  # shown with -s, or on failure
        print(f"[{time.monotonic() - began:6.1f}s] {what}; changelog commits {_commits(settings)}")

    def produce_next(n: int = 1, pause: float = 0.0) -> None:
        for _ in range(n):
            produce(settings, topic, chunks.pop(0), ref)
            time.sleep(pause)

    def start(name: str) -> CliRun:
        run = CliRun(settings, topic, tmp_path / f"{name}.log")
        cli_runs.append(run)
        return run

    def end_offsets() -> dict[int, int]:  # a fresh topic: offsets count from 0 per partition
        return dict(Counter(r.partition for r in ref.records))

    def caught_up(exp: Expected) -> bool:  # the cheap checkpoint check first, then the audit table
        return (all(_committed_offsets(settings, q, topic) == end_offsets() for q in ("intake", "changelog"))
                and intake_totals(spark, settings)["records_in"] >= exp.records_in)

    def wait_mid_batch(run: CliRun) -> None:
        """Until a micro-batch of either query is planned but not committed; if the stream goes idle
        first, feed it one more record now and then."""
        waited, nudges = time.monotonic(), 0
        while not any(_in_flight(settings, q) for q in ("changelog", "intake")):
            run.check_running()
            assert time.monotonic() - waited < 90, f"no micro-batch in flight after 90s:\n{run.tail()}"
            if time.monotonic() - waited > 10 * (nudges + 1):
                nudges += 1
                produce(settings, topic, [(b"nudge", event("nudge", nudges, nudges))], ref)
            time.sleep(0.1)

    # 1: fed while running, stopped with SIGTERM while a micro-batch is in flight.
    produce_next(2)
    run = start("run1")
    _wait_for("a first changelog commit", lambda: _commits(settings) >= 1, run, timeout=180)
    phase("run 1 committed")
    produce_next(2, pause=0.3)
    wait_mid_batch(run)
    assert run.terminate() == 0, run.tail()
    phase("run 1 stopped (SIGTERM) mid-batch")

    # 2: restarted, fed, and left to catch up with everything produced.
    produce_next(2)
    after_term = _commits(settings)
    run = start("run2")
    _wait_for("a changelog commit after the restart", lambda: _commits(settings) > after_term, run, timeout=180)
    produce_next(2, pause=0.3)
    exp = expected(ref.records, settings.max_value_bytes)
    _wait_for("every produced record audited and committed by both queries", lambda: caught_up(exp), run,
              timeout=180, every=1.0)
    phase("run 2 caught up")
    assert_counts(exp, None, spark, settings)  # no record lost or counted twice
    assert_state(published_state(spark, settings), exp)

    # 3: SIGKILL of the CLI and its JVM while a micro-batch is in flight; restart from the checkpoint.
    produce_next(1)
    wait_mid_batch(run)
    run.crash()
    phase("run 2 killed (SIGKILL) mid-batch")
    produce_next(len(chunks))
    exp = expected(ref.records, settings.max_value_bytes)
    # The restart runs in this process (its Spark is warm): the same run_store the CLI calls, on the
    # crashed checkpoint, replaying the batch that was in flight.
    result = run_store(settings, STORE, once=True, topic=topic)
    phase("restarted after the crash and caught up")
    assert result.lineage.epoch == 0 and result.records_in > 0
    assert all(_committed_offsets(settings, q, topic) == end_offsets() for q in ("intake", "changelog"))
    assert_counts(exp, None, spark, settings)
    assert_changelog_unique(spark, settings)
    assert_state(published_state(spark, settings), exp)
