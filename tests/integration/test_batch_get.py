"""POST /stores/{store}/keys:batchGet on a published snapshot, and `deltastate serve --workers 2`
answering through the real server: rows in the order asked (duplicates answered twice), missing keys
named, limits refused with a 400 naming the limit; values equal to DuckDB's over the same file."""

from __future__ import annotations

import dataclasses
import os
import random
import signal
import subprocess
import sys

import duckdb
import httpx
import pytest
from fastapi.testclient import TestClient
from support.local_infra import free_port, make_home

from deltastate.bench.http_load import wait_healthy
from deltastate.service import create_app
from deltastate.service.answers import jsonable
from deltastate.service.routes import BATCH_GET_MAX
from deltastate.snapshot.generated import GeneratedStore, player_stats_sql, publish_generated
from deltastate.stores import load_store

pytestmark = pytest.mark.integration
STORE = "player_stats"
KEYS = 5_000


@pytest.fixture(scope="module")
def published(session_settings, tmp_path_factory):
    home = make_home(tmp_path_factory.mktemp("batch-get"))
    settings = dataclasses.replace(session_settings, home=home, storage_root=str(home / "data"))
    store = load_store(settings, STORE)
    info = publish_generated(settings, [GeneratedStore(store, lambda con: con.execute(
        f"INSERT INTO {STORE} {player_stats_sql(KEYS, seed=8)}"))])
    con = duckdb.connect(str(info.path), read_only=True)
    try:
        cur = con.execute(f"SELECT * FROM {STORE}")
        names = [d[0] for d in cur.description]
        rows = {r[0]: dict(zip(names, r, strict=True)) for r in cur.fetchall()}
    finally:
        con.close()
    return settings, rows


def test_batch_get_answers_in_order_and_names_the_missing(published):
    settings, rows = published
    rng = random.Random(4)
    present = rng.sample(sorted(rows), 400)
    asked = present[:200] + ["nobody", present[0]] + present[200:] + ["nobody-2", "nobody"]
    with TestClient(create_app(settings)) as client:
        answer = client.post(f"/stores/{STORE}/keys:batchGet", json={"keys": asked})
        assert answer.status_code == 200, answer.text
        body = answer.json()
    assert [r["key"] for r in body["rows"]] == [k for k in asked if k in rows]
    assert body["rows"] == [jsonable(rows[k]) for k in asked if k in rows]
    assert body["missing"] == ["nobody", "nobody-2"]
    assert body["meta"]["snapshot_version"] >= 1


@pytest.mark.parametrize(("keys", "fragment"), [
    ([f"k{i}" for i in range(BATCH_GET_MAX + 1)], f"at most {BATCH_GET_MAX}"),
    ([], "at least 1"),
])
def test_batch_get_limits_are_400s_naming_the_limit(published, keys, fragment):
    settings, _ = published
    with TestClient(create_app(settings)) as client:
        answer = client.post(f"/stores/{STORE}/keys:batchGet", json={"keys": keys})
    assert answer.status_code == 400, answer.text
    assert fragment in answer.json()["error"]["message"] and answer.json()["error"]["parameter"] == "keys"


def test_serve_with_two_workers_answers_from_the_snapshot(published):
    settings, rows = published
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "deltastate.cli.main", "serve", "--port", str(port),
                             "--workers", "2", "--log-level", "warning"],
                            env={**os.environ, **settings.to_env()}, start_new_session=True)
    try:
        wait_healthy(proc, f"http://127.0.0.1:{port}/health")
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            for key in random.Random(2).sample(sorted(rows), 50):
                answer = client.get(f"/stores/{STORE}/keys/{key}")
                assert answer.status_code == 200 and answer.json()["value"] == jsonable(rows[key])
            assert client.get(f"/stores/{STORE}/keys/nobody").status_code == 404
        workers = open(f"/proc/{proc.pid}/task/{proc.pid}/children").read().split()
        assert len(workers) >= 2  # uvicorn's supervisor and its worker processes
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
