"""Snapshots end to end: a real changelog Delta table written with Spark, its state computed again
in plain Python, published to DuckDB and read back through every read, the CLI, retention and the
CURRENT pointer, and readers racing publishes."""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import click
import pytest
from click.testing import CliRunner

from deltastate.changelog.layout import CHANGELOG, changelog_columns, ddl, segment_of
from deltastate.changelog.reader import changelog_version, commit_time, latest_state
from deltastate.cli.query_cmd import register
from deltastate.config import PROJECT_ROOT, Settings, load_settings
from deltastate.errors import (
    KeyNotFoundError,
    QueryError,
    SnapshotError,
    UnknownStoreError,
)
from deltastate.query import Queries
from deltastate.query.result import run
from deltastate.snapshot import current_snapshot, list_snapshots, publish_snapshot
from deltastate.snapshot.catalog import CURRENT, snapshot_files
from deltastate.stores import list_stores, load_store

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

STORE = "player_stats"
EMPTY = "empty_stats"  # declared, but its changelog table is never written
SNAPSHOT_COLUMNS = ["key", "games", "total_score", "best_score", "last_played",
                    "source_partition", "source_offset", "batch_id", "event_time", "write_time"]
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _put(key: str, epoch: int, batch: int, games: int, total: int | None, best: int) -> dict[str, Any]:
    return {"key": key, "op": "put", "games": games, "total_score": total, "best_score": best,
            "last_played": 1_000 * batch, "epoch": epoch, "batch_id": batch}


def _delete(key: str, epoch: int, batch: int) -> dict[str, Any]:
    return {"key": key, "op": "delete", "games": None, "total_score": None, "best_score": None,
            "last_played": None, "epoch": epoch, "batch_id": batch}


# One list per Delta commit, appended in this order; a commit may hold several micro-batches. The
# last commit holds older batches written late, so the state must come from (epoch, batch_id), not
# from write order; epoch 1 (a restored lineage) outranks any batch of epoch 0.
BATCHES: list[list[dict[str, Any]]] = [
    [_put(f"p{i:02d}", 0, 0, 1, 10 * i, 10 * i) for i in range(1, 11)],
    [_put("p02", 0, 1, 2, 70, 50), _put("p03", 0, 1, 2, 100, 70), _delete("p04", 0, 1),  # delete ...
     _put("p04", 0, 2, 1, 5, 5), _delete("p05", 0, 2), _put("p12", 0, 2, 1, None, 3)],  # ... then re-put
    [_put("p06", 0, 5, 3, 90, 40), _put("p08", 0, 5, 9, 999, 999),
     _put("p07", 1, 0, 2, 90, 45), _put("p08", 1, 0, 4, 60, 30), _put("p11", 1, 0, 1, 55, 55)],
    [_put("p09", 0, 3, 5, 300, 120), _put("p10", 0, 4, 7, 70, 60), _delete("p01", 0, 4)],  # late
]


def changelog_rows() -> list[dict[str, Any]]:
    rows, offset = [], 0
    for commit, batch in enumerate(BATCHES):
        for row in batch:
            offset += 1
            rows.append({**row, "value_version": 1, "source_partition": offset % 4, "source_offset": offset,
                         "lineage_id": "q-test", "segment": segment_of(row["epoch"], row["batch_id"]),
                         "event_time": T0 + timedelta(seconds=offset),
                         "write_time": T0 + timedelta(minutes=commit, seconds=offset)})
    return rows


def expected_latest() -> dict[str, dict[str, Any]]:
    """The state by the definition, in plain Python: latest row per key by (epoch, batch_id), deletes removed."""
    latest: dict[str, dict[str, Any]] = {}
    for row in changelog_rows():
        held = latest.get(row["key"])
        if held is None or (row["epoch"], row["batch_id"]) > (held["epoch"], held["batch_id"]):
            latest[row["key"]] = row
    return {k: r for k, r in sorted(latest.items()) if r["op"] == "put"}


def expected_state() -> dict[str, dict[str, Any]]:
    """expected_latest() as snapshot rows (snapshot columns, naive UTC times)."""
    naive = lambda v: v.astimezone(UTC).replace(tzinfo=None) if isinstance(v, datetime) else v  # noqa: E731
    return {k: {c: naive(r[c]) for c in SNAPSHOT_COLUMNS} for k, r in expected_latest().items()}


def expected_top(state: dict[str, dict[str, Any]], by: str) -> list[str]:
    return sorted(state, key=lambda k: (state[k][by] is None, -(state[k][by] or 0), k))


# -- fixtures ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    home = tmp_path_factory.mktemp("home")
    shared_jars = PROJECT_ROOT / ".deltastate" / "jars"  # reuse the project's jar cache, no refetch
    shared_jars.mkdir(parents=True, exist_ok=True)
    (home / "jars").symlink_to(shared_jars, target_is_directory=True)
    schemas = home / "schemas"
    shutil.copytree(PROJECT_ROOT / "schemas", schemas)
    text = (schemas / "stores" / f"{STORE}.yaml").read_text().replace(f"name: {STORE}", f"name: {EMPTY}")
    (schemas / "stores" / f"{EMPTY}.yaml").write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DELTASTATE_")}
    env.update(DELTASTATE_HOME=str(home), DELTASTATE_SCHEMAS=str(schemas), DELTASTATE_SNAPSHOT_KEEP="2")
    return load_settings(env)


@pytest.fixture(scope="module")
def spark(settings: Settings):
    from deltastate.infra.spark import get_spark

    return get_spark(settings, "deltastate-test-snapshot")


@pytest.fixture(scope="module")
def changelog(spark, settings: Settings) -> str:
    store = load_store(settings, STORE)
    path = settings.table_path(STORE, CHANGELOG)
    schema = ddl(changelog_columns(store))
    columns = [name for name, _ in changelog_columns(store)]
    rows = changelog_rows()
    start = 0
    for batch in BATCHES:
        chunk = rows[start:start + len(batch)]
        start += len(batch)
        frame = spark.createDataFrame([tuple(r[c] for c in columns) for r in chunk], schema)
        frame.write.format("delta").mode("append").partitionBy("segment").save(path)
    return path


@pytest.fixture(scope="module")
def published(spark, settings: Settings, changelog: str):
    return publish_snapshot(spark, settings)


@pytest.fixture()
def queries(settings: Settings, published) -> Iterator[Queries]:
    with Queries(settings) as q:
        yield q


@pytest.fixture()
def cli() -> click.Group:
    @click.group()
    def main() -> None:
        """test CLI"""

    register(main)
    return main


# -- tests ---------------------------------------------------------------------------------------
def test_no_snapshot_yet_is_a_clear_error(settings: Settings) -> None:
    empty = replace(settings, home=settings.home / "nothing-here")
    with pytest.raises(SnapshotError, match="no snapshot published yet; run `deltastate snapshot publish`"):
        current_snapshot(empty)
    assert list_snapshots(empty) == []


def test_latest_state_matches_definition(spark, settings: Settings, changelog: str) -> None:
    assert changelog_version(spark, changelog) == len(BATCHES) - 1
    assert changelog_version(spark, settings.table_path(EMPTY, CHANGELOG)) is None
    assert commit_time(spark, changelog, 0) is not None
    frame = latest_state(spark, settings, load_store(settings, STORE))
    assert frame.columns == ["key", "games", "total_score", "best_score", "last_played", "source_partition",
                             "source_offset", "epoch", "batch_id", "event_time", "write_time"]
    fields = ("games", "total_score", "best_score", "epoch", "batch_id", "source_offset")
    got = {r["key"]: tuple(r[f] for f in fields) for r in frame.collect()}
    assert got == {k: tuple(r[f] for f in fields) for k, r in expected_latest().items()}
    # The state at an older version: after the first two commits p04 is back, p05 gone, p12 new.
    early = {r["key"] for r in latest_state(spark, settings, load_store(settings, STORE), version=1).collect()}
    assert early == {f"p{i:02d}" for i in range(1, 11) if i != 5} | {"p12"}


def test_published_snapshot_metadata(published, settings: Settings) -> None:
    assert published.current and published.path == current_snapshot(settings)
    stats, empty = published.store(STORE), published.store(EMPTY)
    assert stats is not None and stats.row_count == len(expected_state())
    assert stats.changelog_version == len(BATCHES) - 1 and stats.changelog_committed_at is not None
    assert empty is not None and empty.row_count == 0 and empty.changelog_version is None


def test_get_all_range_match_expected(queries: Queries, published) -> None:
    state = expected_state()
    everything = queries.all(STORE)
    assert everything.snapshot_version == published.version
    assert everything.columns == SNAPSHOT_COLUMNS
    assert everything.rows == list(state.values())
    for key, row in state.items():
        assert queries.get(STORE, key).row == row
    assert [r["key"] for r in queries.all(STORE, limit=3).rows] == list(state)[:3]
    assert [r["key"] for r in queries.range(STORE, "p03", "p08").rows] == [k for k in state if "p03" <= k <= "p08"]
    assert [r["key"] for r in queries.range(STORE, "p03", "p08", limit=2).rows] == ["p03", "p04"]
    assert queries.range(STORE, "p9", "p1").rows == []
    assert queries.all(EMPTY).rows == []
    for missing in ("p01", "p05", "nobody"):  # deleted last, deleted last, never existed
        with pytest.raises(KeyNotFoundError):
            queries.get(STORE, missing)


def test_top_and_rank_agree_with_expected(queries: Queries) -> None:
    state = expected_state()
    for by in (None, "best_score", "games"):
        order = expected_top(state, by or "total_score")
        assert [r["key"] for r in queries.top(STORE, n=len(state), by=by).rows] == order
        assert [r["key"] for r in queries.top(STORE, n=3, by=by).rows] == order[:3]
        for position, key in enumerate(order, start=1):
            row = queries.rank(STORE, key, by=by).row
            assert row["rank"] == position and row["key"] == key
    assert queries.top(STORE).rows == [state[k] for k in expected_top(state, "total_score")[:10]]
    with pytest.raises(KeyNotFoundError):
        queries.rank(STORE, "p05")


def test_bad_arguments(queries: Queries) -> None:
    with pytest.raises(QueryError, match="parameter 'by'"):
        queries.top(STORE, by="key")
    with pytest.raises(QueryError, match="parameter 'by'"):
        queries.rank(STORE, "p02", by="nope")
    with pytest.raises(QueryError, match="parameter 'n'"):
        queries.top(STORE, n=0)
    with pytest.raises(UnknownStoreError):
        queries.get("no_such_store", "k")


def test_sql_reads_and_refuses_writes(queries: Queries) -> None:
    state = expected_state()
    result = queries.sql(f"SELECT count(*) AS n, sum(total_score) AS s FROM {STORE}")
    assert result.row == {"n": len(state), "s": sum(v["total_score"] or 0 for v in state.values())}
    assert {r["store"] for r in queries.sql("SELECT * FROM _snapshot_stores").rows} == set(list_stores(queries.settings))
    for write in (f"DELETE FROM {STORE}", f"INSERT INTO {STORE} (key) VALUES ('x')", "CREATE TEMP TABLE t AS SELECT 1",
                  "SET enable_external_access = true", f"SELECT 1; DROP TABLE {STORE}"):
        with pytest.raises(QueryError, match="^read-only: "):
            queries.sql(write)
    with pytest.raises(QueryError, match="^read-only: "):
        queries.sql("SELECT * FROM read_csv('/etc/passwd')")  # external access is off
    with queries.reader.snapshot() as snap:  # below the guard, the connection itself refuses
        with pytest.raises(QueryError, match="^read-only: "):
            run(snap, f"DELETE FROM {STORE}")
        with pytest.raises(QueryError, match="^read-only: "):
            run(snap, "SET lock_configuration = false")
    assert len(queries.all(STORE).rows) == len(state)


def test_cli_outputs(cli: click.Group, settings: Settings, published) -> None:
    runner = CliRunner()
    state = expected_state()
    best = expected_top(state, "total_score")[0]

    out = runner.invoke(cli, ["get", STORE, best], obj=settings)
    assert out.exit_code == 0, out.output
    *lines, footer = out.output.splitlines()  # name/value lines: the key and values, no bookkeeping
    assert [line.split()[0] for line in lines] == SNAPSHOT_COLUMNS[:5] and lines[0].split() == ["key", best]
    assert footer.startswith("(1 row, snapshot ")

    out = runner.invoke(cli, ["top", STORE, "--n", "3", "--json"], obj=settings)
    assert out.exit_code == 0, out.output
    rows = [json.loads(line) for line in out.output.splitlines()]
    assert [r["key"] for r in rows] == expected_top(state, "total_score")[:3]
    assert rows[0]["event_time"].endswith("Z")

    out = runner.invoke(cli, ["rank", STORE, best, "--by", "total_score", "--json"], obj=settings)
    assert json.loads(out.output) == {"rank": 1, "key": best, "total_score": state[best]["total_score"]}
    out = runner.invoke(cli, ["range", STORE, "p02", "p04", "--limit", "2", "--json"], obj=settings)
    assert [json.loads(x)["key"] for x in out.output.splitlines()] == ["p02", "p03"]
    out = runner.invoke(cli, ["all", STORE], obj=settings)
    assert out.exit_code == 0 and len(out.output.splitlines()) == len(state) + 3
    out = runner.invoke(cli, ["sql", f"SELECT count(*) AS n FROM {STORE}", "--json"], obj=settings)
    assert json.loads(out.output) == {"n": len(state)}

    out = runner.invoke(cli, ["get", STORE, "p05"], obj=settings)
    assert out.exit_code == 1 and out.stderr.startswith("not found: ") and out.stdout == ""
    out = runner.invoke(cli, ["sql", f"DROP TABLE {STORE}"], obj=settings)
    assert out.exit_code == 2 and out.stderr.startswith("error: read-only: ")
    out = runner.invoke(cli, ["top", "nope"], obj=settings)
    assert out.exit_code == 2 and "unknown store 'nope'" in out.stderr
    out = runner.invoke(cli, ["top", STORE, "--by", "key"], obj=settings)
    assert out.exit_code == 2 and "parameter 'by'" in out.stderr

    out = runner.invoke(cli, ["snapshot", "list", "--json"], obj=settings)
    listed = [json.loads(x) for x in out.output.splitlines()]
    assert out.exit_code == 0 and [x["current"] for x in listed][-1] is True
    out = runner.invoke(cli, ["snapshot", "list"], obj=settings)
    assert out.exit_code == 0 and "*" in out.output


def test_publish_again_versions_retention_pointer(spark, settings: Settings, published) -> None:
    runner = CliRunner()
    before = max(snapshot_files(settings))
    cli_group = click.Group("main")
    register(cli_group)
    out = runner.invoke(cli_group, ["snapshot", "publish"], obj=settings)
    assert out.exit_code == 0, out.output + out.stderr
    assert out.output.startswith(f"published snapshot {before + 1}: ") and "player_stats" in out.output
    out = runner.invoke(cli_group, ["snapshot", "publish", "--store", STORE, "--json"], obj=settings)
    assert out.exit_code == 0, out.output + out.stderr
    third = json.loads(out.output)
    assert third["snapshot_version"] == before + 2
    # Every declared store (the ones not rebuilt are carried over), EMPTY among them.
    assert {s["store"] for s in third["stores"]} == set(list_stores(settings)) and EMPTY in list_stores(settings)
    files = snapshot_files(settings)
    assert list(files) == [before + 1, before + 2]  # keep = 2
    assert (settings.snapshots_dir / CURRENT).read_text().strip() == files[before + 2].name
    assert current_snapshot(settings) == files[before + 2]
    assert [i.current for i in list_snapshots(settings)] == [False, True]
    assert not [p for p in settings.snapshots_dir.iterdir() if ".tmp-" in p.name]


def test_readers_never_see_a_partial_snapshot(spark, settings: Settings, published) -> None:
    want = len(expected_state())
    stop = threading.Event()
    errors: list[BaseException] = []
    seen: list[int] = []
    queries = Queries(settings)

    def read_loop() -> None:
        try:
            while not stop.is_set():
                everything = queries.all(STORE)
                counted = queries.sql(f"SELECT count(*) AS n FROM {STORE}").row["n"]
                assert len(everything.rows) == want and counted == want
                assert queries.get(STORE, "p09").row["total_score"] == 300
                seen.append(everything.snapshot_version)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    readers = [threading.Thread(target=read_loop) for _ in range(4)]
    for thread in readers:
        thread.start()
    try:
        versions = [publish_snapshot(spark, settings).version for _ in range(2)]
    finally:
        stop.set()
        for thread in readers:
            thread.join(60)
        queries.close()
    assert not errors, errors[0]
    assert len(seen) > 0 and max(seen) <= versions[-1]
    assert len(set(seen)) >= 2, f"readers saw only {set(seen)}"
    assert len(snapshot_files(settings)) == 2
