"""The fast path for point reads answers exactly what FastAPI answers: player_stats events through the
real broker, run by the real streaming engine into its Delta changelog, published to a DuckDB
snapshot, then a second run left unpublished (so staleness, max_staleness and committed reads have
something to show). Two real uvicorn servers on free ports serve the same home with the same bearer
token, one with the fast path and one without; every request below goes to both, and status,
headers (all but Date) and body must be byte-for-byte equal. The fast server's own counters prove
the fast path answered the requests it is meant to, and the answers' values are checked against
tests/support/reference.py computed from the produced records."""

from __future__ import annotations

import dataclasses
import json
import re
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from support.local_infra import free_port, make_home
from support.reference import expected, rank_of, top
from support.store_checks import STORE, generated, new_topic, produce

from deltastate.config import Settings
from deltastate.engine import run_store
from deltastate.errors import ConfigError
from deltastate.service import ServiceOptions, create_app
from deltastate.snapshot import publish_snapshot

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
TOKEN = "fast-path-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
FIELDS = ("games", "total_score", "best_score", "last_played")


@pytest.fixture(scope="module")
def world(broker: str, spark, session_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    home = make_home(tmp_path_factory.mktemp("fastpath-home"))
    settings = dataclasses.replace(session_settings, home=home, storage_root=str(home / "data"))
    topic = f"fast-{uuid.uuid4().hex[:8]}"
    ref = new_topic(settings, broker, topic)
    produce(settings, topic, generated(2_000, 250, seed=83, tombstones=0.04), ref)
    run_store(settings, STORE, once=True, topic=topic)
    info = publish_snapshot(spark, settings)
    published = expected(ref.records, settings.max_value_bytes)
    # A second run, not published: the snapshot trails the changelog.
    produce(settings, topic, generated(600, 300, seed=84, tombstones=0.05), ref)
    run_store(settings, STORE, once=True, topic=topic)
    return {"settings": settings, "info": info, "published": published, "ref": ref,
            "committed": expected(ref.records, settings.max_value_bytes)}


def _start(settings: Settings, fast_path: bool) -> tuple[uvicorn.Server, threading.Thread, Any]:
    app = create_app(settings, ServiceOptions(api_token=TOKEN, fast_path=fast_path))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning",
                                           access_log=False))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.05)
    return server, thread, app


@pytest.fixture(scope="module")
def servers(world) -> Iterator[dict[str, Any]]:
    fast, fast_thread, fast_app = _start(world["settings"], True)
    plain, plain_thread, _ = _start(world["settings"], False)
    port = lambda s: s.servers[0].sockets[0].getsockname()[1]  # noqa: E731
    with httpx.Client(base_url=f"http://127.0.0.1:{port(fast)}", timeout=60) as f, \
            httpx.Client(base_url=f"http://127.0.0.1:{port(plain)}", timeout=60) as p:
        yield {"fast": f, "plain": p, "app": fast_app}
    for server, thread in ((fast, fast_thread), (plain, plain_thread)):
        server.should_exit = True
        thread.join(30)


def both(servers: dict[str, Any], method: str, path: str, **kwargs: Any) -> httpx.Response:
    """Send one request to both servers; assert the answers are the same bytes; return the fast one."""
    kwargs.setdefault("headers", AUTH)
    answers = [servers[name].request(method, path, **kwargs) for name in ("fast", "plain")]
    fast, plain = answers
    described = f"{method} {path} {kwargs}"
    assert fast.status_code == plain.status_code, (described, fast.text, plain.text)
    assert _headers(fast) == _headers(plain), described
    assert fast.content == plain.content, (described, fast.content, plain.content)
    return fast


def _headers(answer: httpx.Response) -> list[tuple[bytes, bytes]]:
    """The raw headers but Date, with the server's own address (in a redirect's Location) left out."""
    own = f"{answer.url.host}:{answer.url.port}".encode()
    return [(k, v.replace(own, b"SERVER")) for k, v in answer.headers.raw if k.lower() != b"date"]


def counted(servers: dict[str, Any]) -> tuple[int, int]:
    fast_path = servers["app"].state.fast_path
    return fast_path.answered, fast_path.passed


def values(row: dict[str, Any]) -> dict[str, Any]:
    return {f: row[f] for f in FIELDS}


def test_point_gets_are_the_same_bytes(world, servers) -> None:
    published, committed = world["published"].state, world["committed"].state
    keys = sorted(published)
    deleted = sorted({r.key.decode() for r in world["ref"].records if r.key} - set(committed))
    assert len(keys) > 150 and deleted
    before = counted(servers)
    for key in keys[::7]:
        r = both(servers, "GET", f"/stores/{STORE}/keys/{key}")
        assert r.status_code == 200 and values(r.json()["value"]) == published[key]
        assert r.json()["meta"]["snapshot_version"] == world["info"].version
        assert float(r.headers["X-Deltastate-Staleness"]) > 0  # the second run is not published
    for key in ["nobody", *deleted[:3], "é-ü", 'quote"back\\slash', "x" * 5_000, "a b", "%00"]:
        r = both(servers, "GET", f"/stores/{STORE}/keys/{key}")
        assert r.status_code == 404
    # Answered by the fast path itself: every hit and miss above (its counter only moves for those).
    answered, passed = counted(servers)
    assert answered - before[0] >= len(keys[::7]) + 8 and passed == before[1]
    # Committed reads see the unpublished run; the reference says what it holds.
    changed = [k for k in sorted(committed) if committed[k] != published.get(k)]
    assert changed
    for key in changed[:20]:
        for params in ({"consistency": "committed"}, {"fresh": "true"}, {"fresh": "1"}):
            r = both(servers, "GET", f"/stores/{STORE}/keys/{key}", params=params)
            assert values(r.json()["value"]) == committed[key] and r.json()["meta"]["staleness_seconds"] == 0.0
    for key in deleted[:3]:
        assert both(servers, "GET", f"/stores/{STORE}/keys/{key}", params={"consistency": "committed"}).status_code == 404


@pytest.mark.parametrize("params", [
    {"max_staleness": "0"}, {"max_staleness": "86400"}, {"max_staleness": "3600.5"}, {"max_staleness": "-1"},
    {"max_staleness": "abc"}, {"max_staleness": "nan"}, {"max_staleness": ""}, {"max_staleness": "1e9"},
    {"max_staleness": ["1", "2"]}, {"consistency": "snapshot"}, {"consistency": "snapshot", "fresh": "true"},
    {"consistency": "committed", "max_staleness": "0"}, {"consistency": "sometimes"}, {"fresh": "maybe"},
    {"fresh": "false"}, {"as_of_version": "1"}, {"as_of_version": "99"}, {"as_of_version": "0"},
    {"as_of": "2999-01-01T00:00:00"}, {"as_of": "noon"}, {"as_of": "1", "as_of_version": "1"},
    {"fresh": "true", "as_of_version": "1"}, {"schema_version": "1"}, {"schema_version": "2"},
    {"schema_version": "0"}, {"schema_version": "x"}, {"unknown": "ignored"},
])
def test_parameters_are_the_same_bytes(world, servers, params) -> None:
    key = sorted(world["published"].state)[3]
    for path in (f"/stores/{STORE}/keys/{key}", f"/stores/{STORE}/keys/{key}/rank"):
        both(servers, "GET", path, params=params)
    both(servers, "POST", f"/stores/{STORE}/keys:batchGet", params=params, json={"keys": [key, "nobody"]})


def test_wrong_stores_paths_and_methods(world, servers) -> None:
    key = sorted(world["published"].state)[0]
    for path in ["/stores/no_such_store/keys/x", "/stores/Bad$Name/keys/x", "/stores/trade_stats/keys/x",
                 "/stores/user_sessions/keys/x/rank", "/stores/no_such_store/keys/x/rank", f"/stores/{STORE}/keys/", f"/stores/{STORE}/keys/..",
                 f"/stores/{STORE}/keys/a%2Fb", f"/stores/{STORE}/keys/{key}/", "/stores//keys/x"]:
        both(servers, "GET", path)
    for method in ("HEAD", "POST", "DELETE"):
        both(servers, method, f"/stores/{STORE}/keys/{key}")
    both(servers, "GET", f"/stores/{STORE}/keys:batchGet")
    both(servers, "POST", "/stores/no_such_store/keys:batchGet", json={"keys": ["a"]})


def test_auth_is_the_same(world, servers) -> None:
    key = sorted(world["published"].state)[0]
    before = counted(servers)
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"},
                    {"Authorization": TOKEN}, {"Authorization": f"bearer {TOKEN}"}, {"Authorization": f"Bearer  {TOKEN}"}):
        for method, path, extra in (("GET", f"/stores/{STORE}/keys/{key}", {}),
                                    ("GET", f"/stores/{STORE}/keys/{key}/rank", {}),
                                    ("POST", f"/stores/{STORE}/keys:batchGet", {"json": {"keys": [key]}})):
            r = both(servers, method, path, headers=headers, **extra)
            good = headers.get("Authorization", "").lower().startswith("bearer") and TOKEN in headers["Authorization"]
            assert r.status_code == (200 if good else 401), (headers, r.text)
    assert both(servers, "GET", "/health", headers={}).status_code == 200
    # A refused request never reaches the fast path.
    answered, passed = counted(servers)
    assert answered - before[0] == 2 * 3 and passed - before[1] == 1  # the two good tokens; /health


def test_rank_and_batch_get(world, servers) -> None:
    published, committed = world["published"].state, world["committed"].state
    keys = sorted(published)
    for key in keys[::23]:
        for by in ("total_score", "best_score"):
            r = both(servers, "GET", f"/stores/{STORE}/keys/{key}/rank", params={"by": by})
            assert r.json()["rank"] == rank_of(published, key, by)
        r = both(servers, "GET", f"/stores/{STORE}/keys/{key}/rank", params={"consistency": "committed"})
        assert r.json()["rank"] == rank_of(committed, key)
    for params in ({"by": "key"}, {"by": ""}, {"consistency": "latest"}):
        assert both(servers, "GET", f"/stores/{STORE}/keys/{keys[0]}/rank", params=params).status_code == 400
    assert both(servers, "GET", f"/stores/{STORE}/keys/nobody/rank").status_code == 404
    asked = [*keys[:5], "nobody", keys[1], "é"]
    r = both(servers, "POST", f"/stores/{STORE}/keys:batchGet", json={"keys": asked})
    assert [row["key"] for row in r.json()["rows"]] == [k for k in asked if k in published]
    assert r.json()["missing"] == ["nobody", "é"]
    many = keys[:70] + ["nobody"] * 3  # more than the fast path answers on the event loop
    r = both(servers, "POST", f"/stores/{STORE}/keys:batchGet", json={"keys": many})
    assert [values(row) for row in r.json()["rows"]] == [published[k] for k in many if k in published]
    r = both(servers, "POST", f"/stores/{STORE}/keys:batchGet", params={"consistency": "committed"},
             json={"keys": keys[:40]})
    assert {row["key"]: values(row) for row in r.json()["rows"]} == {k: committed[k] for k in keys[:40] if k in committed}
    before = counted(servers)
    bad_bodies: list[dict[str, Any]] = [
        {"json": {"keys": []}}, {"json": {"keys": ["a"] * 1_001}}, {"json": {"keys": [1, 2]}}, {"json": {"key": ["a"]}},
        {"json": ["a"]}, {"content": b"{not json"}, {"content": b""}, {"content": json.dumps({"keys": ["a"]}).encode()},
        {"content": b'{"keys":["a"]}', "headers": {**AUTH, "Content-Type": "text/plain"}},
        {"content": b'{"keys":["a"]}', "headers": {**AUTH, "Content-Type": "application/vnd.api+json"}},
        {"json": {"keys": ["a"], "extra": 1}}]
    for extra in bad_bodies:
        both(servers, "POST", f"/stores/{STORE}/keys:batchGet", **extra)
    answered, passed = counted(servers)
    assert passed - before[1] >= 7 and answered - before[0] >= 1  # FastAPI judged the bad ones


def test_top_is_the_same_bytes(world, servers) -> None:
    published, committed = world["published"].state, world["committed"].state
    before = counted(servers)
    for n in (1, 10, 100, 150):  # 150: more rows than the fast path answers on the event loop
        for by in ("total_score", "best_score"):
            r = both(servers, "GET", f"/stores/{STORE}/top", params={"n": n, "by": by})
            assert [(row["key"], values(row)) for row in r.json()["rows"]] == top(published, n, by)
    r = both(servers, "GET", f"/stores/{STORE}/top")  # n defaults to 10
    assert [row["key"] for row in r.json()["rows"]] == [k for k, _ in top(published, 10)]
    r = both(servers, "GET", f"/stores/{STORE}/top", params={"n": 20, "consistency": "committed"})
    assert [(row["key"], values(row)) for row in r.json()["rows"]] == top(committed, 20)
    answered = counted(servers)[0] - before[0]
    assert answered == 10, answered  # every one of them through the fast path
    refused = [{"n": 0}, {"n": 10_001}, {"n": "ten"}, {"n": "5.5"}, {"n": -1}, {"by": "key"}, {"by": ""},
               {"consistency": "latest"}, {"max_staleness": "x"}]
    for params in refused:
        assert both(servers, "GET", f"/stores/{STORE}/top", params=params).status_code == 400, params
    assert both(servers, "GET", f"/stores/{STORE}/top", params={"n": "ten"}).json()["error"]["parameter"] == "n"
    # A form the fast path leaves to FastAPI, which reads it as 5.
    r = both(servers, "GET", f"/stores/{STORE}/top", params={"n": "05"})
    assert [row["key"] for row in r.json()["rows"]] == [k for k, _ in top(published, 5)]
    assert both(servers, "GET", "/stores/no_such_store/top").status_code == 404
    assert both(servers, "GET", "/stores/user_sessions/top").status_code == 400  # not a key-value store
    both(servers, "GET", f"/stores/{STORE}/top", params={"n": 10_000})
    both(servers, "GET", f"/stores/{STORE}/top", headers={})  # no token: 401 from either


def test_metrics_count_both_paths_alike(servers) -> None:
    def counters(name: str) -> dict[str, float]:
        text = servers[name].get("/metrics", headers=AUTH).text
        found = re.findall(r"^(deltastate_(?:requests|errors)_total\{.*\}) (\S+)$", text, flags=re.MULTILINE)
        return {series: float(value) for series, value in found if 'endpoint="/metrics"' not in series}

    fast, plain = counters("fast"), counters("plain")
    assert any("/stores/{store}/keys/{key}" in s for s in fast)
    assert fast == plain


def test_openapi_is_unchanged(servers) -> None:
    both(servers, "GET", "/openapi.json")


def test_fast_path_setting_from_the_environment() -> None:
    assert ServiceOptions.from_env({}).fast_path is True
    assert ServiceOptions.from_env({"DELTASTATE_FAST_PATH": "0"}).fast_path is False
    assert ServiceOptions.from_env(ServiceOptions(fast_path=False).to_env()).fast_path is False
    with pytest.raises(ConfigError, match="DELTASTATE_FAST_PATH"):
        ServiceOptions.from_env({"DELTASTATE_FAST_PATH": "yes"})
