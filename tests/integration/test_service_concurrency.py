"""16 reader threads hammer the REST service (real uvicorn, real HTTP) while a new snapshot file is
published every second: zero errors, and every answer is consistent with exactly one snapshot
version, namely the one it names; afterwards retention removes every file beyond the kept ones.

The snapshots are built from generated rows by the production publisher (candidate, read index,
rename, CURRENT swap, keep-K retention) rather than from changelogs by Spark, whose publish takes
several seconds on this 2-core machine; the Spark publish path and its pick-up by a running service
are covered by test_service_contract.py.

Each publish changes the store in a way only that version shows: the key `tick` has games = i for
the i-th publish and `mover-<i>` appears. So an answer that mixed two versions, or was served from
a different version than it says, cannot match. The default run lasts 20 s; the soak variant 60 s.
"""

from __future__ import annotations

import dataclasses
import random
import threading
import time
from datetime import datetime
from typing import Any

import httpx
import pytest
import uvicorn
from support.local_infra import free_port, make_home

from deltastate.config import Settings
from deltastate.service import create_app
from deltastate.snapshot.catalog import snapshot_files
from deltastate.snapshot.generated import GeneratedStore, publish_generated
from deltastate.stores import load_store

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
STORE = "player_stats"
READERS = 16
BASE_KEYS = 150


def publish(settings: Settings, state: dict[str, int]) -> int:
    """A snapshot of `state` (key -> games; the other values derive from games); returns its version."""
    import pyarrow as pa

    keys = sorted(state)
    games = [state[k] for k in keys]
    stamp = [datetime(2026, 1, 1)] * len(keys)
    rows = pa.table({"key": keys, "games": games, "total_score": [10 * g for g in games], "best_score": games,
                     "last_played": games, "source_partition": pa.array([0] * len(keys), pa.int32()),
                     "source_offset": list(range(len(keys))), "batch_id": [0] * len(keys),
                     "event_time": stamp, "write_time": stamp})

    def fill(con) -> None:
        con.register("_rows", rows)
        con.execute(f"INSERT INTO {STORE} SELECT * FROM _rows")

    return publish_generated(settings, [GeneratedStore(load_store(settings, STORE), fill)]).version


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


def run_race(settings: Settings, seconds: float) -> None:
    state = {f"base-{i:04d}": 1 + i % 97 for i in range(BASE_KEYS)} | {"tick": 0}
    views = {publish(settings, state): expected_view(state)}
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
            state["tick"] = tick
            state[f"mover-{tick:04d}"] = 500 + tick
            state.pop(f"mover-{tick - 1:04d}", None)
            views[publish(settings, state)] = expected_view(state)
            time.sleep(max(0.0, 1.0 - (time.monotonic() - began)))  # at most one publish a second
    finally:
        stop.set()
        for t in readers:
            t.join(60)
        server.should_exit = True
        thread.join(60)
    assert not errors, f"{len(errors)} errors, first: {errors[:3]}"
    seen = {v for _, v, _ in answers}
    print(f"\n{len(answers)} answers in {seconds:.0f}s from {len(seen)} snapshot versions; "
          f"{len(views)} published ({(len(views) - 1) / seconds:.2f}/s)")
    # A publish a second is the aim; on a loaded 2-core machine fewer happen. Either way readers
    # must have crossed several swaps for the check below to mean anything.
    assert len(views) >= 3 and len(seen) >= 3, (len(views), sorted(seen))
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
            assert body["value"]["games"] == state[body["key"]]  # base keys never change
    # Readers are gone: the next publish's retention removes every file beyond the kept versions.
    publish(settings, state)
    assert len(snapshot_files(settings)) == settings.snapshot_keep


@pytest.fixture()
def race_settings(session_settings: Settings, tmp_path) -> Settings:
    home = make_home(tmp_path / "race")
    return dataclasses.replace(session_settings, home=home, storage_root=str(home / "data"), snapshot_keep=2)


def test_readers_during_publishes(race_settings: Settings) -> None:
    run_race(race_settings, seconds=20)


@pytest.mark.soak
def test_readers_during_publishes_soak(race_settings: Settings) -> None:
    run_race(race_settings, seconds=60)
