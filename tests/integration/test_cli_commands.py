"""Every command the README shows, run as a user runs it: `deltastate ...` in a new process, settings
from DELTASTATE_* variables, against the session's real broker, Spark in each child, Delta and
DuckDB on disk. One home serves the whole module: the stores after one batch, then after several.
Building the stores' state for the reads is not what the commands' tests are about: the windowed
stores' runs, the first snapshot and the backlog of several micro-batches run in this process's
Spark session (the same functions the commands call), while `produce`, `run` (after one batch, and
in several micro-batches after a restore) and `snapshot publish` (after several) run as commands.
Reads of a published snapshot (no Spark in them) run side by side, each still a new process; the
commands that start a Spark driver run one after another.

Each read answer is compared with a reference computed here from the produced records
(tests/support/reference.py, reference_windowed.py), in both output formats. Every refusal is an
exit status (1 not found, 2 anything else) and one line on stderr; no output carries a Python
traceback or a Java stack trace. `deltastate inspect` in a new process after one batch and after
several is tests/integration/test_inspect.py. A snapshot read imports none of pyspark, pandas, delta,
great_expectations or airflow."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
import yaml
from support.cli_processes import cli_each, concurrently, run_here
from support.cli_runs import World, cli, json_rows, keyed, record, refused, table, values
from support.local_infra import make_home
from support.reference import VALUE_FIELDS, ReferenceTopic, expected, rank_of, ranking, top
from support.reference_windowed import SPECS
from support.reference_windowed import run as fold_windowed
from support.window_reads import EVERYTHING, fetch, find_sessions, same
from support.windowed import workload

from deltastate.bench.soak import child_env
from deltastate.config import Settings
from deltastate.ingest.generators import encode, leaderboard_events
from deltastate.ingest.partitioner import partition_for
from deltastate.ingest.producer import ensure_topic, produce_records
from deltastate.snapshot import describe, publish_snapshot

pytestmark = [pytest.mark.integration, pytest.mark.timeout(3600)]

STORE, TRADES, SESSIONS = "player_stats", "trade_stats", "user_sessions"
PLAYERS = 400
BATCH1 = (4_000, 5, 0.02)  # events, seed, tombstone fraction
BATCH2 = (3_000, 7, 0.05)  # run in several micro-batches (--max-offsets-per-trigger)
BATCH3 = (300, 9, 0.0)  # left in the topic: only latest reads see it until the last run
T0 = 1_700_000_000_000
BOOKKEEPING = ["source_partition", "source_offset", "batch_id", "event_time", "write_time"]
# Two players tied far above everyone (ties break by key), one deleted, one bad record.
EXTRA: list[tuple[bytes, bytes | None]] = [
    (b"tie-b", json.dumps({"player_id": "tie-b", "game_id": "x1", "score": 9_000_000, "ts": 2}).encode()),
    (b"tie-a", json.dumps({"player_id": "tie-a", "game_id": "x2", "score": 4_000_000, "ts": 3}).encode()),
    (b"tie-a", json.dumps({"player_id": "tie-a", "game_id": "x3", "score": 5_000_000, "ts": 1}).encode()),
    (b"gone", json.dumps({"player_id": "gone", "game_id": "x4", "score": 1, "ts": 1}).encode()),
    (b"gone", None),
    (b"broken", b'{"player_id": "broken",'),
]


# -- the module's stores ---------------------------------------------------------------------------
def produce_leaderboard(world: World, batch: tuple[int, int, float]) -> None:
    events, seed, tombstones = batch
    out = cli(world, "produce", "leaderboard", "--events", str(events), "--players", str(PLAYERS), "--seed",
              str(seed), "--tombstones", str(tombstones))
    assert out.stdout.startswith(f"produced {events} records (")
    world.leaderboard.append((k.encode(), None if e is None else encode(e))
                             for k, e in leaderboard_events(events, PLAYERS, seed, tombstones=tombstones))


@pytest.fixture(scope="module")
def world(session_settings: Settings, broker: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """A home of its own on the session's broker; its kafka folder is the broker's, so `infra
    status` finds the broker running."""
    home = make_home(tmp_path_factory.mktemp("cli-commands"))
    (home / "kafka").symlink_to(session_settings.home / "kafka", target_is_directory=True)
    # The stores' own definitions, each reading a topic of this module: the commands then run as the
    # README shows them, without --topic, and latest reads tail the topic the stream reads.
    schemas = home / "schemas"
    shutil.copytree(session_settings.schemas_dir, schemas)
    suffix = uuid.uuid4().hex[:8]
    topics = {s: f"{s}-{suffix}" for s in (STORE, TRADES, SESSIONS)}
    for store, topic in topics.items():
        path = schemas / "stores" / f"{store}.yaml"
        raw = yaml.safe_load(path.read_text())
        raw["source"]["topic"] = topic
        path.write_text(yaml.safe_dump(raw, sort_keys=False))
    settings = dataclasses.replace(session_settings, home=home, storage_root=str(home / "data"), schemas_dir=schemas)
    # The settings as DELTASTATE_* variables, and the small fast-starting driver JVM of a short-lived
    # command (bench/soak.py child_env; docs/configuration.md, DELTASTATE_DRIVER_JAVA_OPTS).
    env = {k: v for k, v in child_env(settings).items() if not k.startswith("SPARK_") or k == "SPARK_LOCAL_DIRS"}
    yield World(settings, env, topics, ReferenceTopic(4, partition_for))


@pytest.fixture(scope="module")
def one_batch(world: World, spark) -> World:
    """Every store after one run: produce, run --once, publish; the reads before the first publish.
    `run player_stats` is the command; the windowed stores run in this process after it."""
    produce_leaderboard(world, BATCH1)
    assert produce_records(world.settings.kafka_bootstrap, world.topics[STORE], EXTRA).delivered == len(EXTRA)
    world.leaderboard.append(EXTRA)
    produced: dict[str, int] = {}
    for store in (TRADES, SESSIONS):
        records = workload(store, 1_500 if store == TRADES else 600, 3, T0)
        ensure_topic(world.settings.kafka_bootstrap, world.topics[store], 4)
        assert produce_records(world.settings.kafka_bootstrap, world.topics[store], records).delivered == len(records)
        produced[store] = len(records)
        ref = ReferenceTopic(4, partition_for)
        ref.append(records)
        world.windowed[store] = fold_windowed(SPECS[store], ref.records).state
        assert world.windowed[store]

    # Before any publish, reads say so.
    assert "no snapshot published yet" in refused(world, "get", STORE, "tie-a")
    assert "no snapshot published yet" in refused(world, "top", STORE)
    assert "no snapshot published" in cli(world, "snapshot", "list").stdout

    exp = expected(world.leaderboard.records, world.settings.max_value_bytes)
    assert exp.dead_lettered == 1
    ran = cli(world, "run", STORE)  # --once is the default
    for store in (TRADES, SESSIONS):
        result = run_here(world.settings, store)
        assert result.records_in == produced[store], result
    total = len(world.leaderboard)
    assert f"{STORE}: {total:,} records in = {total - 1:,} applied + 1 dead-lettered" in ran.stdout, ran.stdout
    # What `snapshot publish --json` prints (the command itself: after several batches, below).
    published = json.loads(json.dumps(describe(publish_snapshot(spark, world.settings))))
    assert published["snapshot_version"] == 1 and published["current"] is True
    rows = {s["store"]: s["row_count"] for s in published["stores"]}
    assert rows[STORE] == len(exp.state)
    assert rows[TRADES] == len(world.windowed[TRADES]) and rows[SESSIONS] == len(world.windowed[SESSIONS])
    world.published = exp.state
    return world


def check_key_value_reads(world: World, snapshot: int) -> None:
    """get, top, rank, range and all in both formats against the published reference state."""
    state = world.published
    order = ranking(state)
    points, ranked = (order[0], order[len(order) // 2], order[-1]), (order[1], order[len(order) // 3])
    lo, hi = "player-000100", "player-000199"
    query = "SELECT count(*) AS n, sum(games) AS games, max(best_score) AS best FROM player_stats"
    commands = {"top --json": ("top", STORE, "--n", "5", "--json"), "top": ("top", STORE, "--n", "5"),
                "top --by": ("top", STORE, "--n", "4", "--by", "games", "--meta"),
                "range --json": ("range", STORE, lo, hi, "--json"), "range": ("range", STORE, lo, hi, "--limit", "3"),
                "all --json": ("all", STORE, "--json"), "all": ("all", STORE, "--limit", "4"),
                "sql": ("sql", query, "--json")}
    for key in points:
        commands |= {f"get {key} --json": ("get", STORE, key, "--json"), f"get {key}": ("get", STORE, key),
                     f"get {key} --meta": ("get", STORE, key, "--meta")}
    for key in ranked:
        commands |= {f"rank {key} --json": ("rank", STORE, key, "--json"),
                     f"rank {key} --by": ("rank", STORE, key, "--by", "best_score")}
    out = cli_each(world, commands)

    for key in points:
        [row] = json_rows(out[f"get {key} --json"])
        assert row["key"] == key and values(row) == state[key]
        assert set(BOOKKEEPING) <= set(row) and row["event_time"].endswith("Z")  # --json: every column
        shown = record(out[f"get {key}"])
        assert list(shown) == ["key", *VALUE_FIELDS] and values(shown) == state[key]  # no bookkeeping
        meta = record(out[f"get {key} --meta"])
        assert list(meta) == ["key", *VALUE_FIELDS, *BOOKKEEPING] and meta["source_offset"] == str(row["source_offset"])

    assert keyed(json_rows(out["top --json"])) == top(state, 5)
    columns, rows = table(out["top"], snapshot)
    assert columns == ["rank", "key", *VALUE_FIELDS]
    assert [int(r["rank"]) for r in rows] == [1, 2, 3, 4, 5] and keyed(rows) == top(state, 5)
    columns, rows = table(out["top --by"], snapshot)
    assert columns == ["rank", "key", *VALUE_FIELDS, *BOOKKEEPING] and keyed(rows) == top(state, 4, by="games")

    for key in ranked:
        assert json_rows(out[f"rank {key} --json"]) == [
            {"rank": rank_of(state, key), "key": key, "total_score": state[key]["total_score"]}]
        _, [row] = table(out[f"rank {key} --by"], snapshot)
        assert (int(row["rank"]), row["key"], int(row["best_score"])) == (
            rank_of(state, key, by="best_score"), key, state[key]["best_score"])

    want = [(k, state[k]) for k in sorted(state) if lo <= k <= hi]
    assert len(want) > 10
    assert keyed(json_rows(out["range --json"])) == want
    columns, rows = table(out["range"], snapshot)
    assert columns == ["key", *VALUE_FIELDS] and keyed(rows) == want[:3]
    assert keyed(json_rows(out["all --json"])) == sorted(state.items())
    columns, rows = table(out["all"], snapshot)
    assert columns == ["key", *VALUE_FIELDS] and keyed(rows) == sorted(state.items())[:4]

    assert json_rows(out["sql"]) == [
        {"n": len(state), "games": sum(v["games"] for v in state.values()),
         "best": max(v["best_score"] for v in state.values())}]


# -- after one batch -------------------------------------------------------------------------------
def test_infra_status_finds_the_broker(one_batch: World) -> None:
    out = cli(one_batch, "infra", "status").stdout
    assert "kafka broker: running" in out and f"kafka bootstrap in use: {one_batch.settings.kafka_bootstrap}" in out


def test_snapshot_list(one_batch: World) -> None:
    [listed] = json_rows(cli(one_batch, "snapshot", "list", "--json"))
    assert listed["snapshot_version"] == 1 and listed["current"] is True
    assert re.search(r"^\*\s+1\s", cli(one_batch, "snapshot", "list").stdout, re.M)


def test_key_value_reads_after_one_batch(one_batch: World) -> None:
    state = one_batch.published
    assert ranking(state)[:2] == ["tie-a", "tie-b"] and "gone" not in state and "broken" not in state
    check_key_value_reads(one_batch, snapshot=1)


def test_window_and_session_reads(one_batch: World) -> None:
    trades, sessions = one_batch.windowed[TRADES], one_batch.windowed[SESSIONS]
    symbol = sorted({k for k, _, _ in trades})[0]
    lo, hi = T0 + 2_000, T0 + 9_000
    assert same(json_rows(cli(one_batch, "windows", TRADES, symbol, "--json")), fetch(trades, symbol, *EVERYTHING))
    got = json_rows(cli(one_batch, "windows", TRADES, "--from", str(lo), "--to", str(hi), "--json"))
    assert got and same(got, fetch(trades, None, lo, hi))
    columns, rows = table(cli(one_batch, "windows", TRADES, symbol, "--limit", "3"), 1)
    assert columns[:3] == ["key", "window_start", "window_end"] and not set(BOOKKEEPING) & set(columns)
    assert [(r["key"], int(r["window_start"])) for r in rows] == [(e[0], e[1]) for e, _ in fetch(trades, symbol, *EVERYTHING)[:3]]

    user = sorted({k for k, _, _ in sessions})[1]
    assert same(json_rows(cli(one_batch, "sessions", SESSIONS, user, "--json")), find_sessions(sessions, user, *EVERYTHING))
    earliest = T0 + 3_600_000
    assert same(json_rows(cli(one_batch, "sessions", SESSIONS, user, "--earliest-end", str(earliest), "--json")),
                find_sessions(sessions, user, earliest, EVERYTHING[1]))
    columns, rows = table(cli(one_batch, "sessions", SESSIONS, user, "--meta"), 1)
    assert set(BOOKKEEPING) <= set(columns) and len(rows) == len(find_sessions(sessions, user, *EVERYTHING))


# A command line, its exit status, and what its one line says (the whole line, or a part of it).
REFUSALS: list[tuple[tuple[str, ...], int, str]] = [
    (("get", "nope", "k"), 2, "unknown store 'nope'"),
    (("top", "nope"), 2, "unknown store 'nope'"),
    (("get", STORE, "nobody"), 1, f"not found: store '{STORE}': key 'nobody' not found"),
    (("get", STORE, "gone"), 1, "'gone'"),  # deleted by a tombstone
    (("rank", STORE, "nobody"), 1, "'nobody'"),
    (("top", STORE, "--n", "0"), 2, "'--n'"),
    (("top", STORE, "--by", "key"), 2, "parameter 'by'"),
    (("get", STORE, "tie-a", "--consistency", "soon"), 2, "'--consistency'"),
    (("top", STORE, "--consistency", "latest"), 2, "'--consistency'"),
    (("get", STORE, "tie-a", "--schema-version", "7"), 2, "parameter 'schema_version'"),
    (("windows", TRADES, "--from", "soon"), 2, "parameter 'from'"),
    (("sessions", TRADES, "SYM0"), 2, "is a window store"),
    (("windows", STORE), 2, "is a key_value store"),
    (("nosuch",), 2, "No such command 'nosuch'"),
    (("produce", "leaderboard", "--events", "-1"), 2, "'--events'"),
    (("run", "nope", "--once"), 2, "unknown store 'nope'"),  # before Spark starts
    (("cleanup", "nope"), 2, "unknown store 'nope'"),
]


def test_refusals(one_batch: World) -> None:
    said = concurrently(*(partial(refused, one_batch, *args, code=code) for args, code, _ in REFUSALS))
    for (args, _, message), line in zip(REFUSALS, said, strict=True):
        assert line == message if message.startswith("not found: ") else message in line, (args, line)


WRITES = ("DELETE FROM player_stats", "CREATE TABLE x(i int)", "ATTACH '{tmp}/other.duckdb' AS other",
          "INSERT INTO player_stats (key) VALUES ('intruder')", "UPDATE player_stats SET games = 0",
          "DROP TABLE player_stats", "COPY player_stats TO '{tmp}/out.csv'", "SELECT 1; DELETE FROM player_stats",
          "SET enable_external_access = true")


def test_sql_writes_are_refused(one_batch: World, tmp_path: Path) -> None:
    said = concurrently(*(partial(refused, one_batch, "sql", statement.format(tmp=tmp_path)) for statement in WRITES))
    for statement, line in zip(WRITES, said, strict=True):
        assert "read-only" in line, (statement, line)
    assert list(tmp_path.iterdir()) == []  # nothing written outside the snapshot either
    state = one_batch.published
    assert json_rows(cli(one_batch, "sql", "SELECT count(*) AS n, sum(games) AS g FROM player_stats", "--json")) == [
        {"n": len(state), "g": sum(v["games"] for v in state.values())}]


def test_snapshot_read_imports_no_spark(one_batch: World) -> None:
    """`deltastate bench cli` times get, top and rank as new processes and names the heavy packages
    each imported: a snapshot read needs DuckDB, not the engine (no pyspark, so no JVM), pandas,
    numpy, pyarrow, delta, great_expectations or airflow."""
    key = ranking(one_batch.published)[0]
    figures = json.loads(cli(one_batch, "bench", "cli", "--key", key, "--runs", "2", "--json").stdout)
    assert figures["store"] == STORE and set(figures["heavy_imports"]) == {
        f"get {STORE} KEY", f"top {STORE} --n 10", f"rank {STORE} KEY"}
    assert all(not heavy for heavy in figures["heavy_imports"].values()), figures["heavy_imports"]
    assert all(len(times) == 2 and min(times) > 0 for times in figures["seconds"].values()), figures


# -- after several batches ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def several(one_batch: World) -> World:
    """A second backlog run in several micro-batches (in this process; `run` in several micro-batches
    as a command is the last test's), and a third batch left in the topic."""
    world = one_batch
    produce_leaderboard(world, BATCH2)
    result = run_here(world.settings, STORE, max_offsets_per_trigger=800)
    assert result.batches >= 3 and result.records_in == BATCH2[0], result
    world.committed_upto = len(world.leaderboard)
    produce_leaderboard(world, BATCH3)
    return world


def test_committed_and_latest_reads_before_publishing(several: World) -> None:
    """snapshot: batch 1 only; committed: plus the changelog commits (batches 1-2, no Spark);
    latest: plus the records in the topic not committed (batch 3)."""
    world = several
    committed = world.committed(world.committed_upto)
    latest = world.committed(len(world.leaderboard))
    changed = [k for k in sorted(latest) if latest.get(k) != committed.get(k) and k in committed][:3]
    moved = [k for k in sorted(committed) if committed[k] != world.published.get(k) and k in world.published][:3]
    assert changed and moved
    lo, hi = "player-000050", "player-000090"
    key = ranking(committed)[5]
    commands = {"top": ("top", STORE, "--n", "7", "--consistency", "committed", "--json"),
                "range": ("range", STORE, lo, hi, "--consistency", "committed", "--json"),
                "rank": ("rank", STORE, key, "--consistency", "committed", "--json"),
                # An older client's shape: version 1 is what the store holds, so the rows are unchanged.
                "v1": ("get", STORE, key, "--consistency", "committed", "--schema-version", "1", "--json")}
    for k in moved:
        commands |= {f"snapshot {k}": ("get", STORE, k, "--json"),
                     f"committed {k}": ("get", STORE, k, "--consistency", "committed")}
    for k in changed:
        commands[f"latest {k}"] = ("get", STORE, k, "--consistency", "latest", "--json")
    out = cli_each(world, commands)

    for k in moved:
        assert values(json_rows(out[f"snapshot {k}"])[0]) == world.published[k]
        got = out[f"committed {k}"]
        assert values(record(got)) == committed[k] and "committed through changelog version" in got.stdout
    for k in changed:
        [row] = json_rows(out[f"latest {k}"])
        assert values(row) == latest[k]
    assert keyed(json_rows(out["top"])) == top(committed, 7)
    assert keyed(json_rows(out["range"])) == [(k, committed[k]) for k in sorted(committed) if lo <= k <= hi]
    assert json_rows(out["rank"])[0]["rank"] == rank_of(committed, key)
    [row] = json_rows(out["v1"])
    assert values(row) == committed[key]


def test_reads_after_several_batches(several: World) -> None:
    world = several
    published = json.loads(cli(world, "snapshot", "publish", "--json").stdout)
    assert published["snapshot_version"] == 2 and published["current"] is True
    world.published = world.committed(world.committed_upto)
    rows = {s["store"]: s["row_count"] for s in published["stores"]}
    assert rows[STORE] == len(world.published)
    assert rows[TRADES] == len(world.windowed[TRADES]) and rows[SESSIONS] == len(world.windowed[SESSIONS])
    check_key_value_reads(world, snapshot=2)
    assert [r["snapshot_version"] for r in json_rows(cli(world, "snapshot", "list", "--json"))] == [1, 2]


def test_compact_cleanup_and_migrate_plan_keep_the_answers(several: World) -> None:
    world = several
    compacted = json.loads(cli(world, "compact", STORE, "--json").stdout)
    assert compacted["store"] == STORE
    # After the compaction, the commands that only read the compacted store. Each starts its own
    # Spark driver, so they run one after another: side by side they only compete for the cores.
    # player_stats declares no ttl: cleanup says so from the changelog's log, without Spark.
    assert cli(world, "cleanup", STORE).stdout == f"cleanup {STORE}: skipped (no ttl declared)\n"
    planned = cli(world, "migrate", "plan", STORE, "--to", "2", "--json")
    status = refused(world, "migrate", "status", STORE)
    to_zero = refused(world, "migrate", "plan", STORE, "--to", "0")
    to_three = refused(world, "migrate", "plan", STORE, "--to", "3")
    assert json.loads(planned.stdout)["store"] == STORE
    # No migration was started: status says so in one line, before Spark starts.
    assert "no migration was started" in status
    assert "'--to'" in to_zero
    assert "no value schema version 3" in to_three  # before Spark
    # The changelog after maintenance still folds to the same state.
    assert keyed(json_rows(cli(world, "all", STORE, "--consistency", "committed", "--json"))) == \
        sorted(world.published.items())


# Last: it rebuilds the store's checkpoint.
def test_restore_after_a_lost_checkpoint_then_the_run_reads_nothing_twice(several: World) -> None:
    world = several
    shutil.rmtree(world.settings.checkpoint_path(STORE))
    message = refused(world, "run", STORE, "--once", spark=True)
    assert f"deltastate restore {STORE}" in message
    restored = cli(world, "restore", STORE).stdout
    assert f"restoring {STORE} (full)" in restored and f"{len(world.published):,} records" in restored, restored
    # The records not committed before, in micro-batches of at most 150: a line for each batch.
    ran = cli(world, "run", STORE, "--once", "--max-offsets-per-trigger", "150").stdout
    uncommitted = len(world.leaderboard) - world.committed_upto
    assert uncommitted == BATCH3[0] and len(re.findall(r"^\s+batch\s+\d+:", ran, re.M)) >= 2, ran
    assert f"{STORE}: {uncommitted:,} records in" in ran, ran
    everything = world.committed(len(world.leaderboard))
    assert keyed(json_rows(cli(world, "all", STORE, "--consistency", "committed", "--json"))) == \
        sorted(everything.items())
