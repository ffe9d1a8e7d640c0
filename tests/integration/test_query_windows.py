"""Window and session reads (WindowStore.fetch / fetchAll, SessionStore.findSessions) through
Queries, the CLI and the REST service, on a snapshot file built directly in DuckDB (the engine's
window stores are not what is under test here). Expected answers are computed in plain Python from
the same generated rows."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime
from typing import Any

import click
import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from deltastate.cli.query_cmd import register
from deltastate.config import Settings
from deltastate.query import Queries
from deltastate.query.errors import ParameterError, StoreTypeError
from deltastate.service import create_app
from deltastate.snapshot.generated import GeneratedStore, publish_generated
from deltastate.snapshot.publish import quote, table_columns
from deltastate.stores import load_store

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
SYMBOLS = [f"SYM{i}" for i in range(6)]
USERS = [f"user-{i}" for i in range(5)]


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def trade_rows(rng: random.Random) -> list[dict[str, Any]]:
    rows = []
    for sym in SYMBOLS:
        for start in sorted(rng.sample(range(0, 120), 25)):  # hopping 5 s windows, advance 1 s
            s = T0 + start * 1000
            count = rng.randint(1, 9)
            prices = [round(rng.uniform(1, 100), 2) for _ in range(count)]
            rows.append({"key": sym, "window_start": s, "window_end": s + 5000, "count": count,
                         "sum_price": sum(prices), "min_price": min(prices), "max_price": max(prices),
                         "avg_price": sum(prices) / count, "volume": rng.randint(1, 1000)})
    return rows


def session_rows(rng: random.Random) -> list[dict[str, Any]]:
    rows, gap = [], 30 * 60_000
    for user in USERS:
        t = T0 + rng.randint(0, 3_600_000)
        for _ in range(rng.randint(1, 5)):
            start = t
            end = start + rng.randint(0, 2 * gap)
            rows.append({"key": user, "window_start": start, "window_end": end, "session_start": start,
                         "session_end": end, "event_count": rng.randint(1, 40), "last_page": f"/p/{rng.randint(1, 9)}"})
            t = end + gap + rng.randint(1, 3_600_000)  # sessions of one user never overlap
    return rows


def filler(store: str, rows: list[dict[str, Any]], columns: list[str]):
    def fill(con) -> None:
        book = {"source_partition": 0, "source_offset": 0, "batch_id": 0,
                "event_time": datetime(2026, 1, 1), "write_time": datetime(2026, 1, 1)}
        values = [[{**book, **r}.get(c) for c in columns] for r in rows]
        marks = ", ".join("?" for _ in columns)
        con.executemany(f"INSERT INTO {quote(store)} VALUES ({marks})", values)
    return fill


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, session_settings: Settings):
    import dataclasses

    home = tmp_path_factory.mktemp("windows-home")
    settings = dataclasses.replace(session_settings, home=home, storage_root=str(home / "data"))
    rng = random.Random(7)
    data = {"trade_stats": trade_rows(rng), "user_sessions": session_rows(rng),
            "player_stats": [{"key": "p1", "games": 1, "total_score": 5, "best_score": 5, "last_played": 1}]}
    stores = []
    for name, rows in data.items():
        definition = load_store(settings, name)
        columns = [c for c, _ in table_columns(definition)]
        stores.append(GeneratedStore(definition, filler(name, rows, columns)))
    publish_generated(settings, stores)
    return settings, data


def fetch(rows, key, lo, hi):
    hits = [r for r in rows if (key is None or r["key"] == key) and (lo is None or r["window_start"] >= lo)
            and (hi is None or r["window_start"] <= hi)]
    return sorted(hits, key=lambda r: (r["window_start"], r["key"]))


def find_sessions(rows, key, earliest_end, latest_start):
    hits = [r for r in rows if r["key"] == key and (earliest_end is None or r["window_end"] >= earliest_end)
            and (latest_start is None or r["window_start"] <= latest_start)]
    return sorted(hits, key=lambda r: r["window_start"])


def strip(rows, fields=("key", "window_start", "window_end", "count", "volume", "event_count", "last_page")):
    return [{f: r[f] for f in fields if f in r} for r in rows]


def test_window_fetch_and_fetch_all(world) -> None:
    settings, data = world
    rows = data["trade_stats"]
    rng = random.Random(3)
    with Queries(settings) as q:
        for _ in range(30):
            lo = T0 + rng.randint(-5, 125) * 1000
            hi = lo + rng.randint(0, 60) * 1000
            key = rng.choice(SYMBOLS)
            want = fetch(rows, key, lo, hi)
            got = q.windows("trade_stats", key, lo, hi).rows
            assert strip(got) == strip(want)
            assert strip(q.windows("trade_stats", key, iso(lo), iso(hi)).rows) == strip(want)  # ISO bounds
            assert strip(q.windows("trade_stats", None, lo, hi).rows) == strip(fetch(rows, None, lo, hi))
        assert strip(q.windows("trade_stats", "SYM1").rows) == strip(fetch(rows, "SYM1", None, None))
        assert q.windows("trade_stats", "no-such-symbol", T0, T0 + 10**6).rows == []
        everything = q.windows("trade_stats", None, None, None, limit=7).rows
        assert strip(everything) == strip(fetch(rows, None, None, None)[:7])


def test_find_sessions(world) -> None:
    settings, data = world
    rows = data["user_sessions"]
    rng = random.Random(4)
    with Queries(settings) as q:
        for _ in range(40):
            user = rng.choice(USERS)
            a = T0 + rng.randint(-3_600_000, 6 * 3_600_000)
            b = a + rng.randint(0, 5 * 3_600_000)
            assert strip(q.sessions("user_sessions", user, a, b).rows) == strip(find_sessions(rows, user, a, b))
            assert strip(q.sessions("user_sessions", user, iso(a), None).rows) == \
                strip(find_sessions(rows, user, a, None))
        all_of = find_sessions(rows, USERS[0], None, None)
        assert len(all_of) >= 1 and strip(q.sessions("user_sessions", USERS[0]).rows) == strip(all_of)


def test_type_mismatches_are_refused(world) -> None:
    settings, _ = world
    with Queries(settings) as q:
        for call in (lambda: q.windows("player_stats", "p1"), lambda: q.sessions("trade_stats", "SYM1"),
                     lambda: q.top("trade_stats", by="count"), lambda: q.rank("user_sessions", "user-1", by="event_count"),
                     lambda: q.get("trade_stats", "SYM1"), lambda: q.windows("user_sessions", "user-1")):
            with pytest.raises(StoreTypeError, match=r"^store '\w+' is a \w+ store: "):
                call()
        with pytest.raises(ParameterError, match="^parameter 'to': "):
            q.windows("trade_stats", "SYM1", 0, "not a time")
        with pytest.raises(ParameterError, match="^parameter 'earliest_end': "):
            q.sessions("user_sessions", "user-1", "2026-99-01")


def test_range_and_all_page_by_store_key(world) -> None:
    settings, data = world
    want = sorted((r["key"], r["window_start"], r["window_end"]) for r in data["trade_stats"])
    with Queries(settings) as q:
        got, after = [], None
        while True:
            page = q.all("trade_stats", limit=17, after=after).rows
            got += [(r["key"], r["window_start"], r["window_end"]) for r in page]
            if len(page) < 17:
                break
            after = got[-1]
        assert got == want
        ranged = q.range("trade_stats", "SYM2", "SYM3").rows
        assert [(r["key"], r["window_start"], r["window_end"]) for r in ranged] == \
            [w for w in want if "SYM2" <= w[0] <= "SYM3"]


def test_cli_windows_and_sessions(world) -> None:
    settings, data = world
    group = click.Group("main")
    register(group)
    runner = CliRunner()
    lo, hi = T0 + 10_000, T0 + 70_000
    out = runner.invoke(group, ["windows", "trade_stats", "SYM0", "--from", iso(lo), "--to", str(hi), "--json"],
                        obj=settings)
    assert out.exit_code == 0, out.output + out.stderr
    assert strip([json.loads(x) for x in out.output.splitlines()]) == strip(fetch(data["trade_stats"], "SYM0", lo, hi))
    out = runner.invoke(group, ["windows", "trade_stats", "--from", str(lo), "--to", str(hi)], obj=settings)
    n = len(fetch(data["trade_stats"], None, lo, hi))
    assert out.exit_code == 0 and out.output.splitlines()[0].split()[:3] == ["key", "window_start", "window_end"]
    assert f"({n} rows, snapshot " in out.output
    user = USERS[1]
    out = runner.invoke(group, ["sessions", "user_sessions", user, "--earliest-end", str(T0), "--json"], obj=settings)
    assert out.exit_code == 0, out.output + out.stderr
    assert strip([json.loads(x) for x in out.output.splitlines()]) == strip(find_sessions(data["user_sessions"], user, T0, None))
    out = runner.invoke(group, ["sessions", "trade_stats", "SYM0"], obj=settings)
    assert out.exit_code == 2 and "is a window store" in out.stderr
    out = runner.invoke(group, ["windows", "trade_stats", "--from", "soon"], obj=settings)
    assert out.exit_code == 2 and "parameter 'from'" in out.stderr


def test_rest_window_and_session_endpoints(world) -> None:
    settings, data = world
    lo, hi = T0 + 3_000, T0 + 40_000
    with TestClient(create_app(settings)) as client:
        r = client.get("/stores/trade_stats/keys/SYM4/windows", params={"from": iso(lo), "to": hi})
        assert r.status_code == 200, r.text
        assert strip(r.json()["rows"]) == strip(fetch(data["trade_stats"], "SYM4", lo, hi))
        assert r.headers["X-Deltastate-Snapshot-Version"] == str(r.json()["meta"]["snapshot_version"])
        r = client.get("/stores/trade_stats/windows", params={"from": lo, "to": hi, "limit": 5})
        assert strip(r.json()["rows"]) == strip(fetch(data["trade_stats"], None, lo, hi)[:5]) and r.json()["truncated"]
        user = USERS[2]
        r = client.get(f"/stores/user_sessions/keys/{user}/sessions", params={"earliest_end": T0, "latest_start": hi * 10})
        assert strip(r.json()["rows"]) == strip(find_sessions(data["user_sessions"], user, T0, hi * 10))
        # Paging a window store by cursor yields every (key, start, end) once, in order.
        seen, cursor = [], None
        while True:
            params = {"limit": 40, **({"cursor": cursor} if cursor else {})}
            body = client.get("/stores/trade_stats/all", params=params).json()
            seen += [(x["key"], x["window_start"]) for x in body["rows"]]
            cursor = body["next_cursor"]
            if cursor is None:
                break
        assert seen == sorted((x["key"], x["window_start"]) for x in data["trade_stats"])
        r = client.get("/stores/player_stats/keys/p1/windows")
        assert r.status_code == 400 and r.json()["error"]["type"] == "wrong_store_type"
        r = client.get("/stores/trade_stats/keys/SYM1/windows", params={"from": "later"})
        assert r.status_code == 400 and r.json()["error"]["parameter"] == "from"
        r = client.get("/stores/trade_stats/top")
        assert r.status_code == 400 and "is a window store" in r.json()["error"]["message"]
