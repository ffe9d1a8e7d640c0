"""Reads at `consistency=latest` through the real broker, Spark, Delta, DuckDB and the REST app:
the committed answer plus the records the stream has not committed yet, compared with the
independent reference over exactly the records each answer says it includes.

- a committed backlog and an uncommitted one: latest equals the reference over everything
  produced, committed equals it over the committed records, and once the stream commits the rest
  the two agree;
- a continuous run under load: every latest answer, checked after the stream has committed
  everything, equals the reference over the prefix of its partition the answer names (nothing read
  is ever ahead of what the stream commits);
- refusals: latest on a leaderboard read, latest together with fresh=true.
"""

from __future__ import annotations

import dataclasses
import json
import random
import shutil
import threading
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from fastapi.testclient import TestClient
from support.reference import VALUE_FIELDS, Record, expected
from support.store_checks import STORE, generated, new_topic, produce

from deltastate.cli.main import cli
from deltastate.engine import run_store
from deltastate.ingest.partitioner import partition_for
from deltastate.service import create_app
from deltastate.snapshot import publish_snapshot
from deltastate.stores import load_store

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]
REPO_SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


@pytest.fixture
def on_topic(make_settings, tmp_path, topic):
    """Settings whose player_stats reads the test's topic (the service's tail follows the
    definition's topic)."""
    schemas = tmp_path / "schemas"
    shutil.copytree(REPO_SCHEMAS, schemas)
    path = schemas / "stores" / f"{STORE}.yaml"
    raw = yaml.safe_load(path.read_text())
    raw["source"]["topic"] = topic
    path.write_text(yaml.safe_dump(raw))
    return dataclasses.replace(make_settings(), schemas_dir=schemas)


def values(row: dict) -> dict:
    return {f: row[f] for f in VALUE_FIELDS}


def read_all(client: TestClient, keys: list[str], consistency: str) -> dict[str, dict]:
    out = {}
    for key in keys:
        r = client.get(f"/stores/{STORE}/keys/{key}", params={"consistency": consistency})
        assert r.status_code in (200, 404), r.text
        if r.status_code == 200:
            out[key] = values(r.json()["value"])
    return out


def test_latest_folds_the_uncommitted_records_and_agrees_with_committed_once_they_commit(
        broker, spark, on_topic, topic):
    settings = on_topic
    ref = new_topic(settings, broker, topic)
    bad = [(b"player-000001", b"{not json"), (b"player-000002", b'{"player_id": "player-000002"}')]
    produce(settings, topic, generated(400, 30, seed=41, tombstones=0.05) + bad, ref)
    run_store(settings, STORE, once=True, topic=topic)
    publish_snapshot(spark, settings, [load_store(settings, STORE)])
    committed_records = list(ref.records)
    produce(settings, topic, generated(300, 40, seed=42, tombstones=0.08) + bad, ref)
    keys = sorted({r.key.decode() for r in ref.records if r.key} | {"player-nobody"})

    want_all, want_committed = expected(ref.records), expected(committed_records)
    assert want_all.state != want_committed.state
    with TestClient(create_app(settings)) as client:
        deadline = time.monotonic() + 30
        while (latest := read_all(client, keys, "latest")) != want_all.state and time.monotonic() < deadline:
            time.sleep(0.2)  # the service's tail starts on the first latest read
        assert latest == want_all.state
        assert read_all(client, keys, "committed") == want_committed.state
        meta = client.get(f"/stores/{STORE}/keys/{keys[0]}", params={"consistency": "latest"}).json()["meta"]
        assert meta["consistency"] == "latest" and meta["latest"]
        batch = client.post(f"/stores/{STORE}/keys:batchGet", params={"consistency": "latest"},
                            json={"keys": keys}).json()
        assert {r["key"]: values(r) for r in batch["rows"]} == want_all.state
        assert set(batch["missing"]) == set(keys) - set(want_all.state)
        # The CLI reads through the same path, the topic read up to its end once.
        changed = next(k for k in sorted(want_all.state) if want_all.state[k] != want_committed.state.get(k))
        for consistency, want in (("latest", want_all), ("committed", want_committed)):
            out = CliRunner().invoke(cli, ["get", STORE, changed, "--consistency", consistency, "--json"], obj=settings)
            assert out.exit_code == 0, out.output
            assert values(json.loads(out.output.splitlines()[0])) == want.state[changed]

        run_store(settings, STORE, once=True, topic=topic)
        assert read_all(client, keys, "committed") == want_all.state == read_all(client, keys, "latest")

        for path, params in [(f"/stores/{STORE}/top", {"consistency": "latest"}),
                             (f"/stores/{STORE}/keys/{keys[0]}", {"consistency": "latest", "fresh": "true"}),
                             (f"/stores/{STORE}/keys/{keys[0]}", {"consistency": "snapshot", "fresh": "true"})]:
            r = client.get(path, params=params)
            assert r.status_code == 400 and r.json()["error"]["type"] == "bad_parameter", (path, params, r.text)


def prefix_state(records: list[Record], key: str, partition: int, upto: int) -> dict | None:
    """The reference value of `key` over its partition's records at offsets <= upto."""
    mine = [r for r in records if r.partition == partition and r.offset <= upto]
    return expected(mine).state.get(key)


def test_latest_answers_under_a_continuous_run_are_never_ahead_of_the_stream(broker, spark, on_topic, topic):
    settings = on_topic
    ref = new_topic(settings, broker, topic)
    produce(settings, topic, generated(200, 50, seed=51), ref)
    run_store(settings, STORE, once=True, topic=topic)
    publish_snapshot(spark, settings, [load_store(settings, STORE)])
    stop = threading.Event()
    runner = threading.Thread(target=run_store, args=(settings, STORE), daemon=True,
                              kwargs={"once": False, "trigger": "500 milliseconds", "topic": topic, "stop_event": stop})
    runner.start()
    answers = []  # (key, partition, applied up to, value or None)
    rng = random.Random(5)
    try:
        with TestClient(create_app(settings)) as client:
            for chunk in range(12):
                produce(settings, topic, generated(150, 50, seed=60 + chunk, tombstones=0.05), ref)
                for _ in range(15):
                    key = f"player-{rng.randrange(50):06d}"
                    r = client.get(f"/stores/{STORE}/keys/{key}", params={"consistency": "latest"})
                    assert r.status_code in (200, 404), r.text
                    p = partition_for(key, 4)
                    meta = r.json()["meta"] if r.status_code == 200 else None
                    applied = None if meta is None else meta["latest"][str(p)]["latest_offset_applied"]
                    answers.append((key, p, applied, values(r.json()["value"]) if meta else None))
                time.sleep(0.3)
    finally:
        stop.set()
        runner.join(120)
    run_store(settings, STORE, once=True, topic=topic)  # everything produced is committed now
    found = [a for a in answers if a[3] is not None]
    assert len(found) > 100
    for key, p, applied, value in found:
        assert value == prefix_state(ref.records, key, p, applied), (key, p, applied)
    with TestClient(create_app(settings)) as client:
        keys = sorted({r.key.decode() for r in ref.records})
        assert read_all(client, keys, "committed") == expected(ref.records).state == read_all(client, keys, "latest")
