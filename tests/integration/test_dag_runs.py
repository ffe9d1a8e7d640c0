"""dag.test() runs of the store-run, compaction, cleanup, publish and restore DAGs in this process, against
the session's real broker, Spark and Delta, with an Airflow metadata database in a temporary
AIRFLOW_HOME. The operator runs inline here (DELTASTATE_SPARK_DEPLOY=inline: the warm session Spark
is the driver); the spark-submit path is exercised by tests/test_airflow_live.py. Each run's
figures are read back from Airflow's XCom table and checked against the independent reference."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from support.reference import VALUE_FIELDS, expected
from support.store_checks import STORE, generated, new_topic, produce

from deltastate.config import PROJECT_ROOT
from deltastate.query import Queries

pytestmark = pytest.mark.integration

# Airflow reads its configuration when first imported: point it at a throwaway home before that.
_AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="deltastate-dagtest-"))
AIRFLOW_ENV = {"AIRFLOW_HOME": str(_AIRFLOW_HOME), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
               "AIRFLOW__CORE__DAGS_FOLDER": str(PROJECT_ROOT / "dags"),
               "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{_AIRFLOW_HOME}/airflow.db"}


_IMPORTED_EARLY = "airflow" in sys.modules
os.environ.update(AIRFLOW_ENV)  # at collection, before any test of the session imports airflow


@pytest.fixture(scope="module")
def airflow_db() -> Path:
    if _IMPORTED_EARLY:
        pytest.fail("airflow was imported before this module could point it at a test AIRFLOW_HOME")
    env = {**os.environ, **AIRFLOW_ENV}
    proc = subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return _AIRFLOW_HOME / "airflow.db"


def _xcom(db: Path, dag_id: str, run_id: str, task_id: str) -> dict:
    with sqlite3.connect(db) as con:
        [(value,)] = con.execute("SELECT value FROM xcom WHERE dag_id = ? AND run_id = ? AND task_id = ? "
                                 "AND key = 'return_value'", (dag_id, run_id, task_id)).fetchall()
    value = json.loads(value)
    return json.loads(value) if isinstance(value, str) else value


def _test(dag, conf: dict | None = None):
    run = dag.test(run_conf=conf)
    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    assert str(run.state).endswith("success"), (dag.dag_id, states)
    return run


def test_run_compact_cleanup_publish_dags(airflow_db, make_settings, broker, spark, topic, monkeypatch):
    settings = make_settings("dags")
    ref = new_topic(settings, broker, topic)
    produce(settings, topic, generated(2_500, 150, seed=41, tombstones=0.04), ref)
    exp = expected(ref.records, settings.max_value_bytes)
    for key, value in {"DELTASTATE_HOME": str(settings.home), "DELTASTATE_STORAGE": settings.storage_root,
                       "KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
                       "DELTASTATE_SHUFFLE_PARTITIONS": str(settings.shuffle_partitions),
                       "DELTASTATE_SPARK_DEPLOY": "inline"}.items():
        monkeypatch.setenv(key, value)

    from deltastate.orchestration.dags import maintenance_dag, publish_dag, restore_dag, run_dag
    from deltastate.orchestration.options import load_options

    opts = load_options()
    run = _test(run_dag(settings, opts, STORE, None), {"topic": topic})
    figures = _xcom(airflow_db, f"deltastate_run_{STORE}", run.run_id, "run_store")
    assert (figures["records_in"], figures["applied"], figures["dead_lettered"]) == (
        exp.records_in, exp.applied, exp.dead_lettered)
    events = _xcom(airflow_db, f"deltastate_run_{STORE}", run.run_id, "check_events")
    # check_events samples the newest 500 records of each partition; tombstones are not events.
    sampled = [r for r in ref.records if r.value is not None
               and r.offset >= max(x.offset for x in ref.records if x.partition == r.partition) + 1 - 500]
    assert events["success"] is True and events["rows"] == len(sampled)

    for action in ("compact", "cleanup"):
        dag = maintenance_dag(opts, STORE, action, "0 3 * * *", None)
        run = _test(dag, {"topic": topic})
        figures = _xcom(airflow_db, dag.dag_id, run.run_id, f"{action}_store")
        assert figures["store"] == STORE and figures["action"] == action and figures.get("read_version") is not None
        if action == "compact":
            assert figures["before"] is not None and figures["after"] is not None, figures

    run = _test(publish_dag(None, settings))
    figures = _xcom(airflow_db, "deltastate_publish", run.run_id, "publish_snapshot")
    assert figures["success"] is True and figures["current_version"] == 1
    assert figures["row_counts"][STORE] == len(exp.state)
    with Queries(settings) as queries:
        result = queries.all(STORE)
    assert result.snapshot_version == 1
    assert {r["key"]: {f: r[f] for f in VALUE_FIELDS} for r in result.rows} == exp.state

    # A confirmed restore: its report is the task's XCom like every other action's.
    run = _test(restore_dag(None, settings), {"store": STORE, "confirm": True})
    restored = _xcom(airflow_db, "deltastate_restore", run.run_id, "restore_store")
    assert (restored["mode"], restored["records_restored"]) == ("full", len(exp.state))
    assert restored["epoch"] == 1 and restored["starting_offsets"] == {
        str(p): max(r.offset for r in ref.records if r.partition == p) + 1 for p in {r.partition for r in ref.records}}


def test_migrate_dag_plans_starts_and_cuts_over(airflow_db, make_settings, broker, spark, topic, monkeypatch, tmp_path):
    import shutil

    import yaml
    from support.reference import V2_FIELDS, expected_v2

    from deltastate.engine import run_store
    from deltastate.stores.current import read_record

    schemas = tmp_path / "schemas"
    shutil.copytree(PROJECT_ROOT / "schemas", schemas)
    raw = yaml.safe_load((schemas / "stores" / f"{STORE}.yaml").read_text())
    raw["source"]["topic"] = topic
    (schemas / "stores" / f"{STORE}.yaml").write_text(yaml.safe_dump(raw))
    settings = make_settings("migrate")
    settings = type(settings)(**{**settings.__dict__, "schemas_dir": schemas})
    for key, value in {"DELTASTATE_HOME": str(settings.home), "DELTASTATE_STORAGE": settings.storage_root,
                       "DELTASTATE_SCHEMAS": str(schemas), "KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
                       "DELTASTATE_SHUFFLE_PARTITIONS": str(settings.shuffle_partitions),
                       "DELTASTATE_SPARK_DEPLOY": "inline"}.items():
        monkeypatch.setenv(key, value)
    ref = new_topic(settings, broker, topic)
    produce(settings, topic, generated(600, 60, seed=51, tombstones=0.04), ref)
    run_store(settings, STORE, once=True)

    from deltastate.orchestration.dags import migrate_dag

    dag = migrate_dag(None, settings)
    refused = dag.test(run_conf={"store": STORE, "to_version": 2, "action": "cutover"})  # no confirm
    assert not str(refused.state).endswith("success")
    assert read_record(settings, STORE).migration is None

    run = _test(dag, {"store": STORE, "to_version": 2, "action": "start", "confirm": True})
    plan = read_record(settings, STORE).migration.plan  # the plan start made and followed
    assert {f["field"]: f["strategy"] for f in plan["fields"]}["last_game_id"] == "replay"
    started = _xcom(airflow_db, "deltastate_migrate", run.run_id, "start")
    assert started["phase"] == "building" and started["details"]["build"] == "replay"
    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    assert all(states[t].endswith("skipped") for t in ("plan", "status", "cutover", "rollback", "retire")), states

    produce(settings, topic, generated(200, 60, seed=52, tombstones=0.04), ref)
    run = _test(dag, {"store": STORE, "to_version": 2, "action": "cutover", "confirm": True})
    cut = _xcom(airflow_db, "deltastate_migrate", run.run_id, "cutover")
    assert cut["phase"] == "cut-over" and cut["details"]["checks"]["success"] is True
    with Queries(settings) as queries:
        rows = {r["key"]: {f: r[f] for f in V2_FIELDS} for r in queries.all(STORE).rows}
    want = expected_v2(ref.records, settings.max_value_bytes)
    assert rows.keys() == want.keys()
    assert all(rows[k][f] == pytest.approx(want[k][f]) if isinstance(want[k][f], float) else rows[k][f] == want[k][f]
               for k in want for f in V2_FIELDS)
