"""kill -9 of `deltastate migrate start` and of `deltastate migrate cutover` (real CLI processes with
their Spark JVMs), each rerun to completion: the new version, seeded from the live state (the topic
was truncated, so the plan says the new aggregation defaults going forward), equals the reference
under that rule with no record lost or applied twice. Four kill moments per step, under `make soak`
(`pytest -m soak`); the suite's kill -9 trials are tests/integration/test_crash_trials.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from pyspark.sql import functions as F
from support.migration import approx_v2, migration_settings, snapshot_rows
from support.reference import V2_FIELDS, expected_v2
from support.store_checks import STORE, generated, new_topic, produce

from deltastate.bench.soak import child_env, group_alive
from deltastate.config import PROJECT_ROOT
from deltastate.migration.plan import plan_migration
from deltastate.stores import load_store
from deltastate.stores.current import read_record

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]


def cli(settings, log: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "deltastate.cli.main", *args], cwd=PROJECT_ROOT,
                            env=child_env(settings), stdout=open(log, "ab"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def completed(settings, log: Path, *args: str) -> None:
    proc = cli(settings, log, *args)
    assert proc.wait(timeout=600) == 0, log.read_text(errors="replace")[-4000:]


def kill9_after(settings, log: Path, phase: str, delay: float, *args: str) -> bool:
    """Starts the command, kills its process group delay seconds after the migration reaches `phase`;
    True when the kill found it still working."""
    proc = cli(settings, log, *args)
    deadline = time.monotonic() + 300
    while getattr(read_record(settings, STORE).migration, "phase", None) != phase:
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")[-4000:]
        time.sleep(0.1)
    time.sleep(delay)
    killed = proc.poll() is None
    if killed:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    deadline = time.monotonic() + 60
    while group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    return killed


@pytest.mark.soak
@pytest.mark.parametrize("delay", [pytest.param(d, id=f"kill-{d:g}s") for d in (0.5, 2, 4, 6)])
def test_kill9_during_start_and_cutover_then_rerun(broker, spark, make_settings, tmp_path, topic, delay):
    settings = migration_settings(make_settings(), tmp_path / "schemas", topic)
    log = tmp_path / "cli.log"
    ref = new_topic(settings, broker, topic)
    produce(settings, topic, generated(400, 40, seed=81, tombstones=0.04), ref)
    completed(settings, log, "run", STORE, "--quiet")
    admin = AdminClient({"bootstrap.servers": broker})
    for future in admin.delete_records([TopicPartition(topic, p, 3) for p in range(4)]).values():
        future.result(timeout=30)
    # The topic no longer holds v1's whole history: the new aggregation defaults going forward.
    plan = plan_migration(spark, settings, load_store(settings, STORE), load_store(settings, STORE, 2))
    assert not plan.covered and "retention" in plan.reason and plan.build == "seed"
    assert {f.field: f.strategy for f in plan.fields}["last_game_id"] == "default"

    killed = [kill9_after(settings, log, "building", delay, "migrate", "start", STORE, "--to", "2")]
    completed(settings, log, "migrate", "start", STORE, "--to", "2")
    # Records v2 has not seen: the cutover's catch-up takes them (test_migration.py also runs v1 on
    # during the build; here every JVM start is a CLI process, so the trial keeps to the steps killed).
    produce(settings, topic, generated(400, 40, seed=82, tombstones=0.04), ref)
    killed.append(kill9_after(settings, log, "cutover", delay, "migrate", "cutover", STORE))
    completed(settings, log, "migrate", "cutover", STORE)

    assert killed[0], "the start must be killed mid-way (seeding and the first run take longer than any delay)"
    assert f"[migrate {STORE} v2] batch" in log.read_text(errors="replace")  # the catch-up's per-batch progress
    record = read_record(settings, STORE)
    assert record.current == 2 and record.migration.phase == "cut-over"
    seeded_at = dict(record.migration.seed_offsets)
    assert approx_v2(snapshot_rows(settings, V2_FIELDS)) == approx_v2(
        expected_v2(ref.records, settings.max_value_bytes, seeded_at=seeded_at))
    changelog = spark.read.format("delta").load(settings.table_path(f"{STORE}.v2", "changelog"))
    assert changelog.groupBy("epoch", "batch_id", "key").count().where(F.col("count") > 1).count() == 0
    audited = spark.read.format("delta").load(settings.table_path(f"{STORE}.v2", "intake")) \
        .agg(F.sum("records_in")).first()[0]
    assert audited == sum(1 for r in ref.records if r.offset >= seeded_at[r.partition])  # each record once
    print(json.dumps({"delay": delay, "killed": killed, "seeded_at": seeded_at, "audited": audited}))
