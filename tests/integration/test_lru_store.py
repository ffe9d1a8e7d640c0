"""An LRU key-value store (max_entries) through the real broker, Spark, Delta and DuckDB: the
published snapshot equals the independent reference (support.reference.expected_lru) across
micro-batches and a restore, every eviction is a changelog delete with reason 'evicted', and the
counts reconcile."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
import yaml
from pyspark.sql import functions as F
from support.reference import VALUE_FIELDS, expected_lru
from support.store_checks import generated, new_topic, produce

from deltastate.changelog.layout import DELETE_REASON, REASON_EVICTED
from deltastate.changelog.rules import latest_per_key
from deltastate.engine import run_store
from deltastate.maintenance.inspect import inspect_store
from deltastate.maintenance.restore import restore_store
from deltastate.query import Queries
from deltastate.snapshot import publish_snapshot
from deltastate.stores import load_store

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]
REPO_SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
STORE = "players_lru"
MAX_ENTRIES = 10


@pytest.fixture
def lru_settings(make_settings, tmp_path):
    schemas = tmp_path / "schemas"
    shutil.copytree(REPO_SCHEMAS, schemas)
    raw = yaml.safe_load((REPO_SCHEMAS / "stores" / "player_stats.yaml").read_text())
    raw.update(name=STORE, max_entries=MAX_ENTRIES)
    raw.pop("migrations")  # an LRU store cannot be migrated
    (schemas / "stores" / f"{STORE}.yaml").write_text(yaml.safe_dump(raw))
    return dataclasses.replace(make_settings(), schemas_dir=schemas)


def published(spark, settings) -> dict[str, dict[str, int]]:
    publish_snapshot(spark, settings, [load_store(settings, STORE)])
    with Queries(settings) as queries:
        return {r["key"]: {f: r[f] for f in VALUE_FIELDS} for r in queries.all(STORE).rows}


def latest_changelog(spark, settings) -> dict[str, tuple[str, str | None]]:
    changelog = spark.read.format("delta").load(settings.table_path(STORE, "changelog"))
    return {r["key"]: (r["op"], r[DELETE_REASON])
            for r in latest_per_key(changelog, ["key"], ["op", DELETE_REASON], live_only=False).select("key", "op", DELETE_REASON).collect()}


def test_lru_store_equals_the_reference_across_batches_and_a_restore(broker, spark, lru_settings, topic):
    settings = lru_settings
    store = load_store(settings, STORE)
    ref = new_topic(settings, broker, topic)
    rounds = [generated(300, 30, seed=21, tombstones=0.05), generated(200, 30, seed=22, tombstones=0.05)]
    for records in rounds:
        produce(settings, topic, records, ref)
        run_store(settings, STORE, once=True, topic=topic)
    want = expected_lru(ref.records, store.lru_capacity, settings.max_value_bytes)
    assert want.evicted, "the stream must evict for this test to mean anything"
    assert published(spark, settings) == want.state
    latest = latest_changelog(spark, settings)
    assert {k for k, (op, reason) in latest.items() if reason == REASON_EVICTED} == want.evicted
    assert all(op == "delete" for k, (op, _) in latest.items() if k in want.evicted)
    shown = inspect_store(spark, settings, STORE, topic_ends={p: 0 for p in range(4)}).state
    assert (shown["max_entries"], shown["per_partition"]) == (MAX_ENTRIES, [store.lru_capacity(p) for p in range(4)])

    # A lost checkpoint: restore rebuilds the map (keys and their recency) from the changelog.
    shutil.rmtree(settings.checkpoint_path(STORE))
    restore_store(settings, STORE, spark=spark)
    produce(settings, topic, generated(200, 30, seed=23, tombstones=0.05), ref)
    run_store(settings, STORE, once=True, topic=topic)
    want = expected_lru(ref.records, store.lru_capacity, settings.max_value_bytes)
    assert published(spark, settings) == want.state
    assert len(want.state) <= MAX_ENTRIES

    intake = spark.read.format("delta").load(settings.table_path(STORE, "intake"))
    totals = intake.agg(*[F.sum(c).alias(c) for c in ("records_in", "applied", "dead_lettered")]).first()
    assert (totals["records_in"], totals["applied"], totals["dead_lettered"]) == (
        want.records_in, want.applied, want.dead_lettered)
    assert totals["records_in"] == totals["applied"] + totals["dead_lettered"]
