"""The REST service end to end: player_stats events produced to the real broker, run by the real
streaming engine into its Delta changelog, published to a DuckDB snapshot, then every endpoint
asked through FastAPI's TestClient and compared with tests/reference.py computed from the same
events. Then a second run that is NOT published: staleness shows, max_staleness refuses, fresh=true
sees it; then a publish the running app picks up, and as-of reads of the older version."""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from support.local_infra import make_home
from support.reference import expected, rank_of, top
from support.store_checks import PARTITIONS, STORE, consume_positions, generated, new_topic, produce

from deltastate.config import Settings
from deltastate.engine import run_store
from deltastate.service import ServiceOptions, create_app
from deltastate.snapshot import publish_snapshot

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
FIELDS = ("games", "total_score", "best_score", "last_played")


@pytest.fixture(scope="module")
def world(broker: str, spark, session_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    home = make_home(tmp_path_factory.mktemp("service-home"))
    settings = dataclasses.replace(session_settings, home=home, storage_root=str(home / "data"))
    topic = f"svc-{uuid.uuid4().hex[:8]}"
    ref = new_topic(settings, broker, topic)
    produce(settings, topic, generated(4_000, 400, seed=61, tombstones=0.03), ref)
    run_store(settings, STORE, once=True, topic=topic)
    info = publish_snapshot(spark, settings)
    exp = expected(ref.records, settings.max_value_bytes)
    return {"settings": settings, "topic": topic, "ref": ref, "exp": exp, "info": info, "broker": broker}


@pytest.fixture()
def client(world) -> Iterator[TestClient]:
    with TestClient(create_app(world["settings"])) as c:
        yield c


def values(row: dict[str, Any]) -> dict[str, Any]:
    return {f: row[f] for f in FIELDS}


def page_all(client: TestClient, path: str, limit: int, **params: Any) -> list[dict[str, Any]]:
    rows, cursor = [], None
    while True:
        body = client.get(path, params={"limit": limit, **params, **({"cursor": cursor} if cursor else {})}).json()
        rows += body["rows"]
        cursor = body["next_cursor"]
        if cursor is None:
            return rows


def test_reads_match_reference(world, client: TestClient) -> None:
    exp, info = world["exp"], world["info"]
    state = exp.state
    assert 300 < len(state) <= 400 and exp.tombstones > 0
    everything = page_all(client, f"/stores/{STORE}/all", 37)
    assert {r["key"]: values(r) for r in everything} == state
    assert [r["key"] for r in everything] == sorted(state)
    keys = sorted(state)
    for key in keys[::9]:
        r = client.get(f"/stores/{STORE}/keys/{key}")
        assert r.status_code == 200 and values(r.json()["value"]) == state[key]
        meta = r.json()["meta"]
        assert meta["snapshot_version"] == info.version and meta["staleness_seconds"] == 0.0
        assert meta["published_at"] == info.published_at.isoformat() + "Z"
        assert r.headers["X-Deltastate-Snapshot-Version"] == str(info.version)
        assert r.headers["X-Deltastate-Staleness"] == "0.000"
        assert r.headers["X-Deltastate-Changelog-Version"] == str(info.store(STORE).changelog_version)
    lo, hi = keys[40], keys[90]
    ranged = page_all(client, f"/stores/{STORE}/range", 16, **{"from": lo, "to": hi})
    assert [r["key"] for r in ranged] == [k for k in keys if lo <= k <= hi]
    for by in ("total_score", "best_score"):
        body = client.get(f"/stores/{STORE}/top", params={"n": 15, "by": by}).json()
        assert [(r["key"], values(r)) for r in body["rows"]] == top(state, 15, by)
        for key in keys[::37]:
            r = client.get(f"/stores/{STORE}/keys/{key}/rank", params={"by": by}).json()
            assert r["rank"] == rank_of(state, key, by)
    default_top = client.get(f"/stores/{STORE}/top", params={"n": 3}).json()["rows"]
    assert [r["key"] for r in default_top] == [k for k, _ in top(state, 3)]
    # Deleted players (a tombstone was their last record) and unknown keys are 404 with a JSON error.
    deleted = {r.key.decode() for r in world["ref"].records if r.key} - set(state)
    assert deleted
    for key in [*sorted(deleted)[:3], "nobody-at-all"]:
        r = client.get(f"/stores/{STORE}/keys/{key}")
        assert r.status_code == 404 and r.json()["error"] == {
            "type": "key_not_found", "message": f"store '{STORE}': key '{key}' not found", "store": STORE, "key": key}
        assert client.get(f"/stores/{STORE}/keys/{key}/rank").status_code == 404


def test_stores_and_key_metadata(world, client: TestClient) -> None:
    exp, info = world["exp"], world["info"]
    body = client.get("/stores").json()
    stats = next(s for s in body["stores"] if s["store"] == STORE)
    assert stats["row_count"] == len(exp.state) and stats["type"] == "key_value"
    assert stats["changelog_version"] == info.store(STORE).changelog_version and stats["staleness_seconds"] == 0.0
    assert [f["name"] for f in stats["value_schema"]["fields"]] == list(FIELDS)
    assert stats["key"]["field"] == "player_id"
    # The partition the broker really put each key's records on (read back, not computed).
    positions = consume_positions(world["broker"], world["topic"], len(world["ref"].records))
    placed = {r.key.decode(): r.partition for r in positions if r.key}
    for key in sorted(exp.state)[::23]:
        meta = client.get(f"/stores/{STORE}/keys/{key}/metadata").json()
        assert meta["partition"] == placed[key] and meta["partitions"] == PARTITIONS
        assert meta["topic"] == world["topic"]  # the topic the run read (--topic), not the declared one
        assert meta["present"] is True and meta["source_partition"] == placed[key]
        assert meta["snapshot_version"] == info.version
        assert meta["changelog_version"] == info.store(STORE).changelog_version
    missing = client.get(f"/stores/{STORE}/keys/never-seen/metadata").json()
    assert missing["present"] is False and missing["source_partition"] is None


def test_errors_name_what_is_wrong(client: TestClient) -> None:
    r = client.get("/stores/no_such_store/keys/x")
    assert r.status_code == 404 and r.json()["error"]["type"] == "unknown_store"
    for path, params, parameter in [(f"/stores/{STORE}/top", {"n": 0}, "n"), (f"/stores/{STORE}/top", {"n": "many"}, "n"),
                                    (f"/stores/{STORE}/top", {"by": "key"}, "by"),
                                    (f"/stores/{STORE}/all", {"limit": -1}, "limit"),
                                    (f"/stores/{STORE}/all", {"cursor": "!!"}, "cursor"),
                                    (f"/stores/{STORE}/keys/a", {"max_staleness": "-1"}, "max_staleness"),
                                    (f"/stores/{STORE}/keys/a", {"as_of": "noon"}, "as_of"),
                                    (f"/stores/{STORE}/keys/a", {"fresh": "true", "as_of_version": 1}, "fresh")]:
        r = client.get(path, params=params)
        assert r.status_code == 400, (path, params, r.text)
        assert r.json()["error"]["parameter"] == parameter and f"parameter '{parameter}'" in r.json()["error"]["message"]
    r = client.post("/sql", json={"nope": 1})
    assert r.status_code == 400 and r.json()["error"]["parameter"] == "query"


HARDENING = [
    "DROP TABLE player_stats",
    "DELETE FROM player_stats",
    "INSERT INTO player_stats (key) VALUES ('intruder')",
    "UPDATE player_stats SET games = 0",
    "CREATE TABLE stolen AS SELECT * FROM player_stats",
    "ATTACH '{tmp}/attached.duckdb' AS other",
    "COPY player_stats TO '{tmp}/copied.csv'",
    "EXPORT DATABASE '{tmp}/exported'",
    "INSTALL httpfs",
    "LOAD httpfs",
    "SET enable_external_access = true",
    "PRAGMA enable_profiling",
    "CALL pragma_version()",
    "SELECT 1; DROP TABLE player_stats",
    "WITH x AS (SELECT 1) INSERT INTO player_stats (key) SELECT 'w' FROM x",
    "SELECT * FROM read_csv('{tmp}/seed.csv')",
    "SELECT * FROM '{tmp}/seed.csv'",
    "SELECT content FROM read_text('/etc/hostname')",
    "SELECT * FROM read_parquet('https://example.com/x.parquet')",
    "EXPLAIN ANALYZE DELETE FROM player_stats",
]


def test_sql_answers_and_hardening(world, client: TestClient, tmp_path: Path) -> None:
    state = world["exp"].state
    r = client.post("/sql", json={"query": "SELECT count(*) AS n, sum(total_score) AS s FROM player_stats"})
    assert r.status_code == 200 and r.json()["rows"] == [{"n": len(state), "s": sum(v["total_score"] for v in state.values())}]
    (tmp_path / "seed.csv").write_text("a\n1\n")
    for statement in HARDENING:
        r = client.post("/sql", json={"query": statement.format(tmp=tmp_path)})
        assert r.status_code == 400, (statement, r.text)
        assert r.json()["error"]["type"] == "query_refused", (statement, r.json())
    # Refused, not executed: nothing was written anywhere, the table is whole.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["seed.csv"]
    r = client.post("/sql", json={"query": "SELECT count(*) AS n FROM player_stats"})
    assert r.json()["rows"] == [{"n": len(state)}]


def test_sql_time_and_row_limits(world) -> None:
    options = ServiceOptions(sql_timeout_s=0.5, sql_max_rows=50)
    with TestClient(create_app(world["settings"], options)) as client:
        r = client.post("/sql", json={"query": "SELECT sum(hash(i)) FROM range(100000000000) t(i)"})
        assert r.status_code == 400 and r.json()["error"]["type"] == "sql_limit" and "time limit" in r.text
        r = client.post("/sql", json={"query": "SELECT key FROM player_stats"})
        assert r.status_code == 400 and r.json()["error"]["type"] == "sql_limit" and "row limit" in r.text
        r = client.post("/sql", json={"query": "SELECT key FROM player_stats ORDER BY key LIMIT 50"})
        assert r.status_code == 200 and [x["key"] for x in r.json()["rows"]] == sorted(world["exp"].state)[:50]


def test_bearer_token(world) -> None:
    with TestClient(create_app(world["settings"], ServiceOptions(api_token="s3cret-token"))) as client:
        key = sorted(world["exp"].state)[0]
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic s3cret-token"}):
            r = client.get(f"/stores/{STORE}/keys/{key}", headers=headers)
            assert r.status_code == 401 and r.headers["WWW-Authenticate"].startswith("Bearer")
            assert client.post("/sql", json={"query": "SELECT 1"}, headers=headers).status_code == 401
        ok = client.get(f"/stores/{STORE}/keys/{key}", headers={"Authorization": "Bearer s3cret-token"})
        assert ok.status_code == 200 and values(ok.json()["value"]) == world["exp"].state[key]
        assert client.get("/health").status_code == 200  # probes need no token


def test_metrics_count_what_was_served(world) -> None:
    with TestClient(create_app(world["settings"])) as client:
        key = sorted(world["exp"].state)[0]
        for _ in range(7):
            assert client.get(f"/stores/{STORE}/keys/{key}").status_code == 200
        for _ in range(3):
            assert client.get(f"/stores/{STORE}/keys/missing-key").status_code == 404
        text = client.get("/metrics").text
    lines = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line and line[0] != "#"}
    endpoint = 'endpoint="/stores/{store}/keys/{key}"'
    assert lines[f'deltastate_request_seconds_count{{{endpoint},method="GET"}}'] == 10
    assert lines[f'deltastate_requests_total{{{endpoint},status="200"}}'] == 7
    assert lines[f'deltastate_errors_total{{{endpoint},error="key_not_found",status="404"}}'] == 3
    assert lines["deltastate_snapshot_version"] == world["info"].version
    assert 0 <= lines["deltastate_snapshot_age_seconds"] < 3600


def test_fresh_staleness_swap_and_as_of(world, spark) -> None:
    settings, ref, exp1, v1 = world["settings"], world["ref"], world["exp"], world["info"]
    # A second micro-batch: updates, new players and deletions, committed but not published.
    produce(settings, world["topic"], generated(1_500, 500, seed=62, tombstones=0.05), ref)
    run_store(settings, STORE, once=True, topic=world["topic"])
    exp2 = expected(ref.records, settings.max_value_bytes)
    changed = sorted(k for k in exp1.state.keys() & exp2.state.keys() if exp1.state[k] != exp2.state[k])
    added, gone = sorted(exp2.state.keys() - exp1.state.keys()), sorted(exp1.state.keys() - exp2.state.keys())
    assert changed and added and gone
    with TestClient(create_app(settings)) as client:
        stale = client.get(f"/stores/{STORE}/keys/{changed[0]}")
        meta = stale.json()["meta"]
        assert values(stale.json()["value"]) == exp1.state[changed[0]]  # the snapshot, as published
        assert meta["newest_changelog_version"] > meta["changelog_version"] == v1.store(STORE).changelog_version
        assert meta["staleness_seconds"] > 0
        r = client.get(f"/stores/{STORE}/keys/{changed[0]}", params={"max_staleness": 0})
        assert r.status_code == 503 and r.json()["error"]["type"] == "stale" and r.headers["Retry-After"] == "1"
        assert r.json()["error"]["staleness_seconds"] == pytest.approx(meta["staleness_seconds"], abs=0.01)
        assert client.get(f"/stores/{STORE}/keys/{changed[0]}", params={"max_staleness": 10**6}).status_code == 200
        # fresh=true: the snapshot plus every committed micro-batch after it.
        for key in changed[:5] + added[:5]:
            r = client.get(f"/stores/{STORE}/keys/{key}", params={"fresh": "true", "max_staleness": 0})
            assert r.status_code == 200 and values(r.json()["value"]) == exp2.state[key]
            assert r.json()["meta"]["fresh_to_version"] == meta["newest_changelog_version"]
            assert r.json()["meta"]["staleness_seconds"] == 0.0
        for key in gone[:5]:
            assert client.get(f"/stores/{STORE}/keys/{key}", params={"fresh": "true"}).status_code == 404
        fresh_all = page_all(client, f"/stores/{STORE}/all", 97, fresh="true")
        assert {r["key"]: values(r) for r in fresh_all} == exp2.state
        fresh_top = client.get(f"/stores/{STORE}/top", params={"n": 20, "fresh": "true"}).json()["rows"]
        assert [(r["key"], values(r)) for r in fresh_top] == top(exp2.state, 20)
        some = added[0]
        rank = client.get(f"/stores/{STORE}/keys/{some}/rank", params={"fresh": "true"}).json()["rank"]
        assert rank == rank_of(exp2.state, some)

        # A publish is picked up by the running app: no restart, the next request is on v2.
        v2 = publish_snapshot(spark, settings)
        r = client.get(f"/stores/{STORE}/keys/{changed[0]}", params={"max_staleness": 0})
        assert r.status_code == 200 and values(r.json()["value"]) == exp2.state[changed[0]]
        assert r.json()["meta"]["snapshot_version"] == v2.version
        swaps = [x for x in client.get("/metrics").text.splitlines() if x.startswith("deltastate_snapshot_swaps_total")]
        assert swaps == ["deltastate_snapshot_swaps_total 1.0"]

        # as_of_version / as_of: the retained older snapshot answers as it was.
        r = client.get(f"/stores/{STORE}/keys/{changed[0]}", params={"as_of_version": v1.version})
        assert values(r.json()["value"]) == exp1.state[changed[0]] and r.json()["meta"]["snapshot_version"] == v1.version
        between = (v1.published_at + (v2.published_at - v1.published_at) / 2).isoformat()  # naive: UTC
        r = client.get(f"/stores/{STORE}/all", params={"as_of": between, "limit": 1000})
        assert r.json()["meta"]["snapshot_version"] == v1.version
        assert {x["key"]: values(x) for x in r.json()["rows"]} == exp1.state
        r = client.get(f"/stores/{STORE}/top", params={"as_of": v2.published_at.isoformat() + "Z", "n": 5})
        assert r.json()["meta"]["snapshot_version"] == v2.version
        before = (v1.published_at - timedelta(hours=1)).isoformat() + "Z"
        for params, parameter in (({"as_of": before}, "'as_of'"), ({"as_of_version": v2.version + 50}, "'as_of_version'")):
            r = client.get(f"/stores/{STORE}/keys/{changed[0]}", params=params)
            assert r.status_code == 404 and r.json()["error"]["type"] == "snapshot_not_retained"
            assert parameter in r.json()["error"]["message"]
    assert json.loads(json.dumps(exp2.tombstones)) > exp1.tombstones


def _newest_commit(settings: Settings) -> int:
    log = Path(settings.storage_root) / "stores" / STORE / "changelog" / "_delta_log"
    return max(int(p.stem) for p in log.glob("*.json"))


@pytest.mark.parametrize("follow_s", [0.2, 0.0])
def test_new_commits_are_merged_before_any_read_asks(world, follow_s: float) -> None:
    """The service merges commits newer than its snapshot in the background (follower.py), so the
    first committed read after a start does not read them all; turned off, only a read merges."""
    settings, ref = world["settings"], world["ref"]
    produce(settings, world["topic"], generated(800, 450, seed=63 + int(follow_s * 10), tombstones=0.05), ref)
    run_store(settings, STORE, once=True, topic=world["topic"])
    newest, exp = _newest_commit(settings), expected(ref.records, settings.max_value_bytes)
    options = dataclasses.replace(ServiceOptions(), follow_commits_s=follow_s)
    with TestClient(create_app(settings, options)) as client:
        state = client.app.state.service
        deadline, merged = time.monotonic() + (15 if follow_s else 2), None
        while time.monotonic() < deadline and merged != newest:
            version = state.pool.current_version()
            merged = None if version is None else state.reads.merged_to(version, STORE)
            time.sleep(0.05)
        assert merged == (newest if follow_s else None)
        fresh_all = page_all(client, f"/stores/{STORE}/all", 211, fresh="true")
        assert {r["key"]: values(r) for r in fresh_all} == exp.state
        assert state.reads.merged_to(state.pool.current_version(), STORE) == newest
