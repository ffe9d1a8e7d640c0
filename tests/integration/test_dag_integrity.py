"""DAG integrity: every file in dags/ imports cleanly in a fresh interpreter whose Airflow database
is unreachable and whose connection lookups are recorded; the generated DAGs are the declared
stores' and follow the project's policy (tags, owners, retries, catchup, one active run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from deltastate.config import PROJECT_ROOT, load_settings
from deltastate.stores import list_stores

PROBE = r'''
import json, sys
calls = {"db": [], "conn": []}
import sqlalchemy.engine, sqlalchemy.orm
_connect = sqlalchemy.engine.Engine.connect
def spy_connect(self, *a, **k):
    calls["db"].append(str(self.url)); return _connect(self, *a, **k)
sqlalchemy.engine.Engine.connect = spy_connect
_execute = sqlalchemy.orm.Session.execute
def spy_execute(self, *a, **k):
    calls["db"].append(str(a[:1])); return _execute(self, *a, **k)
sqlalchemy.orm.Session.execute = spy_execute
from airflow.sdk import BaseHook
_get = BaseHook.get_connection.__func__
def spy_get(cls, conn_id):
    calls["conn"].append(conn_id); return _get(cls, conn_id)
BaseHook.get_connection = classmethod(spy_get)
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(sys.argv[1])
dags = {}
for dag_id, dag in bag.dags.items():
    tasks = {t.task_id: {"retries": t.retries, "owner": t.owner, "outlets": [getattr(o, "name", str(o)) for o in t.outlets],
                         "type": type(t).__name__, "upstream": sorted(t.upstream_task_ids)} for t in dag.tasks}
    timetable = dag.timetable
    dags[dag_id] = {"tags": sorted(dag.tags), "catchup": dag.catchup, "max_active_runs": dag.max_active_runs,
                    "doc_md": dag.doc_md, "fileloc": dag.fileloc, "tasks": tasks, "schedule": type(timetable).__name__,
                    "params": {k: {"value": v.value, "schema": v.schema} for k, v in dag.params.items()},
                    "asset_condition": str(getattr(timetable, "asset_condition", ""))}
print("PROBE " + json.dumps({"errors": {k: str(v) for k, v in bag.import_errors.items()}, "dags": dags, "calls": calls,
                             "modules": sorted(m for m in ("pyspark", "great_expectations", "duckdb") if m in sys.modules)},
                            default=str))
'''


@pytest.fixture(scope="module")
def parsed(tmp_path_factory) -> dict:
    home = tmp_path_factory.mktemp("airflow-parse")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(AIRFLOW_HOME=str(home), AIRFLOW__CORE__LOAD_EXAMPLES="False",
               # A database that cannot exist: any parse-time query would fail loudly and be recorded.
               AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home}/missing-dir/airflow.db",
               AIRFLOW__CORE__DAGS_FOLDER=str(PROJECT_ROOT / "dags"))
    proc = subprocess.run([sys.executable, "-c", PROBE, str(PROJECT_ROOT / "dags")], env=env, cwd=home,
                          capture_output=True, text=True, timeout=300)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("PROBE ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(lines[-1][len("PROBE "):])


def test_dag_files_import_without_errors_database_or_connections(parsed):
    assert parsed["errors"] == {}
    assert parsed["calls"] == {"db": [], "conn": []}
    assert parsed["modules"] == []  # no pyspark, great_expectations or duckdb at parse time
    files = {Path(d["fileloc"]).name for d in parsed["dags"].values()}
    assert files == {p.name for p in (PROJECT_ROOT / "dags").glob("*.py")}  # every file defines DAGs


def test_one_run_compact_and_cleanup_dag_per_declared_store(parsed):
    stores = list_stores(load_settings({}))
    assert len(stores) >= 1
    expected = {f"deltastate_{kind}_{s}" for s in stores for kind in ("run", "compact", "cleanup")}
    assert set(parsed["dags"]) == expected | {"deltastate_restore", "deltastate_publish", "deltastate_migrate"}
    for store in stores:
        run = parsed["dags"][f"deltastate_run_{store}"]
        assert run["tasks"]["run_store"]["type"] == "DeltastateSparkOperator"
        assert run["tasks"]["run_store"]["outlets"] == [f"deltastate.{store}.changelog"]
        # The events check reports beside the run and never delays it.
        assert {t: v["upstream"] for t, v in run["tasks"].items()} == {"check_events": [], "run_store": []}
        assert f"store:{store}" in run["tags"]
        assert f"deltastate.{store}.changelog" in parsed["dags"]["deltastate_publish"]["asset_condition"]


def test_policy_tags_owners_retries_catchup_docs(parsed):
    for dag_id, dag in parsed["dags"].items():
        assert "deltastate" in dag["tags"] and len(dag["tags"]) >= 2, dag_id
        assert dag["catchup"] is False and dag["max_active_runs"] == 1, dag_id
        assert dag["doc_md"] and len(dag["doc_md"]) > 100, dag_id
        for task_id, task in dag["tasks"].items():
            assert task["owner"] == "deltastate", (dag_id, task_id)
            # Scheduled work retries; the manual restore and migrations never repeat themselves unasked.
            manual = dag_id in ("deltastate_restore", "deltastate_migrate")
            assert (task["retries"] == 0) if manual else (task["retries"] >= 1), (dag_id, task_id)


def test_manual_restore_form_offers_declared_stores_and_a_confirm_box(parsed):
    restore = parsed["dags"]["deltastate_restore"]
    assert restore["schedule"] == "NullTimetable"  # manual only
    store, confirm = restore["params"]["store"], restore["params"]["confirm"]
    assert store["schema"]["enum"] == list_stores(load_settings({}))
    assert confirm["value"] is False and confirm["schema"]["type"] == "boolean"
    assert list(restore["tasks"]) == ["confirm", "restore_store"]


def test_manual_migrate_form_offers_stores_with_migrations_versions_and_steps(parsed):
    from deltastate.stores import load_store

    settings = load_settings({})
    migratable = [s for s in list_stores(settings) if len(load_store(settings, s).versions) > 1]
    assert migratable, "a declared store must declare a migration for this form to mean anything"
    migrate = parsed["dags"]["deltastate_migrate"]
    assert migrate["schedule"] == "NullTimetable"
    params = migrate["params"]
    assert params["store"]["schema"]["enum"] == migratable
    assert params["to_version"]["schema"]["enum"] == sorted(
        {v for s in migratable for v in load_store(settings, s).versions[1:]})
    assert params["action"]["schema"]["enum"] == ["plan", "start", "status", "cutover", "rollback", "retire"]
    assert params["action"]["value"] == "plan" and params["confirm"]["value"] is False
    assert list(migrate["tasks"]) == ["choose_step", "plan", "start", "status", "cutover", "rollback", "retire"]
    assert all(migrate["tasks"][t]["type"] == "DeltastateSparkOperator" for t in list(migrate["tasks"])[1:])
