"""A migration under load: `deltastate run --continuous` (a real CLI process) keeps ingesting v1 while
v2 is built, `deltastate serve` answers 8 reader threads throughout, and the cutover stops the v1
stream (its run sees the fence and exits cleanly), lets v2 finish and switches. Every read must
succeed, every answer must be one version's shape and name that version, and the final state must
equal the reference over every record produced."""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from support.local_infra import free_port
from support.migration import STORE, approx_v2, migration_settings, snapshot_rows
from support.reference import V2_FIELDS, VALUE_FIELDS, expected_v2
from support.store_checks import generated, intake_totals, new_topic, produce

from deltastate.bench.http_load import wait_healthy
from deltastate.bench.soak import child_env
from deltastate.config import PROJECT_ROOT
from deltastate.migration import steps
from deltastate.snapshot import publish_snapshot
from deltastate.stores import load_store

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]
READERS = 8
READ_PAUSE_S = 0.05  # between one reader's requests: eight readers stay concurrent without taking
# the test process's GIL (where the v2 build and the cutover drive Spark) and the cores from the runs
SHAPES = {1: set(VALUE_FIELDS), 2: set(V2_FIELDS)}


@pytest.fixture
def mig_settings(make_settings, tmp_path, topic):
    # The v1 run copies its audits to the intake table every second: the test sees it caught up
    # a second after its batch commits.
    return migration_settings(make_settings(audit_flush_seconds=1.0), tmp_path / "schemas", topic)


def cli(settings, log: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "deltastate.cli.main", *args], cwd=PROJECT_ROOT,
                            env=child_env(settings), stdout=open(log, "wb"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def wait_for(done, proc: subprocess.Popen, log: Path, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if done():
                return
        except Exception:  # noqa: BLE001  (the table may not exist yet)
            pass
        assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
        time.sleep(0.25)
    raise AssertionError(f"not done within {timeout}s: {log.read_text(errors='replace')[-3000:]}")


def test_migration_while_a_continuous_run_ingests_and_readers_query(broker, spark, mig_settings, topic, tmp_path):
    settings = mig_settings
    began = time.monotonic()

    def phase(what: str) -> None:
        print(f"[{time.monotonic() - began:6.1f}s] {what}", flush=True)

    ref = new_topic(settings, broker, topic)
    produce(settings, topic, generated(400, 40, seed=61, tombstones=0.03), ref)
    keys = sorted({r.key.decode() for r in ref.records if r.key})
    # The v1 stream runs in its own process (the checkpoint's writer), from the first record on. The
    # server starts beside it: it answers health 503 until the first snapshot is published.
    live = cli(settings, tmp_path / "run-v1.log", "run", STORE, "--continuous", "--trigger", "1s", "--quiet")
    port = free_port()
    server = cli(settings, tmp_path / "serve.log", "serve", "--port", str(port), "--log-level", "warning")
    base = f"http://127.0.0.1:{port}"
    stop = threading.Event()
    answers: list[tuple[int, int | None, frozenset[str]]] = []
    failures: list[str] = []

    def read(seed: int) -> None:
        rng = random.Random(seed)
        with httpx.Client(base_url=base, timeout=30) as client:
            while not stop.is_set():
                params = {"consistency": rng.choice(["snapshot", "committed"])}
                try:
                    answer = client.get(f"/stores/{STORE}/keys/{rng.choice(keys)}", params=params)
                except httpx.HTTPError as e:
                    failures.append(f"{type(e).__name__}: {e}")
                    continue
                if answer.status_code == 404:
                    answers.append((404, None, frozenset()))
                elif answer.status_code != 200:
                    failures.append(f"{answer.status_code} {answer.text[:300]}")
                else:
                    body = answer.json()
                    value_fields = frozenset(body["value"]) & (SHAPES[1] | SHAPES[2])
                    answers.append((200, body["meta"]["schema_version"], value_fields))
                stop.wait(READ_PAUSE_S)

    def feed() -> None:
        for i in range(25):
            produce(settings, topic, generated(20, 40, seed=700 + i, tombstones=0.03), ref)
            time.sleep(0.4)

    readers: list[threading.Thread] = []
    try:
        wait_for(lambda: intake_totals(spark, settings)["records_in"] == len(ref.records), live,
                 tmp_path / "run-v1.log")
        phase("v1 caught up")
        publish_snapshot(spark, settings, [load_store(settings, STORE)])
        phase("published")
        wait_healthy(server, f"{base}/health", timeout=120)
        phase("healthy")
        readers = [threading.Thread(target=read, args=(i,)) for i in range(READERS)]
        producer = threading.Thread(target=feed)
        for t in [*readers, producer]:
            t.start()
        steps.start(spark, settings, STORE, 2)  # beside the running v1 stream
        phase("v2 started")
        publish_snapshot(spark, settings, [load_store(settings, STORE)])
        phase("v2 published")
        producer.join()
        phase("producer done")
        assert live.poll() is None, (tmp_path / "run-v1.log").read_text()[-3000:]
        steps.cutover(spark, settings, STORE, wait_s=120)
        phase("cutover")
        assert live.wait(timeout=60) == 0
        phase("v1 exited")
        # Readers go on against the v2 snapshot, for a few answers per reader.
        after_cutover = len(answers)
        deadline = time.monotonic() + 60
        while (sum(1 for _, version, _ in answers[after_cutover:] if version == 2) < 3 * READERS
               and time.monotonic() < deadline):
            time.sleep(0.05)
    finally:
        stop.set()
        for proc in (server, live):
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=60)
    for t in readers:
        t.join(timeout=60)
    phase("stopped")

    assert "being cut over" in (tmp_path / "run-v1.log").read_text(errors="replace")
    assert failures == []
    served = [(version, fields) for status, version, fields in answers if status == 200]
    assert {version for version, _ in served} == {1, 2}, "reads must span the cutover"
    assert all(fields == SHAPES[version] for version, fields in served)
    phase(f"{len(answers)} answers")
    assert approx_v2(snapshot_rows(settings, V2_FIELDS)) == approx_v2(expected_v2(ref.records, settings.max_value_bytes))
