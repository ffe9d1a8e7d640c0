"""The command line end to end: `produce leaderboard`, `run --once` and `snapshot publish` through
the real CLI group (settings from DELTASTATE_* environment variables, as in production), then every
read command in both output formats compared with the pure-Python reference (tests/reference.py),
a missing key (exit 1), and writes through `sql` refused."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from support.reference import VALUE_FIELDS, Expected, ReferenceTopic, expected, rank_of, ranking, top

from deltastate.cli.main import cli
from deltastate.config import PROJECT_ROOT, Settings, load_settings
from deltastate.errors import CheckpointMismatchError
from deltastate.ingest.generators import encode, leaderboard_events
from deltastate.ingest.partitioner import partition_for
from deltastate.ingest.producer import produce_records

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

STORE = "player_stats"
EVENTS, PLAYERS, SEED, TOMBSTONES = 6_000, 500, 5, 0.02
# Two players tied far above everyone else (ties break by key ascending), one deleted, one bad record.
EXTRA: list[tuple[bytes, bytes | None]] = [
    (b"tie-b", json.dumps({"player_id": "tie-b", "game_id": "x1", "score": 9_000_000, "ts": 2}).encode()),
    (b"tie-a", json.dumps({"player_id": "tie-a", "game_id": "x2", "score": 4_000_000, "ts": 3}).encode()),
    (b"tie-a", json.dumps({"player_id": "tie-a", "game_id": "x3", "score": 5_000_000, "ts": 1}).encode()),
    (b"gone", json.dumps({"player_id": "gone", "game_id": "x4", "score": 1, "ts": 1}).encode()),
    (b"gone", None),
    (b"broken", b'{"player_id": "broken",'),
]


@dataclass(frozen=True)
class World:
    settings: Settings
    topic: str
    exp: Expected

    @property
    def state(self) -> dict[str, dict[str, int]]:
        return self.exp.state


def set_env(mp: pytest.MonkeyPatch, settings: Settings) -> None:
    """The CLI reads its settings from the environment (load_settings()): point it at this test's."""
    for name in list(os.environ):
        if name.startswith(("DELTASTATE_", "KAFKA_")):
            mp.delenv(name)
    mp.setenv("DELTASTATE_HOME", str(settings.home))
    mp.setenv("DELTASTATE_STORAGE", settings.storage_root)
    mp.setenv("DELTASTATE_BROKER_PORT", str(settings.broker_port))
    mp.setenv("DELTASTATE_CONTROLLER_PORT", str(settings.controller_port))
    mp.setenv("DELTASTATE_SHUFFLE_PARTITIONS", str(settings.shuffle_partitions))
    assert load_settings() == settings


def invoke(*args: str, code: int = 0) -> Result:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == code, (args, result.exit_code, result.output, result.exception)
    return result


@pytest.fixture(scope="module")
def world(session_settings: Settings, broker: str, spark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """One store built through the CLI for the whole module: produce, run once, publish."""
    home = tmp_path_factory.mktemp("cli-home")
    (home / "jars").symlink_to(PROJECT_ROOT / ".deltastate" / "jars", target_is_directory=True)
    settings = dataclasses.replace(session_settings, home=home, storage_root=str(home / "data"))
    assert settings.kafka_bootstrap == broker
    topic = f"t-{uuid.uuid4().hex[:10]}"
    ref = ReferenceTopic(4, partition_for)
    ref.append((k.encode(), None if e is None else encode(e))
               for k, e in leaderboard_events(EVENTS, PLAYERS, SEED, tombstones=TOMBSTONES))
    with pytest.MonkeyPatch.context() as mp:
        set_env(mp, settings)
        produced = invoke("produce", "leaderboard", "--events", str(EVENTS), "--players", str(PLAYERS),
                          "--seed", str(SEED), "--tombstones", str(TOMBSTONES), "--topic", topic)
        assert produced.stdout.startswith(f"produced {EVENTS} records (")
        assert produce_records(broker, topic, EXTRA).delivered == len(EXTRA)
        ref.append(EXTRA)
        exp = expected(ref.records, settings.max_value_bytes)
        assert exp.dead_lettered == 1

        ran = invoke("run", STORE, "--once", "--topic", topic)
        total = EVENTS + len(EXTRA)
        assert (f"{STORE}: {total:,} records in = {total - 1:,} applied + 1 dead-lettered"
                in ran.stdout), ran.stdout
        published = invoke("snapshot", "publish", "--json")
        info = json.loads(published.stdout)
        assert info["snapshot_version"] == 1 and info["current"] is True
        assert {s["store"]: s["row_count"] for s in info["stores"]}[STORE] == len(exp.state)
    yield World(settings, topic, exp)


@pytest.fixture(autouse=True)
def cli_env(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, world.settings)


# -- output parsing ------------------------------------------------------------------------------
def json_rows(result: Result) -> list[dict[str, Any]]:
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


FOOTER = re.compile(r"^\((\d+) rows?, snapshot (\d+)\)$")


def table_rows(result: Result) -> list[dict[str, str]]:
    """The aligned table: header, dashes, rows, footer. Columns are found from the dash runs."""
    lines = result.stdout.rstrip("\n").split("\n")
    header, dashes, *body = lines
    footer = FOOTER.match(body.pop())
    assert footer is not None, result.stdout
    spans = [(m.start(), m.end()) for m in re.finditer(r"-+", dashes)]
    columns = [header[a:b].strip() for a, b in spans]
    rows = [{c: line[a:b].strip() for c, (a, b) in zip(columns, spans, strict=True)} for line in body]
    assert int(footer.group(1)) == len(rows) and int(footer.group(2)) == 1
    return rows


def values(row: dict[str, Any]) -> dict[str, int]:
    return {f: int(row[f]) for f in VALUE_FIELDS}


def keyed(rows: list[dict[str, Any]]) -> list[tuple[str, dict[str, int]]]:
    return [(row["key"], values(row)) for row in rows]


# -- reads -----------------------------------------------------------------------------------------
def test_the_workload_is_interesting(world: World) -> None:
    assert len(world.state) > 100 and world.exp.tombstones > 50
    assert ranking(world.state)[:2] == ["tie-a", "tie-b"]  # tied, so key order decides
    assert world.state["tie-a"]["total_score"] == world.state["tie-b"]["total_score"]
    assert "gone" not in world.state and "broken" not in world.state


def test_get(world: World) -> None:
    for key in ("tie-a", ranking(world.state)[len(world.state) // 2], ranking(world.state)[-1]):
        [row] = json_rows(invoke("get", STORE, key, "--json"))
        assert row["key"] == key and values(row) == world.state[key]
        assert row["event_time"].endswith("Z")
        [row] = table_rows(invoke("get", STORE, key))
        assert row["key"] == key and values(row) == world.state[key]


def test_top(world: World) -> None:
    assert keyed(json_rows(invoke("top", STORE, "--n", "5", "--json"))) == top(world.state, 5)
    assert keyed(table_rows(invoke("top", STORE, "--n", "5"))) == top(world.state, 5)
    assert keyed(json_rows(invoke("top", STORE, "--n", "7", "--by", "best_score", "--json"))) == \
        top(world.state, 7, by="best_score")
    assert keyed(table_rows(invoke("top", STORE, "--n", "4", "--by", "games"))) == top(world.state, 4, by="games")
    assert len(json_rows(invoke("top", STORE, "--json"))) == 10  # default n


def test_rank(world: World) -> None:
    order = ranking(world.state)
    for key in (order[0], order[1], order[len(order) // 3], order[-1]):
        assert json_rows(invoke("rank", STORE, key, "--json")) == [
            {"rank": rank_of(world.state, key), "key": key, "total_score": world.state[key]["total_score"]}]
        [row] = table_rows(invoke("rank", STORE, key))
        assert (int(row["rank"]), row["key"], int(row["total_score"])) == (
            rank_of(world.state, key), key, world.state[key]["total_score"])
    key = order[len(order) // 2]
    [row] = json_rows(invoke("rank", STORE, key, "--by", "games", "--json"))
    assert row == {"rank": rank_of(world.state, key, by="games"), "key": key, "games": world.state[key]["games"]}


def test_range(world: World) -> None:
    lo, hi = "player-000100", "player-000199"
    want = [(k, world.state[k]) for k in sorted(world.state) if lo <= k <= hi]
    assert len(want) > 10
    assert keyed(json_rows(invoke("range", STORE, lo, hi, "--json"))) == want
    assert keyed(table_rows(invoke("range", STORE, lo, hi))) == want
    assert keyed(json_rows(invoke("range", STORE, lo, hi, "--limit", "3", "--json"))) == want[:3]
    assert json_rows(invoke("range", STORE, "zzz-a", "zzz-b", "--json")) == []


def test_all(world: World) -> None:
    everything = sorted(world.state.items())
    assert keyed(json_rows(invoke("all", STORE, "--json"))) == everything
    assert keyed(table_rows(invoke("all", STORE))) == everything
    assert keyed(json_rows(invoke("all", STORE, "--limit", "4", "--json"))) == everything[:4]


def test_sql(world: World) -> None:
    query = ("SELECT count(*) AS n, sum(games) AS games, sum(total_score) AS total, max(best_score) AS best, "
             "max(last_played) AS last FROM player_stats")
    want = {"n": len(world.state), "games": sum(v["games"] for v in world.state.values()),
            "total": sum(v["total_score"] for v in world.state.values()),
            "best": max(v["best_score"] for v in world.state.values()),
            "last": max(v["last_played"] for v in world.state.values())}
    assert json_rows(invoke("sql", query, "--json")) == [want]
    assert [{k: int(v) for k, v in row.items()} for row in table_rows(invoke("sql", query))] == [want]
    assert json_rows(invoke("sql", "SELECT key, games FROM player_stats WHERE key LIKE 'tie-%' ORDER BY key",
                            "--json")) == [{"key": k, "games": world.state[k]["games"]} for k in ("tie-a", "tie-b")]


def test_missing_key_exits_1(world: World) -> None:
    for args in (("get", STORE, "nobody"), ("get", STORE, "nobody", "--json"), ("rank", STORE, "nobody"),
                 ("get", STORE, "gone")):  # deleted by a tombstone
        result = invoke(*args, code=1)
        assert result.stdout == ""
        assert result.stderr.startswith("not found: ") and repr(args[2]) in result.stderr, result.stderr


@pytest.mark.parametrize("statement", [
    "DELETE FROM player_stats",
    "CREATE TABLE x(i int)",
    "ATTACH '{tmp}/other.duckdb' AS other",
    "INSERT INTO player_stats (key) VALUES ('intruder')",
    "UPDATE player_stats SET games = 0",
    "DROP TABLE player_stats",
    "COPY player_stats TO '{tmp}/out.csv'",
    "SELECT 1; DELETE FROM player_stats",
    "SET enable_external_access = true",
])
def test_sql_writes_are_refused(world: World, statement: str, tmp_path: Path) -> None:
    statement = statement.format(tmp=tmp_path)
    result = CliRunner().invoke(cli, ["sql", statement])
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert result.stderr.startswith("error: ") and "read-only" in result.stderr, result.stderr
    assert result.stdout == ""
    assert list(tmp_path.iterdir()) == []  # nothing written outside the snapshot either
    # The snapshot is unchanged.
    assert json_rows(invoke("sql", "SELECT count(*) AS n, sum(games) AS g FROM player_stats", "--json")) == [
        {"n": len(world.state), "g": sum(v["games"] for v in world.state.values())}]


# Last in the module: it rebuilds the store's checkpoint, which the queries above do not read.
def test_restore_rebuilds_a_lost_checkpoint_and_the_next_run_reads_nothing_twice(world: World) -> None:
    checkpoint = Path(world.settings.checkpoint_path(STORE))
    shutil.rmtree(checkpoint)
    # Under `deltastate`, run_guarded prints this as one `error:` line with exit status 2.
    refused = CliRunner().invoke(cli, ["run", STORE, "--once", "--topic", world.topic])
    assert isinstance(refused.exception, CheckpointMismatchError), refused.output
    assert f"deltastate restore {STORE}" in str(refused.exception)
    restored = invoke("restore", STORE)
    assert f"restoring {STORE} (full)" in restored.stdout and "done:" in restored.stdout, restored.stdout
    assert f"{len(world.state):,} records" in restored.stdout, restored.stdout
    ran = invoke("run", STORE, "--once", "--topic", world.topic)
    assert f"{STORE}: 0 records in" in ran.stdout, ran.stdout
    published = json.loads(invoke("snapshot", "publish", "--json").stdout)
    assert {s["store"]: s["row_count"] for s in published["stores"]}[STORE] == len(world.state)
