"""`deltastate inspect` describes a real store on disk: its figures agree with the produced records
(the reference), the topic's lag, the tables read directly, and the restore that measured a rate.
Run as a user runs it too: `deltastate inspect` in a new process, whose Spark session has never
started a streaming query, after one micro-batch and after several."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.reference import expected
from support.store_checks import STORE, event, generated, new_topic, produce

from deltastate.bench.soak import child_env
from deltastate.cli.main import cli
from deltastate.engine import run_store
from deltastate.maintenance.inspect import inspect_store
from deltastate.maintenance.restore import restore_store
from deltastate.snapshot import publish_snapshot
from deltastate.stores.state import PROVIDERS

pytestmark = pytest.mark.integration
DELTASTATE = str(Path(sys.executable).parent / "deltastate")


def ends(records) -> dict[int, int]:
    """Partition -> end offset (one past the newest record), from the reference topic."""
    out: dict[int, int] = {}
    for r in records:
        out[r.partition] = max(out.get(r.partition, 0), r.offset + 1)
    return out


def test_inspect_reports_a_real_store(broker, spark, make_settings, topic):
    settings = make_settings()
    ref = new_topic(settings, broker, topic)
    bad = [(b"p-x", b"{not json"), (b"p-y", event("p-z", 5, 1)), (b"p-w", event("p-w", -3, 1))]
    produce(settings, topic, generated(800, 60, seed=5, tombstones=0.05) + bad, ref)
    result = run_store(settings, STORE, once=True, topic=topic)
    publish_snapshot(spark, settings)
    exp = expected(ref.records, settings.max_value_bytes)
    changelog = spark.read.format("delta").load(settings.table_path(STORE, "changelog"))

    seen = inspect_store(spark, settings, STORE, topic_ends=None)
    assert seen.state["provider_class"] == seen.state["checkpoint_provider_class"] == PROVIDERS["rocksdb"]
    assert seen.state["settings"]["spark.sql.streaming.stateStore.rocksdb.compression"] == "lz4"
    assert (seen.checkpoint["lineage_id"], seen.checkpoint["epoch"]) == (result.lineage.lineage_id, result.lineage.epoch)
    assert seen.checkpoint["committed_batch"] == seen.checkpoint["planned_batch"] is not None
    assert seen.source["topic"] == topic
    assert seen.source["committed_offsets"] == ends(ref.records) == seen.source["end_offsets"]
    assert set(seen.source["lag"].values()) == {0}
    shards = seen.state_shards
    assert len(shards) == int(spark.conf.get("spark.sql.shuffle.partitions"))
    assert sum(s["rows"] for s in shards) >= len(exp.state) and all(s["bytes"] > 0 for s in shards)
    assert seen.changelog["records"] == changelog.count() and seen.changelog["live_keys"] == len(exp.state)
    assert seen.changelog["dirty_ratio"] == round((changelog.count() - len(exp.state)) / changelog.count(), 4)
    assert [(s["current"], s["rows"]) for s in seen.snapshots] == [(True, len(exp.state))]
    assert seen.snapshots[0]["changelog_version"] == seen.changelog["version"]
    assert seen.dead_letters == dict(exp.categories) and sum(seen.dead_letters.values()) == len(bad)
    assert seen.restore["measured"] is False

    # Records produced after the run are the lag, per partition.
    more = generated(90, 60, seed=6)
    produce(settings, topic, more, ref)
    lagging = inspect_store(spark, settings, STORE)
    added = Counter(r.partition for r in ref.records[-len(more):])
    assert lagging.source["lag"] == {p: added.get(p, 0) for p in lagging.source["end_offsets"]}

    # A restore measures its rate; inspect estimates the next one from it.
    restored = restore_store(settings, STORE, spark=spark)
    after = inspect_store(spark, settings, STORE)
    assert after.restore["measured"] and after.restore["live_keys"] == restored.records_restored == len(exp.state)
    assert after.restore["estimated_seconds"] == pytest.approx(restored.seconds, rel=0.01, abs=0.2)
    assert after.checkpoint["epoch"] == restored.epoch and after.checkpoint["committed_batch"] is None

    printed = CliRunner().invoke(cli, ["inspect", STORE, "--json"], obj=settings)
    assert printed.exit_code == 0, printed.output
    assert json.loads(printed.output)["changelog"]["live_keys"] == len(exp.state)


def start_inspect(settings) -> subprocess.Popen:
    """`deltastate inspect STORE --json` as a user runs it: its own process and Spark session. The
    test reads its reference figures in this process while the command starts."""
    return subprocess.Popen([DELTASTATE, "inspect", STORE, "--json"], env=child_env(settings), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def inspected(running: subprocess.Popen, code: int = 0) -> subprocess.CompletedProcess:
    """The finished inspect: no traceback or Java stack trace, the exit status expected."""
    try:
        stdout, stderr = running.communicate(timeout=600)
    except BaseException:
        os.killpg(running.pid, signal.SIGKILL)  # the CLI and its Spark JVM
        running.communicate()
        raise
    proc = subprocess.CompletedProcess(running.args, running.returncode, stdout, stderr)
    for stream in (proc.stdout, proc.stderr):
        assert "at org.apache" not in stream and "Traceback" not in stream, stream[-3000:]
    assert proc.returncode == code, proc.stderr[-3000:]
    return proc


def shard_rows(spark, settings) -> dict[int, int]:
    """Rows per state shard, read here with Spark's state data source directly."""
    path = f"{settings.checkpoint_path(STORE)}/stream"
    return {int(r["partition_id"]): int(r["count"])
            for r in spark.read.format("statestore").load(path).groupBy("partition_id").count().collect()}


def test_inspect_in_a_new_process_after_one_batch_and_after_several(broker, spark, make_settings, topic):
    settings = make_settings()
    ref = new_topic(settings, broker, topic)
    produce(settings, topic, generated(600, 50, seed=21, tombstones=0.05), ref)
    first = run_store(settings, STORE, once=True, topic=topic)
    assert first.batches == 1

    running = start_inspect(settings)
    shards = shard_rows(spark, settings)
    seen = json.loads(inspected(running).stdout)  # the JSON alone: Spark logs to stderr
    exp = expected(ref.records, settings.max_value_bytes)
    assert seen["checkpoint"]["committed_batch"] == 0
    assert {int(p): o for p, o in seen["source"]["committed_offsets"].items()} == ends(ref.records)
    assert {s["shard"]: s["rows"] for s in seen["state_shards"]} == shards
    assert seen["changelog"]["live_keys"] == len(exp.state)

    # Several more micro-batches (a bounded read per trigger), then a new process again.
    produce(settings, topic, generated(700, 50, seed=22, tombstones=0.05), ref)
    more = run_store(settings, STORE, once=True, topic=topic, max_offsets_per_trigger=200)
    assert more.batches >= 3
    running = start_inspect(settings)
    shards = shard_rows(spark, settings)
    seen = json.loads(inspected(running).stdout)  # the JSON alone: Spark logs to stderr
    exp = expected(ref.records, settings.max_value_bytes)
    assert seen["checkpoint"]["committed_batch"] == seen["checkpoint"]["planned_batch"] >= 3
    assert {int(p): o for p, o in seen["source"]["committed_offsets"].items()} == ends(ref.records)
    assert {s["shard"]: s["rows"] for s in seen["state_shards"]} == shards
    assert sum(s["rows"] for s in seen["state_shards"]) >= len(exp.state)
    assert seen["changelog"]["live_keys"] == len(exp.state)

    # A shard's state folder lost: one line says what is missing and what to do, exit status 2.
    shutil.rmtree(Path(settings.checkpoint_path(STORE), "stream", "state", "0", "1"))
    proc = inspected(start_inspect(settings), code=2)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.stdout == "" and last.startswith("error: store 'player_stats'") and "shard(s) [1]" in last, last
    assert f"deltastate restore {STORE}" in last
