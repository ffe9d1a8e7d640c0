"""16 reader threads hammer the REST service (real uvicorn, real HTTP) while snapshots are published
one after another (real Spark appends to the Delta changelog, real publish_snapshot): zero errors,
and every answer is consistent with exactly one snapshot version, namely the one it names.

Each publish changes the store in a way only that version shows: the key `tick` has games = i for
the i-th publish and `mover-<i>` appears. So an answer that mixed two versions, or was served from
a different version than it says, cannot match. The default run lasts 20 s; the soak variant 60 s.
"""

from __future__ import annotations

import dataclasses
import random
import threading
import time
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
import uvicorn
from local_infra import free_port, make_home

from deltastate.changelog.layout import CHANGELOG, changelog_columns, ddl, segment_of
from deltastate.config import Settings
from deltastate.service import create_app
from deltastate.snapshot import publish_snapshot
from deltastate.snapshot.catalog import snapshot_files
from deltastate.stores import load_store

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
STORE = "player_stats"
READERS = 16
BASE_KEYS = 150


def change(key: str, batch: int, games: int, op: str = "put") -> dict[str, Any]:
    put = op == "put"
    return {"key": key, "op": op, "games": games if put else None, "total_score": 10 * games if put else None,
            "best_score": games if put else None, "last_played": games if put else None, "value_version": 1,
            "source_partition": 0, "source_offset": batch, "epoch": 0, "batch_id": batch, "query_id": "race",
            "segment": segment_of(0, batch), "event_time": datetime(2026, 1, 1, tzinfo=UTC),
            "write_time": datetime.now(UTC)}


class Changelog:
    """Appends micro-batches to the store's Delta changelog and keeps the resulting state in Python."""

    def __init__(self, spark, settings: Settings) -> None:
        store = load_store(settings, STORE)
        self.spark, self.path = spark, settings.table_path(STORE, CHANGELOG)
        self.schema, self.columns = ddl(changelog_columns(store)), [n for n, _ in changelog_columns(store)]
        self.state: dict[str, int] = {}  # key -> games
        self.batch = 0

    def append(self, rows: list[dict[str, Any]]) -> None:
        frame = self.spark.createDataFrame([tuple(r[c] for c in self.columns) for r in rows], self.schema)
        frame.write.format("delta").mode("append").partitionBy("segment").save(self.path)
        for r in rows:
            if r["op"] == "put":
                self.state[r["key"]] = r["games"]
            else:
                self.state.pop(r["key"], None)
        self.batch += 1


def expected_view(state: dict[str, int]) -> dict[str, Any]:
    ordered = sorted(state)
    top = sorted(state, key=lambda k: (-10 * state[k], k))[:5]
    return {"tick": state.get("tick"), "all": [(k, state[k]) for k in ordered], "top": [(k, state[k]) for k in top],
            "count": len(state)}


def start_server(settings: Settings) -> tuple[uvicorn.Server, threading.Thread, str]:
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning",
                                           access_log=False))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.05)
    return server, thread, f"http://127.0.0.1:{port}"


def reader(base: str, seed: int, stop: threading.Event, answers: list, errors: list) -> None:
    rng = random.Random(seed)
    with httpx.Client(base_url=base, timeout=30) as http:
        while not stop.is_set():
            kind = rng.choice(["tick", "all", "top", "sql", "key"])
            try:
                if kind == "tick":
                    r = http.get(f"/stores/{STORE}/keys/tick")
                elif kind == "all":
                    r = http.get(f"/stores/{STORE}/all", params={"limit": 10_000})
                elif kind == "top":
                    r = http.get(f"/stores/{STORE}/top", params={"n": 5})
                elif kind == "sql":
                    r = http.post("/sql", json={"query": f"SELECT count(*) AS n FROM {STORE}"})
                else:
                    r = http.get(f"/stores/{STORE}/keys/base-{rng.randrange(BASE_KEYS):04d}")
                if r.status_code != 200:
                    errors.append((kind, r.status_code, r.text[:300]))
                    continue
                body = r.json()
                if int(r.headers["X-Deltastate-Snapshot-Version"]) != body["meta"]["snapshot_version"]:
                    errors.append((kind, "header and body disagree", r.headers, body["meta"]))
                answers.append((kind, body["meta"]["snapshot_version"], body))
            except Exception as exc:  # noqa: BLE001 - every failure is a finding
                errors.append((kind, repr(exc)))


def run_race(spark, settings: Settings, seconds: float) -> None:
    log = Changelog(spark, settings)
    log.append([change(f"base-{i:04d}", 0, 1 + i % 97) for i in range(BASE_KEYS)] + [change("tick", 0, 0)])
    views = {publish_snapshot(spark, settings).version: expected_view(log.state)}
    server, thread, base = start_server(settings)
    stop, answers, errors = threading.Event(), [], []
    readers = [threading.Thread(target=reader, args=(base, i, stop, answers, errors)) for i in range(READERS)]
    for t in readers:
        t.start()
    started, tick = time.monotonic(), 0
    try:
        while time.monotonic() - started < seconds:
            began = time.monotonic()
            tick += 1
            rows = [change("tick", log.batch, tick), change(f"mover-{tick:04d}", log.batch, 500 + tick)]
            if tick > 1:
                rows.append(change(f"mover-{tick - 1:04d}", log.batch, 0, op="delete"))
            log.append(rows)
            views[publish_snapshot(spark, settings).version] = expected_view(log.state)
            time.sleep(max(0.0, 1.0 - (time.monotonic() - began)))  # at most one publish a second
    finally:
        stop.set()
        for t in readers:
            t.join(60)
        server.should_exit = True
        thread.join(60)
    assert not errors, f"{len(errors)} errors, first: {errors[:3]}"
    seen = {v for _, v, _ in answers}
    print(f"\n{len(answers)} answers in {seconds:.0f}s from {len(seen)} snapshot versions; {len(views)} published")
    assert len(views) >= 3 and len(seen) >= 2, (len(views), seen)
    for kind, version, body in answers:
        want = views[version]
        if kind == "tick":
            assert body["value"]["games"] == want["tick"], (version, body)
        elif kind == "all":
            assert [(r["key"], r["games"]) for r in body["rows"]] == want["all"], version
        elif kind == "top":
            assert [(r["key"], r["games"]) for r in body["rows"]] == want["top"], version
        elif kind == "sql":
            assert body["rows"] == [{"n": want["count"]}], version
        else:
            assert body["value"]["games"] == log.state[body["key"]]  # base keys never change
    # Readers are gone: the next publish's retention removes every file beyond the kept versions.
    publish_snapshot(spark, settings)
    assert len(snapshot_files(settings)) == settings.snapshot_keep


@pytest.fixture()
def race_settings(session_settings: Settings, tmp_path) -> Settings:
    home = make_home(tmp_path / "race")
    return dataclasses.replace(session_settings, home=home, storage_root=str(home / "data"), snapshot_keep=2)


def test_readers_during_publishes(spark, race_settings: Settings) -> None:
    run_race(spark, race_settings, seconds=20)


@pytest.mark.soak
def test_readers_during_publishes_soak(spark, race_settings: Settings) -> None:
    run_race(spark, race_settings, seconds=60)
