"""The metrics and the Grafana dashboard, checked against a real Prometheus and Pushgateway (Debian's
packages, started here on free ports with a generated config that scrapes every deltastate process).

A continuous player_stats run (its own process, scraped) reads a paced load with some invalid
records in it; then the short-lived jobs (compaction, cleanup, publish, restore, a migration's start
and status, in one Spark process, started while the run is checked and stopped) push, while the
query service (scraped) starts; it then answers a few reads. Every panel's PromQL in
docker/grafana/dashboards/deltastate.json, with the store variable filled in, returns at least one
series over the test's time range, and the figures agree with what the test produced: the
records/s over the load within 10% of the records sent over the same window, the lag at 0 after
catch-up, the dead letters equal to the invalid records, restore's remaining records at 0 with
every live key restored."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from support.local_infra import free_port
from support.migration import migration_settings
from support.store_checks import STORE, event

from deltastate.bench.soak import SHORT_LIVED_JVM
from deltastate.config import PROJECT_ROOT, Settings
from deltastate.ingest.producer import ensure_topic, produce_records

pytestmark = [pytest.mark.integration, pytest.mark.timeout(3000)]

DASHBOARD = PROJECT_ROOT / "docker" / "grafana" / "dashboards" / "deltastate.json"
RATE, SECONDS, PLAYERS = 20, 40, 300  # the steady load: records/s for SECONDS, over PLAYERS keys
INVALID_EVERY = 50  # one record in 50 is not JSON: a dead letter


def _get(url: str, timeout: float = 10.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 (loopback only)
        return resp.read()


class Prometheus:
    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"

    def query(self, expr: str, at: float | None = None) -> list[dict]:
        params = {"query": expr, **({"time": f"{at:.3f}"} if at is not None else {})}
        doc = json.loads(_get(f"{self.base}/api/v1/query?{urllib.parse.urlencode(params)}"))
        assert doc["status"] == "success", (expr, doc)
        return doc["data"]["result"]

    def query_range(self, expr: str, start: float, end: float) -> list[dict]:
        params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": "1"}
        doc = json.loads(_get(f"{self.base}/api/v1/query_range?{urllib.parse.urlencode(params)}"))
        assert doc["status"] == "success", (expr, doc)
        return doc["data"]["result"]

    def value(self, expr: str, at: float | None = None) -> float | None:
        result = self.query(expr, at)
        return None if not result else float(result[0]["value"][1])

    def wait_for(self, expr: str, ok, timeout: float, what: str) -> float:
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last = self.value(expr)
            if last is not None and ok(last):
                return last
            time.sleep(1.0)
        pytest.fail(f"{what}: {expr} was {last} after {timeout:.0f} s")


def _wait_http(url: str, timeout: float, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"{proc.args[0]} exited with {proc.returncode} before {url} answered")
        try:
            _get(url, timeout=2)
            return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"{url} did not answer within {timeout:.0f} s")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture()
def stack(tmp_path: Path) -> Iterator[dict]:
    """Prometheus and the Pushgateway on free ports; the ports the deltastate processes will use."""
    for program in ("prometheus", "prometheus-pushgateway"):
        assert shutil.which(program), f"{program} is missing: run `DELTASTATE_BROWSER=1 make setup`"
    ports = {name: free_port() for name in ("prometheus", "pushgateway", "run", "serve", "airflow")}
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {"job_name": "deltastate_run", "static_configs": [{"targets": [f"127.0.0.1:{ports['run']}"]}]},
            {"job_name": "deltastate_serve", "static_configs": [{"targets": [f"127.0.0.1:{ports['serve']}"]}]},
            {"job_name": "airflow", "static_configs": [{"targets": [f"127.0.0.1:{ports['airflow']}"]}]},
            # Pushed groups keep their own job and store labels.
            {"job_name": "pushgateway", "honor_labels": True,
             "static_configs": [{"targets": [f"127.0.0.1:{ports['pushgateway']}"]}]},
        ],
    }
    (tmp_path / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
    procs = [
        # Its own persistence file: Debian's default is one file shared by every gateway on the machine,
        # which would bring other runs' groups (and their conflicts) into this one.
        subprocess.Popen(["prometheus-pushgateway", f"--web.listen-address=127.0.0.1:{ports['pushgateway']}",
                          f"--persistence.file={tmp_path / 'pushgateway.data'}"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
        subprocess.Popen(["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
                          f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                          f"--web.listen-address=127.0.0.1:{ports['prometheus']}", "--log.level=warn"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
    ]
    try:
        _wait_http(f"http://127.0.0.1:{ports['pushgateway']}/-/ready", 60, procs[0])
        _wait_http(f"http://127.0.0.1:{ports['prometheus']}/-/ready", 60, procs[1])
        yield ports
    finally:
        for proc in procs:
            _stop(proc)


def _env(settings: Settings, ports: dict, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DELTASTATE_", "KAFKA_"))}
    # Short-lived Spark drivers on a few shared cores start faster with C1 alone and a serial GC.
    env.update(settings.to_env(), DELTASTATE_PUSHGATEWAY=f"127.0.0.1:{ports['pushgateway']}",
               DELTASTATE_DRIVER_MEMORY="1g", DELTASTATE_DRIVER_JAVA_OPTS=SHORT_LIVED_JVM, **extra)
    return env


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "deltastate.cli", *args]


def _produce_steady(settings: Settings, topic: str) -> tuple[int, int, float, float]:
    """RATE records/s for SECONDS, in tenth-of-a-second slices through one producer (librdkafka
    sends each slice within its linger time); returns (records, invalid, start, end)."""
    counts = {"sent": 0, "invalid": 0}

    def paced():
        for tick in range(SECONDS * 10):
            for _ in range(RATE // 10):
                sent = counts["sent"]
                player = f"player-{sent % PLAYERS:04d}"
                if (sent + 1) % INVALID_EVERY == 0:
                    counts["invalid"] += 1
                    yield player.encode(), b'{"player_id": "broken'
                else:
                    yield player.encode(), event(player, sent % 97, 1_700_000_000_000 + sent)
                counts["sent"] += 1
            time.sleep(max(0.0, start + (tick + 1) / 10 - time.time()))

    start = time.time()
    result = produce_records(settings.kafka_bootstrap, topic, paced())
    assert result.delivered == counts["sent"], result
    return counts["sent"], counts["invalid"], start, time.time()


MAINTENANCE = """
import sys

from deltastate.config import load_settings
from deltastate.infra.spark import get_spark
from deltastate.maintenance.cleanup import cleanup_store
from deltastate.maintenance.compact import compact_store
from deltastate.maintenance.restore import restore_store
from deltastate.migration import steps
from deltastate.snapshot import publish_snapshot
from deltastate.stores import load_store

settings = load_settings()
spark = get_spark(settings, "metrics-test-jobs")
# The test starts this process while the continuous run finishes and says go once it has stopped.
assert sys.stdin.readline().strip() == "go"
compact_store(settings, "player_stats", spark=spark)
cleanup_store(settings, "player_stats", spark=spark)
publish_snapshot(spark, settings, [load_store(settings, "player_stats")])
print("restored", restore_store(settings, "player_stats", spark=spark).records_restored)
# The migration to the declared v2: built beside v1 (a seed of its state), then its status.
print("migrating", steps.start(spark, settings, "player_stats", 2).phase)
print("lag", steps.status(spark, settings, "player_stats").details["lag"])
"""


def _started(stack: ExitStack, proc: subprocess.Popen) -> subprocess.Popen:
    """proc, stopped when the stack closes if it is still running."""
    stack.callback(_stop, proc)
    return proc


def test_dashboard_panels_against_prometheus(broker: str, make_settings, topic: str, stack: dict,
                                             tmp_path: Path) -> None:
    settings = migration_settings(make_settings(), tmp_path / "schemas", topic)  # v2 declared, reading topic
    prom = Prometheus(stack["prometheus"])
    assert ensure_topic(broker, topic, 4) is True
    began = time.time()
    # Warm-up: the run's Spark session starts, reads these, and its figures appear in Prometheus.
    warm = [(f"player-{i:04d}".encode(), event(f"player-{i:04d}", 1, 1_700_000_000_000)) for i in range(PLAYERS)]
    produce_records(broker, topic, warm)
    log = settings.home / "run.log"
    jobs_out, jobs_err = settings.home / "jobs.out", settings.home / "jobs.err"
    with ExitStack() as children:
        with open(log, "w") as out:
            run = subprocess.Popen(_cli("run", STORE, "--continuous", "--trigger", "1s", "--topic", topic, "--quiet"),
                                   env=_env(settings, stack, DELTASTATE_METRICS_PORT=str(stack["run"])),
                                   stdout=out, stderr=subprocess.STDOUT, text=True)
        try:
            _wait_http(f"http://127.0.0.1:{stack['run']}/metrics", 120, run)
            assert f"metrics on port {stack['run']} (/metrics)" in log.read_text()
            store = f'{{store="{STORE}",job="deltastate_run"}}'
            try:
                prom.wait_for(f"sum(deltastate_records_in_total{store})", lambda v: v >= PLAYERS, 900, "warm-up")
            except BaseException:
                print(log.read_text()[-5000:], _get(f"http://127.0.0.1:{stack['run']}/metrics").decode()[-5000:])
                raise

            sent, invalid, start, end = _produce_steady(settings, topic)
            produced_rate = sent / (end - start)
            total = PLAYERS + sent
            prom.wait_for(f"sum(deltastate_records_in_total{store})", lambda v: v >= total, 240, "catch-up")
            behind = time.time() - end  # how far the store's commits trail production
            # The short-lived jobs' process (its own Spark driver) starts while the caught-up run is
            # checked and stopped; it waits for the word to begin (the jobs need the run stopped).
            with open(jobs_out, "w") as jout, open(jobs_err, "w") as jerr:
                jobs = _started(children, subprocess.Popen(
                    [sys.executable, "-c", MAINTENANCE], env=_env(settings, stack), stdin=subprocess.PIPE,
                    stdout=jout, stderr=jerr, text=True))
            # The lag falls to 0 on every partition once the run has read everything.
            prom.wait_for(f"count(deltastate_consumer_lag_records{store} == 0)", lambda v: v == 4, 60, "lag")
            assert prom.value(f"max(deltastate_consumer_lag_records{store})") == 0
            # Throughput as Prometheus computes it, over a window from the start of the load (the
            # counter holds the warm-up alone then) to a moment after the catch-up (it holds every
            # record): whatever pace the run kept, the window's increase is exactly what was sent.
            time.sleep(2)  # a scrape of the caught-up counter
            at = time.time()
            window = int(at - start)
            measured = prom.value(f"sum(rate(deltastate_records_in_total{store}[{window}s]))", at=at)
            reference = sent / window
            print(f"produced {produced_rate:.1f} records/s; Prometheus rate {measured} over {window} s against "
                  f"{reference:.2f} committed; commits trail production by {behind:.1f} s")
            assert measured is not None and abs(measured - reference) <= 0.1 * reference, (measured, reference)
            # Every invalid record is a dead letter, under its reason; none is late in a key-value store.
            assert prom.value(f"sum(deltastate_records_dead_lettered_total{store})") == invalid
            assert prom.value(f"sum(deltastate_records_in_total{store})") == total
            assert prom.value(f"sum(deltastate_records_applied_total{store})") == total - invalid
            assert prom.value(f"sum(deltastate_records_late_total{store})") == 0
            time.sleep(3)  # a few more scrapes of the caught-up run
        finally:
            _stop(run)
        assert run.returncode == 0, log.read_text()[-5000:]

        # The short-lived jobs push; meanwhile the query service starts, on its own port, scraped.
        # It answers /health once the jobs have published a snapshot.
        try:
            jobs.stdin.write("go\n")
            jobs.stdin.close()
        except BrokenPipeError:
            pass  # it has exited already: its return code and output below say why
        serve = _started(children, subprocess.Popen(
            _cli("serve", "--port", str(stack["serve"]), "--log-level", "warning"), env=_env(settings, stack),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        jobs.wait(timeout=1500)
        jobs_stdout = jobs_out.read_text()
        assert jobs.returncode == 0, jobs_stdout + jobs_err.read_text()
        # Restore's last push says nothing remains and every key came back.
        assert f"restored {PLAYERS}" in jobs_stdout, jobs_stdout
        pushed = f'{{store="{STORE}",job="deltastate_restore"}}'
        prom.wait_for(f"max(deltastate_restore_restored_records{pushed})", lambda v: v == PLAYERS, 30,
                      "restore pushed")
        assert prom.value(f"max(deltastate_restore_remaining_records{pushed})") == 0
        # The migration's steps push their phase, and status the new version's lag (caught up: 0).
        assert "migrating building" in jobs_stdout and "lag 0" in jobs_stdout, jobs_stdout
        migrating = f'{{store="{STORE}",job="deltastate_migrate"}}'
        prom.wait_for(f'max(deltastate_migration_phase{{store="{STORE}",phase="building"}})', lambda v: v == 1, 30,
                      "migration phase pushed")
        prom.wait_for(f"max(deltastate_migration_lag_records{migrating})", lambda v: v == 0, 30, "migration lag pushed")

        # The query service: a hit, a miss (404 counts as an error answer), both scraped.
        base = f"http://127.0.0.1:{stack['serve']}"
        _wait_http(f"{base}/health", 120, serve)
        _get(f"{base}/stores/{STORE}/keys/player-0001")
        with pytest.raises(urllib.error.HTTPError):
            _get(f"{base}/stores/{STORE}/keys/nobody")
        keys = 'job="deltastate_serve",endpoint="/stores/{store}/keys/{key}"'
        prom.wait_for(f'sum(deltastate_requests_total{{{keys},status="200"}})', lambda v: v >= 1, 30, "service hit")
        prom.wait_for(f'sum(deltastate_errors_total{{{keys},status="404"}})', lambda v: v >= 1, 30, "service miss")
        time.sleep(2)

    # Every panel of the dashboard has data over the test's time range.
    panels = [p for p in json.loads(DASHBOARD.read_text())["panels"] if p["type"] != "row"]
    finished = time.time()
    empty = []
    for panel in panels:
        for target in panel["targets"]:
            expr = target["expr"].replace("$store", STORE)
            if not prom.query_range(expr, began, finished):
                empty.append(f"{panel['title']}: {expr}")
    assert not empty, "panels without data:\n" + "\n".join(empty)


AIRFLOW_EMITS = """
from airflow.observability.metrics.otel_logger import get_otel_logger
from opentelemetry import metrics

stats = get_otel_logger()
for _ in range(3):
    stats.incr("ti_successes")
stats.incr("ti_failures")
stats.gauge("scheduler.tasks.running", 2)
stats.timing("dagrun.duration.success.deltastate_publish", 1.5)
assert metrics.get_meter_provider().force_flush(10_000)
"""


def test_airflow_metrics_through_the_bridge(stack: dict, tmp_path: Path) -> None:
    """Airflow's own OpenTelemetry logger (the one `[metrics] otel_on` turns on) exports to the
    bridge; Prometheus scrapes the bridge and sees the counts Airflow emitted."""
    from deltastate.metrics.otlp_bridge import serve

    otlp_port = free_port()
    receiver, latest, _port = serve(otlp_port, stack["airflow"], host="127.0.0.1")
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "OTEL_"))}
        env.update(AIRFLOW_HOME=str(tmp_path / "airflow"), AIRFLOW__METRICS__OTEL_ON="True",
                   OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=f"http://127.0.0.1:{otlp_port}/v1/metrics",
                   OTEL_METRIC_EXPORT_INTERVAL="500")
        emitted = subprocess.run([sys.executable, "-c", AIRFLOW_EMITS], env=env, capture_output=True, text=True,
                                 timeout=180)
        assert emitted.returncode == 0, emitted.stderr[-3000:]
        assert latest.received > 0
        prom = Prometheus(stack["prometheus"])
        assert prom.wait_for('sum(airflow_ti_successes_total{job="airflow"})', lambda v: v == 3, 60, "ti_successes") == 3
        assert prom.value('sum(airflow_ti_failures_total{job="airflow"})') == 1
        assert prom.value('sum(airflow_scheduler_tasks_running{job="airflow"})') == 2
        assert prom.value('sum(airflow_dagrun_duration_success_deltastate_publish_count{job="airflow"})') == 1
    finally:
        receiver.shutdown()
