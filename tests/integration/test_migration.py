"""Store migrations through the real broker, Spark, Delta, DuckDB and the REST app: player_stats v1 ->
v2 (a rename, a widened type, a derived field and a new aggregation), built beside the live version
while it keeps running, cut over, rolled back, cut over again and retired, every state compared with
the independent references in tests/support/reference.py computed from the same records; a cutover
whose checks fail and a migration the definition cannot express are refused with the reason and
change nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from fastapi.testclient import TestClient
from pyspark.sql import functions as F
from support.migration import STORE, approx_v2, migration_settings, snapshot_rows
from support.reference import V2_FIELDS, VALUE_FIELDS, expected, expected_v2
from support.store_checks import generated, new_topic, produce

from deltastate.cli.main import cli
from deltastate.engine import run_store
from deltastate.migration import steps
from deltastate.migration.plan import MigrationError
from deltastate.service import create_app
from deltastate.snapshot import publish_snapshot
from deltastate.stores import load_store
from deltastate.stores.current import control_path, read_record
from deltastate.stores.fence import FencedVersionError

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]


@pytest.fixture
def mig_settings(make_settings, tmp_path, topic):
    return migration_settings(make_settings(), tmp_path / "schemas", topic)


def cli_out(settings, *args: str) -> str:
    result = CliRunner().invoke(cli, list(args), obj=settings)
    assert result.exit_code == 0, result.output
    return result.output


def cli_json(settings, *args: str) -> dict:
    return json.loads(cli_out(settings, *args, "--json"))


def v1_state(records, settings) -> dict[str, dict]:
    return expected(records, settings.max_value_bytes).state


def test_migrate_v1_to_v2_cutover_rollback_retire(broker, spark, mig_settings, topic):
    settings = mig_settings
    ref = new_topic(settings, broker, topic)
    produce(settings, topic, generated(400, 40, seed=31, tombstones=0.05), ref)
    run_store(settings, STORE, once=True)
    publish_snapshot(spark, settings, [load_store(settings, STORE)])

    plan = cli_json(settings, "migrate", "plan", STORE, "--to", "2")
    strategies = {f["field"]: f["strategy"] for f in plan["fields"]}
    assert strategies == {"games": "carry", "total_score": "carry", "top_score": "carry", "last_played": "carry",
                          "last_game_id": "replay", "avg_score": "derive"}
    assert plan["build"] == "replay" and plan["covered"]
    assert plan["live_rows"] == len(v1_state(ref.records, settings))

    steps.start(spark, settings, STORE, 2)
    assert read_record(settings, STORE).current == 1
    # The live version keeps running and serving while v2 is built.
    produce(settings, topic, generated(300, 40, seed=32, tombstones=0.05), ref)
    run_store(settings, STORE, once=True)
    publish_snapshot(spark, settings, [load_store(settings, STORE)])
    assert snapshot_rows(settings, VALUE_FIELDS) == v1_state(ref.records, settings)
    status = cli_json(settings, "migrate", "status", STORE)
    assert status["phase"] == "building"
    assert status["details"]["lag"] == sum(r["lag_behind_old"] for r in status["details"]["partitions"].values()) > 0

    # Records nobody has processed yet: the cutover's catch-up takes them.
    produce(settings, topic, generated(200, 40, seed=33, tombstones=0.05), ref)
    report = steps.cutover(spark, settings, STORE, wait_s=5)
    assert report.details["checks"]["success"] and report.details["checks"]["compared"] > 0
    assert read_record(settings, STORE).current == 2
    assert approx_v2(snapshot_rows(settings, V2_FIELDS)) == approx_v2(expected_v2(ref.records, settings.max_value_bytes))
    with pytest.raises(FencedVersionError, match="not current"):
        run_store(settings, STORE, once=True, version=1)

    # A client written for v1 still gets v1's shape, and every answer names the version it served.
    v1_want = v1_state(ref.records, settings)
    key = sorted(v1_want)[0]
    with TestClient(create_app(settings)) as client:
        old = client.get(f"/stores/{STORE}/keys/{key}", params={"schema_version": 1})
        new = client.get(f"/stores/{STORE}/keys/{key}")
        batch = client.post(f"/stores/{STORE}/keys:batchGet", params={"schema_version": 1},
                            json={"keys": sorted(v1_want)})
        refused = client.get(f"/stores/{STORE}/keys/{key}", params={"schema_version": 3})
    assert old.status_code == 200, old.text
    assert {f: old.json()["value"][f] for f in VALUE_FIELDS} == v1_want[key]
    assert "top_score" not in old.json()["value"] and "avg_score" not in old.json()["value"]
    assert isinstance(old.json()["value"]["total_score"], int)
    assert old.json()["meta"]["schema_version"] == 1 and new.json()["meta"]["schema_version"] == 2
    assert new.json()["value"]["top_score"] == v1_want[key]["best_score"]
    assert {r["key"]: {f: r[f] for f in VALUE_FIELDS} for r in batch.json()["rows"]} == v1_want
    assert refused.status_code == 400 and "schema_version" in refused.text
    [row] = [json.loads(line) for line in cli_out(settings, "get", STORE, key, "--schema-version", "1", "--json").splitlines()]
    assert {f: row[f] for f in VALUE_FIELDS} == v1_want[key] and "top_score" not in row

    # Rollback: v1 is current again and resumes from its own checkpoint.
    produce(settings, topic, generated(150, 40, seed=34, tombstones=0.05), ref)
    steps.rollback(spark, settings, STORE)
    assert read_record(settings, STORE).current == 1
    run_store(settings, STORE, once=True)
    publish_snapshot(spark, settings, [load_store(settings, STORE)])
    assert snapshot_rows(settings, VALUE_FIELDS) == v1_state(ref.records, settings)

    # Cut over again, then retire v1: its tables and checkpoint are gone, v2 keeps serving.
    steps.start(spark, settings, STORE, 2)
    steps.cutover(spark, settings, STORE, wait_s=5)
    with pytest.raises(MigrationError, match="kept for"):
        steps.retire(settings, STORE)  # the declared hold period (7 days) has not passed
    retired = steps.retire(settings, STORE, hold_s=0)
    assert retired.details["removed"] and not any(Path(p).exists() for p in retired.details["removed"])
    assert not Path(settings.table_path(STORE, "changelog")).exists()
    assert Path(settings.table_path(f"{STORE}.v2", "changelog")).exists()
    produce(settings, topic, generated(100, 40, seed=35, tombstones=0.05), ref)
    run_store(settings, STORE, once=True)
    publish_snapshot(spark, settings, [load_store(settings, STORE)])
    assert approx_v2(snapshot_rows(settings, V2_FIELDS)) == approx_v2(expected_v2(ref.records, settings.max_value_bytes))
    with pytest.raises(MigrationError, match="is not retired"):
        steps.rollback(spark, settings, STORE)



def test_a_cutover_whose_checks_fail_switches_nothing(broker, spark, mig_settings, topic):
    settings = mig_settings
    ref = new_topic(settings, broker, topic)
    produce(settings, topic, generated(200, 20, seed=51), ref)
    run_store(settings, STORE, once=True)
    steps.start(spark, settings, STORE, 2)
    # A wrong newer record for one key in v2 (outside the stream's lineage, so only the checks see it).
    path = settings.table_path(f"{STORE}.v2", "changelog")
    bad = (spark.read.format("delta").load(path).where(F.col("op") == "put").orderBy("key").limit(1)
           .withColumn("games", F.col("games") + 100).withColumn("epoch", F.lit(99))
           .withColumn("lineage_id", F.lit("deltastate-cleanup/tampered")))
    key = bad.first()["key"]
    bad.write.format("delta").mode("append").save(path)
    with pytest.raises(MigrationError, match="failed its cutover checks") as caught:
        steps.cutover(spark, settings, STORE, wait_s=5)
    assert "carried_equal: 1 keys fail" in str(caught.value) and key in str(caught.value)
    record = read_record(settings, STORE)
    assert record.current == 1 and record.migration.phase == "building"
    produce(settings, topic, generated(50, 20, seed=52), ref)
    run_store(settings, STORE, once=True)  # v1 runs on
    publish_snapshot(spark, settings, [load_store(settings, STORE)])
    assert snapshot_rows(settings, VALUE_FIELDS) == v1_state(ref.records, settings)



REFUSALS = [({"key_field": "game_id"}, "2", "a migration cannot change 'key_field'"),
            ({"type": "window"}, "2", "a migration cannot change 'type'"),
            ({"derive": {"avg_score": "total_score / matches"}}, "2", "derive.avg_score reads ['matches']"),
            ({}, "3", "no value schema version 3")]


def test_a_refused_migration_says_why_and_changes_nothing(broker, spark, mig_settings, topic):
    settings = mig_settings
    ref = new_topic(settings, broker, topic)
    produce(settings, topic, generated(150, 15, seed=61), ref)
    run_store(settings, STORE, once=True)
    definition = Path(settings.schemas_dir) / "stores" / f"{STORE}.yaml"
    declared = definition.read_text()
    record = read_record(settings, STORE)
    on_disk = control_path(settings, STORE)
    written = on_disk.read_bytes() if on_disk.exists() else None  # the file itself, keys unmodelled too
    for change, to, quoted in REFUSALS:
        raw = yaml.safe_load(declared)
        raw["migrations"][0].update(change)
        definition.write_text(yaml.safe_dump(raw))
        for step in ("plan", "start"):
            result = CliRunner().invoke(cli, ["migrate", step, STORE, "--to", to], obj=settings)
            assert result.exit_code == 2 and quoted in result.output and repr(STORE) in result.output, result.output
            assert "Traceback" not in result.output
        assert read_record(settings, STORE) == record, change
        assert (on_disk.read_bytes() if on_disk.exists() else None) == written, change
        assert not any(Path(p).exists() for p in (settings.table_path(f"{STORE}.v2", "changelog"),
                                                  settings.checkpoint_path(f"{STORE}.v2"))), change

    definition.write_text(declared)  # v1 goes on as if nothing was asked
    produce(settings, topic, generated(60, 15, seed=62), ref)
    run_store(settings, STORE, once=True)
    publish_snapshot(spark, settings, [load_store(settings, STORE)])
    assert snapshot_rows(settings, VALUE_FIELDS) == v1_state(ref.records, settings)
