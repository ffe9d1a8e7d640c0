"""A key-value store without changelog (`changelog: {enabled: false}`, Kafka Streams'
withLoggingDisabled) through the real broker, Spark, Delta and DuckDB: no changelog records, a
snapshot read from the Spark state store that equals the independent reference (published in this
process and by `deltastate snapshot publish` in a new one, whose Spark session never ran a query),
fresh reads refused by name, `inspect` saying what is lost, and a restore that replays the topic."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient
from pyspark.sql import functions as F
from support.reference import VALUE_FIELDS, expected
from support.store_checks import generated, new_topic, produce

from deltastate.bench.soak import child_env
from deltastate.engine import run_store
from deltastate.maintenance.inspect import inspect_store
from deltastate.maintenance.restore import restore_store
from deltastate.query import Queries
from deltastate.service import create_app
from deltastate.snapshot import publish_snapshot
from deltastate.stores import load_store

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]
REPO_SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
STORE = "players_unlogged"
DELTASTATE = str(Path(sys.executable).parent / "deltastate")


@pytest.fixture
def unlogged_settings(make_settings, tmp_path):
    schemas = tmp_path / "schemas"
    shutil.copytree(REPO_SCHEMAS, schemas)
    raw = yaml.safe_load((REPO_SCHEMAS / "stores" / "player_stats.yaml").read_text())
    raw.update(name=STORE, changelog={"enabled": False})
    raw.pop("migrations")  # a store without changelog cannot be migrated
    (schemas / "stores" / f"{STORE}.yaml").write_text(yaml.safe_dump(raw))
    return dataclasses.replace(make_settings(), schemas_dir=schemas)


def published(spark, settings) -> dict[str, dict[str, int]]:
    info = publish_snapshot(spark, settings, [load_store(settings, STORE)])
    with Queries(settings) as queries:
        rows = queries.all(STORE).rows
    assert info.store(STORE).changelog_version is None and info.store(STORE).row_count == len(rows)
    return {r["key"]: {f: r[f] for f in VALUE_FIELDS} for r in rows}


def published_by_a_new_process(settings) -> dict[str, dict[str, int]]:
    """`deltastate snapshot publish` as a user runs it: the state store is read by a fresh Spark
    session, with no trace on either stream."""
    proc = subprocess.run([DELTASTATE, "snapshot", "publish", "--json"], env=child_env(settings),
                          capture_output=True, text=True, timeout=600)
    for stream in (proc.stdout, proc.stderr):
        assert "Traceback" not in stream and "at org.apache" not in stream, stream[-3000:]
    assert proc.returncode == 0, proc.stderr[-3000:]
    [entry] = [s for s in json.loads(proc.stdout)["stores"] if s["store"] == STORE]
    with Queries(settings) as queries:
        rows = queries.all(STORE).rows
    assert entry["row_count"] == len(rows)
    return {r["key"]: {f: r[f] for f in VALUE_FIELDS} for r in rows}


def intake_totals(spark, settings) -> tuple[int, int, int]:
    intake = spark.read.format("delta").load(settings.table_path(STORE, "intake"))
    row = intake.agg(*[F.coalesce(F.sum(c), F.lit(0)).alias(c) for c in ("records_in", "applied", "dead_lettered")]).first()
    return int(row["records_in"]), int(row["applied"]), int(row["dead_lettered"])


def test_store_without_changelog_serves_its_state_store_and_restores_by_replay(broker, spark, unlogged_settings,
                                                                                topic):
    settings = unlogged_settings
    ref = new_topic(settings, broker, topic)
    bad = [(b"player-000001", b"{not json")]
    for seed in (31, 32):
        produce(settings, topic, generated(300, 40, seed=seed, tombstones=0.05) + bad, ref)
        run_store(settings, STORE, once=True, topic=topic)
    want = expected(ref.records, settings.max_value_bytes)
    assert spark.read.format("delta").load(settings.table_path(STORE, "changelog")).count() == 0
    assert published(spark, settings) == want.state
    assert published_by_a_new_process(settings) == want.state
    assert intake_totals(spark, settings) == (want.records_in, want.applied, want.dead_lettered)

    key = next(iter(want.state))
    with TestClient(create_app(settings)) as client:
        got = client.get(f"/stores/{STORE}/keys/{key}").json()["value"]
        assert {f: got[f] for f in VALUE_FIELDS} == want.state[key]
        refused = client.get(f"/stores/{STORE}/keys/{key}", params={"fresh": "true"})
    assert refused.status_code == 400 and "keeps no changelog" in refused.json()["error"]["message"], refused.text
    report = inspect_store(spark, settings, STORE, topic_ends={p: 0 for p in range(4)}).to_dict()
    assert report["changelog"]["enabled"] is False and "replays the source topic" in report["changelog"]["note"]
    assert report["restore"]["mode"] == "replay"

    # A lost checkpoint: restore replays the topic; the audit and dead letters start over with it.
    shutil.rmtree(settings.checkpoint_path(STORE))
    assert restore_store(settings, STORE, spark=spark).mode == "replay"
    produce(settings, topic, generated(200, 40, seed=33, tombstones=0.05), ref)
    run_store(settings, STORE, once=True, topic=topic)
    want = expected(ref.records, settings.max_value_bytes)
    assert published(spark, settings) == want.state
    assert intake_totals(spark, settings) == (want.records_in, want.applied, want.dead_lettered)
    dead = spark.read.format("delta").load(settings.table_path(STORE, "deadletter")).count()
    assert dead == want.dead_lettered == 2
