"""A real Airflow 3 (`airflow standalone`: api-server, scheduler, dag-processor, triggerer) started by
the test on free ports with a throwaway AIRFLOW_HOME (SQLite) and its own deltastate home, over the
session's broker. Shared by two tests:

* a headless Chromium (Debian's chromium + chromedriver, selenium) logs in, sees the deltastate
  DAGs, and triggers the restore DAG through its params form; screenshots go to the test's folder;
* every DAG docs/airflow.md offers is triggered through the REST API as the UI does and run by the
  scheduler to success: the store's run, then publish, then its compact and cleanup DAGs, a confirmed
  restore and a migration plan, one after another; their tasks spark-submit (the Spark provider) to
  local[*]. The published snapshot, the restore's and the plan's figures are compared with the
  independent reference and with the changelog's live rows counted here, and the plugin's store
  page reports the snapshot.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import httpx
import pytest
from support.local_infra import free_port, make_home
from support.reference import VALUE_FIELDS, expected
from support.store_checks import STORE, generated, new_topic, produce

from deltastate.bench.soak import SHORT_LIVED_JVM
from deltastate.config import PROJECT_ROOT, load_settings
from deltastate.query import Queries
from deltastate.stores import list_stores

pytestmark = pytest.mark.integration
NEVER = "none"  # scheduled runs would compete with the triggered ones; only triggers here


@dataclass
class LiveAirflow:
    base: str
    password: str
    token: str
    env: dict[str, str]
    log: Path

    def api(self, method: str, path: str, headers: dict | None = None, **kwargs) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.token}", **(headers or {})}
        return httpx.request(method, f"{self.base}/api/v2{path}", headers=headers, timeout=60, **kwargs)

    def wait_run(self, dag_id: str, run_id: str, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                run = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}").json()
            except httpx.TimeoutException:  # a busy machine can stall the API server for a while
                continue
            if run["state"] in ("success", "failed"):
                return run
            time.sleep(0.5)
        pytest.fail(f"{dag_id} {run_id} did not finish in {timeout}s; log tail:\n{self.tail()}")

    def trigger(self, dag_id: str, conf: dict, timeout: float = 1200) -> str:
        """Unpause, trigger, wait for success, pause again; returns the run id."""
        assert self.api("PATCH", f"/dags/{dag_id}", json={"is_paused": False}).status_code == 200
        made = self.api("POST", f"/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": conf})
        assert made.status_code == 200, made.text
        run_id = made.json()["dag_run_id"]
        run = self.wait_run(dag_id, run_id, timeout=timeout)
        assert run["state"] == "success", (dag_id, self.task_states(dag_id, run_id), self.tail())
        self.api("PATCH", f"/dags/{dag_id}", json={"is_paused": True})
        return run_id

    def xcom(self, dag_id: str, run_id: str, task_id: str) -> dict:
        value = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/"
                                "return_value").json()["value"]
        return json.loads(value) if isinstance(value, str) else value

    def task_log(self, dag_id: str, run_id: str, task_id: str) -> str:
        log = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/1",
                       params={"full_content": "true"}, headers={"Accept": "application/json"})
        assert log.status_code == 200, log.text
        return json.dumps(log.json())

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str]:
        tis = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances").json()["task_instances"]
        return {t["task_id"]: t["state"] for t in tis}

    def tail(self, n: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])


def _wait(what: str, check, timeout: float, proc: subprocess.Popen, log: Path):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"airflow standalone exited ({proc.returncode}) before {what}:\n{log.read_text()[-3000:]}")
        try:
            value = check()
            if value:
                return value
        except (httpx.HTTPError, OSError, KeyError, ValueError):
            pass
        time.sleep(0.5)
    pytest.fail(f"timed out waiting for {what}:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def airflow(tmp_path_factory, session_settings, broker) -> Iterator[LiveAirflow]:
    root = tmp_path_factory.mktemp("airflow-live")
    home, af_home = make_home(root / "deltastate"), root / "airflow"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "DELTASTATE_", "KAFKA_"))}
    env.update(
        AIRFLOW_HOME=str(af_home), AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__DAGS_FOLDER=str(PROJECT_ROOT / "dags"), AIRFLOW__CORE__PLUGINS_FOLDER=str(PROJECT_ROOT / "plugins"),
        AIRFLOW__API__PORT=str(port), AIRFLOW__API__HOST="127.0.0.1",
        # Task processes report to the execution API; its default URL assumes port 8080.
        AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"http://127.0.0.1:{port}/execution/",
        # On a saturated machine the API server can stall past the 5 s default and fail a task unrun.
        AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT="60",
        AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT=str(free_port()),
        AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT=str(free_port()),
        # dags/ does not change during the test: parse each file once at start, not every 30 s while
        # the tasks' Spark drivers need the CPU.
        AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL="3600",
        DELTASTATE_HOME=str(home), KAFKA_BOOTSTRAP=broker, DELTASTATE_SHUFFLE_PARTITIONS="2",
        DELTASTATE_DRIVER_MEMORY="1g", DELTASTATE_DRIVER_JAVA_OPTS=SHORT_LIVED_JVM, DELTASTATE_DAG_RETRIES="0",
        DELTASTATE_RUN_SCHEDULE=NEVER, DELTASTATE_COMPACT_SCHEDULE=NEVER, DELTASTATE_CLEANUP_SCHEDULE=NEVER,
        DELTASTATE_PUBLISH_SCHEDULE=NEVER)
    log = root / "standalone.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "airflow", "standalone"], env=env, cwd=root, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait("the API server", lambda: httpx.get(f"{base}/api/v2/version", timeout=5).status_code == 200, 420, proc, log)
        pw_file = af_home / "simple_auth_manager_passwords.json.generated"
        password = _wait("the admin password", lambda: json.loads(pw_file.read_text())["admin"], 60, proc, log)
        token = httpx.post(f"{base}/auth/token", json={"username": "admin", "password": password},
                           timeout=30).json()["access_token"]
        live = LiveAirflow(base, password, token, env, log)
        wanted = 3 * len(list_stores(load_settings({}))) + 3  # per store run, compact, cleanup; restore, publish, migrate
        _wait("the deltastate DAGs to be parsed", lambda: live.api("GET", "/dags", params={
            "dag_id_pattern": "deltastate", "limit": 100}).json()["total_entries"] == wanted, 420, proc, log)
        yield live
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=60)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def _browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver):
        pytest.fail("Debian's chromium and chromium-driver are required (make test installs them via scripts/setup.sh)")
    options = Options()
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(arg)
    options.binary_location = chromium
    browser = webdriver.Chrome(options=options, service=Service(driver))
    browser.implicitly_wait(60)
    return browser


def test_browser_logs_in_sees_dags_and_triggers_restore_through_its_form(airflow, tmp_path):
    from selenium.webdriver.common.by import By

    browser = _browser()
    try:
        browser.get(f"{airflow.base}/")
        browser.find_element(By.NAME, "username").send_keys("admin")
        browser.find_element(By.NAME, "password").send_keys(airflow.password)
        browser.find_element(By.XPATH, "//button[normalize-space()='Sign in']").click()
        browser.find_element(By.XPATH, "//a[contains(@href, '/dags')]")  # logged in: the nav is there
        browser.get(f"{airflow.base}/dags?tags=deltastate")
        browser.find_element(By.XPATH, "//a[normalize-space()='deltastate_restore']")
        listed = {a.text for a in browser.find_elements(By.XPATH, "//a[starts-with(normalize-space(), 'deltastate_')]")}
        assert {"deltastate_restore", "deltastate_publish", f"deltastate_run_{STORE}"} <= listed
        browser.save_screenshot(str(tmp_path / "dags.png"))

        browser.get(f"{airflow.base}/dags/deltastate_restore")
        browser.find_element(By.XPATH, "//button[normalize-space()='Trigger']").click()
        modal = browser.find_element(By.XPATH, "//div[@role='dialog'][.//*[contains(text(), 'Run Parameters')]]")
        # Keep the DAG paused: the run is created from the form, and waits (no restore work here).
        unpause = modal.find_element(By.XPATH, ".//label[contains(., 'Unpause deltastate_restore on trigger')]")
        unpause.click()
        store_box = modal.find_element(By.XPATH, ".//input[@role='combobox']")
        store_box.click()
        other = next(s for s in list_stores(load_settings({})) if s != STORE)
        browser.find_element(By.XPATH, f"//*[@role='option'][normalize-space()='{other}']").click()
        modal.find_element(By.ID, "switch:element_confirm").click()
        assert modal.find_element(By.NAME, "element_store").get_attribute("value") == other
        browser.save_screenshot(str(tmp_path / "restore-form.png"))
        modal.find_element(By.XPATH, ".//button[normalize-space()='Trigger']").click()

        deadline = time.monotonic() + 60
        runs = []
        while not runs and time.monotonic() < deadline:
            runs = airflow.api("GET", "/dags/deltastate_restore/dagRuns").json()["dag_runs"]
            time.sleep(0.25)
        [run] = runs
        assert run["conf"] == {"store": other, "confirm": True} and run["run_type"] == "manual"
        assert airflow.api("GET", "/dags/deltastate_restore").json()["is_paused"] is True
        browser.get(f"{airflow.base}/dags/deltastate_restore/runs/{run['dag_run_id']}")
        browser.find_element(By.XPATH, "//*[contains(text(), 'deltastate_restore')]")
        browser.save_screenshot(str(tmp_path / "restore-run.png"))
        print(f"screenshots: {tmp_path}")
        assert all((tmp_path / n).stat().st_size > 10_000 for n in ("dags.png", "restore-form.png", "restore-run.png"))
        airflow.api("DELETE", f"/dags/deltastate_restore/dagRuns/{run['dag_run_id']}")  # never runs: tidy up

        # The migrate form: the step chosen in its combobox and the confirm box become the run's conf.
        browser.get(f"{airflow.base}/dags/deltastate_migrate")
        browser.find_element(By.XPATH, "//button[normalize-space()='Trigger']").click()
        modal = browser.find_element(By.XPATH, "//div[@role='dialog'][.//*[contains(text(), 'Run Parameters')]]")
        modal.find_element(By.XPATH, ".//label[contains(., 'Unpause deltastate_migrate on trigger')]").click()
        boxes = modal.find_elements(By.XPATH, ".//input[@role='combobox']")
        assert len(boxes) == 3, "store, target version and step"
        boxes[2].click()
        browser.find_element(By.XPATH, "//*[@role='option'][normalize-space()='cutover']").click()
        modal.find_element(By.ID, "switch:element_confirm").click()
        assert modal.find_element(By.NAME, "element_action").get_attribute("value") == "cutover"
        browser.save_screenshot(str(tmp_path / "migrate-form.png"))
        modal.find_element(By.XPATH, ".//button[normalize-space()='Trigger']").click()
        deadline = time.monotonic() + 60
        runs = []
        while not runs and time.monotonic() < deadline:
            runs = airflow.api("GET", "/dags/deltastate_migrate/dagRuns").json()["dag_runs"]
            time.sleep(0.25)
        [run] = runs
        assert {k: run["conf"].get(k) for k in ("store", "to_version", "action", "confirm")} == {
            "store": STORE, "to_version": 2, "action": "cutover", "confirm": True}
        airflow.api("DELETE", f"/dags/deltastate_migrate/dagRuns/{run['dag_run_id']}")  # never runs: tidy up
    finally:
        browser.quit()


def changelog_live_rows(spark, settings) -> dict[str, int]:
    """Key -> source partition of every live key, from the store's Delta changelog read here: the
    newest record per key (epoch, then micro-batch) is live when it is a put."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    rows = spark.read.format("delta").load(settings.table_path(STORE, "changelog"))
    newest = Window.partitionBy("key").orderBy(F.col("epoch").desc(), F.col("batch_id").desc())
    live = rows.withColumn("n", F.row_number().over(newest)).where("n = 1 AND op = 'put'")
    return {r["key"]: r["source_partition"] for r in live.select("key", "source_partition").collect()}


def test_every_dag_runs_to_success_through_the_rest_api(airflow, session_settings, broker, spark, topic):
    settings = replace(session_settings, home=Path(airflow.env["DELTASTATE_HOME"]),
                       storage_root=str(Path(airflow.env["DELTASTATE_HOME"]) / "data"))
    ref = new_topic(settings, broker, topic)
    produce(settings, topic, generated(2_000, 120, seed=53, tombstones=0.05), ref)
    exp = expected(ref.records, settings.max_value_bytes)

    run_dag = f"deltastate_run_{STORE}"
    run_id = airflow.trigger(run_dag, {"topic": topic})
    # The run updated the changelog Asset the publish DAG is scheduled on.
    events = airflow.api("GET", "/assets/events", params={"source_dag_id": run_dag}).json()["asset_events"]
    assert [e["source_run_id"] for e in events] == [run_id]
    figures = airflow.xcom("deltastate_publish", airflow.trigger("deltastate_publish", {}), "publish_snapshot")
    assert figures["success"] is True and figures["row_counts"][STORE] == len(exp.state)
    with Queries(settings) as queries:
        result = queries.all(STORE)
    assert result.snapshot_version == figures["current_version"]
    assert {r["key"]: {f: r[f] for f in VALUE_FIELDS} for r in result.rows} == exp.state

    plugins = airflow.api("GET", "/plugins").json()["plugins"]
    assert "deltastate" in {p["name"] for p in plugins}
    assert airflow.api("GET", "/plugins/importErrors").json()["import_errors"] == []
    page = httpx.get(f"{airflow.base}/deltastate/api/stores", timeout=30).json()
    [row] = [r for r in page if r["store"] == STORE]
    assert (row["snapshot_version"], row["rows"], row["versions_behind"]) == (result.snapshot_version, len(exp.state), 0)
    html = httpx.get(f"{airflow.base}/deltastate/stores", timeout=30).text
    assert f"<tr id='{STORE}'>" in html and "Data Docs" in html

    # Compaction, then cleanup, a confirmed restore and a migration plan, one after another (each
    # task starts its own Spark driver): compaction rewrites the changelog without changing its live
    # rows, so the restore and the plan read the same rows from the compacted changelog.
    live = changelog_live_rows(spark, settings)
    assert len(live) == len(exp.state)
    compact_run = airflow.trigger(f"deltastate_compact_{STORE}", {"topic": topic})
    cleanup_run = airflow.trigger(f"deltastate_cleanup_{STORE}", {"topic": topic})
    restore_run = airflow.trigger("deltastate_restore", {"store": STORE, "confirm": True})
    # A migration plan (read-only: no confirm) of the store's next value schema version.
    plan_run = airflow.trigger("deltastate_migrate", {"store": STORE, "to_version": 2, "action": "plan"})
    compact = airflow.xcom(f"deltastate_compact_{STORE}", compact_run, "compact_store")
    assert compact["store"] == STORE and compact["before"]["records"] >= compact["after"]["records"] > 0, compact
    cleanup = airflow.xcom(f"deltastate_cleanup_{STORE}", cleanup_run, "cleanup_store")
    assert cleanup["store"] == STORE and cleanup["skipped"] == "no ttl declared", cleanup  # player_stats has no TTL

    # The restore rebuilt the checkpoint from the changelog, one batch per source partition.
    restored = airflow.xcom("deltastate_restore", restore_run, "restore_store")
    assert (restored["store"], restored["mode"], restored["records_restored"]) == (STORE, "full", len(live))
    assert restored["starting_offsets"] == {str(p): o for p, o in sorted(ends(ref.records).items())}
    log = airflow.task_log("deltastate_restore", restore_run, "restore_store")
    named = {int(p) for p in re.findall(rf"\[restore {STORE}\] batch: source partition (\d+):", log)}
    assert named == set(live.values()), (named, log[-3000:])

    plan = airflow.xcom("deltastate_migrate", plan_run, "plan")
    assert (plan["store"], plan["from_version"], plan["to_version"], plan["live_rows"]) == (STORE, 1, 2, len(live))
    # Only the chosen step ran: a plan changes nothing, so start and every other step were skipped.
    states = {t["task_id"]: t["state"] for t in airflow.api(
        "GET", f"/dags/deltastate_migrate/dagRuns/{plan_run}/taskInstances").json()["task_instances"]}
    assert states == {"choose_step": "success", "plan": "success", "start": "skipped", "status": "skipped",
                      "cutover": "skipped", "rollback": "skipped", "retire": "skipped"}, states


def ends(records) -> dict[int, int]:
    """Partition -> one past the newest offset, from the reference topic."""
    out: dict[int, int] = {}
    for r in records:
        out[r.partition] = max(out.get(r.partition, 0), r.offset + 1)
    return out
